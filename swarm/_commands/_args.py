"""Argument types for the `swarm` parsers: numbers with a range, ports, URLs.

Each is an argparse `type=`: a bad value becomes argparse's own usage error, which names
the option (`argument --agents: must be 1 or more, got 0`) and exits with status 2, before
any work starts.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from urllib.parse import urlsplit

__all__ = ["at_least", "http_url", "port", "positive_seconds", "seconds"]


def at_least(low: int) -> Callable[[str], int]:
    """An integer `low` or more (`at_least(1)` for counts of agents, steps, tokens)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {low} or more, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def seconds(text: str) -> float:
    """A finite number, 0 or more (seconds, a time scale)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, got {text}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number above 0 (a timeout or a deadline: 0 or less would end at once)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    value = at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def http_url(text: str) -> str:
    """An http(s) URL with a host."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected http://HOST[:PORT][/PATH], got {text!r}")
    return text
