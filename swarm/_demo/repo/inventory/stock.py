"""Stock levels, kept as a {name: quantity} dict."""


def in_stock(stock, name):
    """True if at least one unit of name is in stock."""
    return stock.get(name, 0) > 0


def restock(stock, name, qty):
    """Add qty units of name; return the new level."""
    if qty <= 0:
        raise ValueError("restock quantity must be positive")
    stock[name] = stock.get(name, 0) + qty
    return stock[name]
