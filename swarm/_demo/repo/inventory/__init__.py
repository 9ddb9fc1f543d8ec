"""inventory: a tiny stock and pricing library (the demo repository of `swarm solve`)."""

from inventory.pricing import apply_discount, calc_total
from inventory.report import summary
from inventory.stock import in_stock, restock

__all__ = ["apply_discount", "calc_total", "in_stock", "restock", "summary"]
