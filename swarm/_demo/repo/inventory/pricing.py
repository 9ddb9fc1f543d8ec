"""Prices for orders: an order is a list of {"name", "price", "qty"} dicts."""

BULK_THRESHOLD = 10
BULK_DISCOUNT = 5


def apply_discount(price, percent):
    """Return price reduced by percent (0-100), rounded to cents."""
    return round(price * (100 - percent) / 100, 2)


def calc_total(items):
    """Total price of an order; lines of BULK_THRESHOLD units or more get BULK_DISCOUNT% off."""
    total = 0.0
    for item in items:
        line = item["price"] * item["qty"]
        if item["qty"] >= BULK_THRESHOLD:
            line = apply_discount(line, BULK_DISCOUNT)
        total += line
    return round(total, 2)
