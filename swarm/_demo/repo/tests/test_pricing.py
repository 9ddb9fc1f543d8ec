from inventory.pricing import apply_discount, calc_total


def test_apply_discount():
    assert apply_discount(200.0, 5) == 190.0


def test_total_sums_lines():
    items = [{"name": "bolt", "price": 0.25, "qty": 4}, {"name": "nut", "price": 0.1, "qty": 5}]
    assert calc_total(items) == 1.5


def test_bulk_lines_are_discounted():
    assert calc_total([{"name": "nut", "price": 0.1, "qty": 40}]) == 3.8


def test_empty_order_is_free():
    assert calc_total([]) == 0.0
