"""Plain-text order summaries."""

from inventory.pricing import calc_total
from inventory.stock import in_stock


def summary(items, stock):
    """One line per order line with its stock status, then the order total."""
    lines = []
    for item in items:
        status = "in stock" if in_stock(stock, item["name"]) else "backorder"
        lines.append(f"{item['name']}: {item['qty']} x {item['price']:.2f} ({status})")
    lines.append(f"total: {calc_total(items):.2f}")
    return "\n".join(lines)
