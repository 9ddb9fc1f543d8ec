"""The demo repository's files as the refactor leaves them (`swarm._demo.script` edits
the shipped files in `repo/` into these). Kept as text so swarm's own linters skip them."""

from __future__ import annotations

__all__ = [
    "ITEM",
    "PRICING",
    "PRICING_WITH_BUG",
    "README",
    "REPORT",
    "STOCK",
    "TEST_ITEM",
    "TEST_PRICING",
    "TEST_REPORT",
    "TEST_STOCK",
]

ITEM = '''\
"""The Item dataclass: one line of an order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Item:
    """What is ordered, at what unit price, and how many."""

    name: str
    price: float
    qty: int

    @property
    def subtotal(self) -> float:
        """The line's price before discounts."""
        return round(self.price * self.qty, 2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Item:
        """An Item from the legacy {"name", "price", "qty"} dict."""
        return cls(name=str(data["name"]), price=float(data["price"]), qty=int(data["qty"]))
'''

TEST_ITEM = """\
import dataclasses

import pytest

from inventory import Item


def test_subtotal_is_price_times_quantity():
    assert Item("bolt", 0.25, 4).subtotal == 1.0


def test_from_dict_reads_the_legacy_shape():
    assert Item.from_dict({"name": "nut", "price": "0.1", "qty": "5"}) == Item("nut", 0.1, 5)


def test_items_are_frozen():
    item = Item("bolt", 0.25, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.qty = 5
"""

PRICING = '''\
"""Prices for orders: an order is a sequence of `Item`s."""

from __future__ import annotations

from collections.abc import Iterable

from inventory.item import Item

BULK_THRESHOLD = 10
"""Lines of at least this many units get the bulk discount."""
BULK_DISCOUNT = 5.0
"""The bulk discount, in percent."""


def apply_discount(price: float, percent: float) -> float:
    """Return price reduced by percent (0-100), rounded to cents."""
    return round(price * (100 - percent) / 100, 2)


def order_total(items: Iterable[Item]) -> float:
    """Total price of an order; lines of BULK_THRESHOLD units or more get BULK_DISCOUNT% off."""
    total = 0.0
    for item in items:
        line = item.subtotal
        if item.qty >= BULK_THRESHOLD:
            line = apply_discount(line, BULK_DISCOUNT)
        total += line
    return round(total, 2)
'''

REPORT = '''\
"""Plain-text order summaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from inventory.item import Item
from inventory.pricing import order_total
from inventory.stock import in_stock


def summary(items: Sequence[Item], stock: Mapping[str, int]) -> str:
    """One line per order line with its stock status, then the order total."""
    lines = []
    for item in items:
        status = "in stock" if in_stock(stock, item.name) else "backorder"
        lines.append(f"{item.name}: {item.qty} x {item.price:.2f} ({status})")
    lines.append(f"total: {order_total(items):.2f}")
    return "\\n".join(lines)
'''

TEST_PRICING = """\
from inventory.item import Item
from inventory.pricing import apply_discount, order_total


def test_apply_discount():
    assert apply_discount(200.0, 5) == 190.0


def test_total_sums_lines():
    assert order_total([Item("bolt", 0.25, 4), Item("nut", 0.1, 5)]) == 1.5


def test_bulk_lines_are_discounted():
    assert order_total([Item("nut", 0.1, 40)]) == 3.8


def test_empty_order_is_free():
    assert order_total([]) == 0.0
"""

TEST_REPORT = """\
from inventory.item import Item
from inventory.report import summary


def test_summary_lists_lines_and_total():
    items = [Item("bolt", 0.5, 10), Item("gear", 12.0, 1)]
    assert summary(items, {"bolt": 3}).splitlines() == [
        "bolt: 10 x 0.50 (in stock)",
        "gear: 1 x 12.00 (backorder)",
        "total: 16.75",
    ]
"""

STOCK = '''\
"""Stock levels, kept as a {name: quantity} mapping."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

LOW_STOCK = 5
"""Levels below this count as running low."""


def in_stock(stock: Mapping[str, int], name: str) -> bool:
    """True if at least one unit of name is in stock."""
    return stock.get(name, 0) > 0


def restock(stock: MutableMapping[str, int], name: str, qty: int) -> int:
    """Add qty units of name; return the new level."""
    if qty <= 0:
        raise ValueError("restock quantity must be positive")
    stock[name] = stock.get(name, 0) + qty
    return stock[name]


def low_stock(stock: Mapping[str, int], threshold: int = LOW_STOCK) -> list[str]:
    """The names whose level is below threshold, sorted."""
    return sorted(name for name, level in stock.items() if level < threshold)
'''

TEST_STOCK = """\
import pytest

from inventory.stock import in_stock, low_stock, restock


def test_restock_adds_to_the_level():
    stock = {"bolt": 2}
    assert restock(stock, "bolt", 3) == 5
    assert in_stock(stock, "bolt")


def test_unknown_items_are_out_of_stock():
    assert not in_stock({}, "gear")


def test_restock_rejects_non_positive_quantities():
    with pytest.raises(ValueError, match="positive"):
        restock({}, "bolt", 0)


def test_low_stock_lists_names_below_the_threshold():
    stock = {"gear": 1, "bolt": 50, "nut": 4, "washer": 5}
    assert low_stock(stock) == ["gear", "nut"]
    assert low_stock(stock, threshold=2) == ["gear"]
"""

README = """\
# inventory

A tiny stock and pricing library. It is the demo repository of `swarm solve`:
`tasks/refactor.md` asks a swarm of agents to modernise it.

```python
from inventory import Item, low_stock, order_total, summary

items = [Item("bolt", 0.5, 10), Item.from_dict({"name": "gear", "price": 12.0, "qty": 1})]
print(order_total(items))          # 16.75: ten or more units of one item get 5% off
print(summary(items, {"bolt": 3}))
print(low_stock({"bolt": 3, "gear": 40}))  # ['bolt']
```

Run the tests with `python -m pytest -q`.
"""

PRICING_WITH_BUG = PRICING.replace("item.qty >= BULK_THRESHOLD", "item.qty > BULK_THRESHOLD")
"""The off-by-one the demo's pricing coder slips in: ten units no longer get the discount."""
