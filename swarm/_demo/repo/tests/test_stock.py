import pytest

from inventory.stock import in_stock, restock


def test_restock_adds_to_the_level():
    stock = {"bolt": 2}
    assert restock(stock, "bolt", 3) == 5
    assert in_stock(stock, "bolt")


def test_unknown_items_are_out_of_stock():
    assert not in_stock({}, "gear")


def test_restock_rejects_non_positive_quantities():
    with pytest.raises(ValueError, match="positive"):
        restock({}, "bolt", 0)
