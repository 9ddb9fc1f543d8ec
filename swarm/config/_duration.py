"""Human durations: `"15m"`, `"90s"`, `"1h30m"`, `"1.5h"`, `"250ms"` to seconds and back.

Used by task files (`deadline: 15m`), config, and the rate-limit headers providers send
(`x-ratelimit-reset-tokens: 6m0s`). A bare number means seconds.
"""

from __future__ import annotations

import math
import re

__all__ = ["format_duration", "parse_duration", "parse_duration_s"]

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
# `ms` must be tried before `m` so "250ms" is not read as 250 minutes then "s".
_PART = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|d|h|m|s)", re.IGNORECASE)
_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*")


def parse_duration(value: str | float | int) -> float:
    """Seconds in `value`; raises ValueError saying what a duration looks like.

    Accepts parts with units d/h/m/s/ms in any combination (`1h30m`, `2m 30s`), or a bare
    number of seconds (`90`, `"90"`). Negative, empty and non-finite values are refused.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{value!r} is not a duration of zero or more seconds")
        return float(value)
    text = value.strip()
    if bare := _NUMBER.fullmatch(text):
        return float(bare.group(1))
    total = 0.0
    pos = 0
    while pos < len(text):
        part = _PART.match(text, pos)
        if part is None:
            break
        total += float(part.group(1)) * _UNITS[part.group(2).lower()]
        pos = part.end()
    if pos == 0 or text[pos:].strip():
        raise ValueError(f'{value!r} is not a duration like "15m", "90s" or "1h30m"')
    return total


def parse_duration_s(value: str | None) -> float | None:
    """Seconds in `value`, or None when it is missing or not a duration.

    The lenient form of `parse_duration`, for values read off the wire (a provider's
    `x-ratelimit-reset-*` header: `1s`, `6m0s`, `250ms`), where a bad value means "unknown".
    """
    if not value:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return None


def format_duration(seconds: float) -> str:
    """A short label: 0.25 -> `250ms`, 90 -> `1m30s`, 5400 -> `1h30m`."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return "".join(parts) or "0s"
