from inventory.report import summary


def test_summary_lists_lines_and_total():
    items = [{"name": "bolt", "price": 0.5, "qty": 10}, {"name": "gear", "price": 12.0, "qty": 1}]
    assert summary(items, {"bolt": 3}).splitlines() == [
        "bolt: 10 x 0.50 (in stock)",
        "gear: 1 x 12.00 (backorder)",
        "total: 16.75",
    ]
