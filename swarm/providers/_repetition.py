"""A reply that loops on itself: the same text over and over, as a small model's sampling
falls into a cycle (Qwen2.5-Coder-1.5B on two CPU cores wrote 2,700 tokens of one reply
at 3 tokens/s and was not done). Without a cap, such a reply runs until the server's
context is full: on a CPU server, an hour. `loop_start` finds it while it streams, so the
adapter can stop reading and end the reply as `finish_reason: "repetition"`.

The unit may be a line or a whole file: the same model wrote one 1,100-character fenced
`pricing.py` 30 times over (10,100 tokens, 20 minutes) until its context was full. Units
up to `MAX_PERIOD` characters are looked for one period at a time; longer ones, up to
`MAX_LONG_PERIOD`, from where the reply's last `_PROBE` characters came before, and
`LONG_REPEATS` whole copies of one that long are a loop."""

from __future__ import annotations

__all__ = ["REPETITION", "LoopWatch", "loop_start"]

REPETITION = "repetition"
"""The finish reason of a reply stopped because it looped."""

MIN_CHARS = 1_200
"""How much text one unit repeated must cover before it counts as a loop: more than any
legitimate run of identical text (a ruler line, a table of zeros) is likely to."""
MIN_REPEATS = 6
"""How many times in a row the unit must come."""
MAX_PERIOD = 600
"""The longest unit looked for (a paragraph, or a few lines of code)."""
MAX_LONG_PERIOD = 16_000
"""The longest unit looked for at all (a file written out again and again)."""
LONG_REPEATS = 3
"""How many times in a row a unit longer than `MAX_PERIOD` must come: three copies of
600 characters or more, verbatim, are no accident of prose or code."""
CHECK_EVERY = 128
"""Streamed pieces between two looks (about 500 characters)."""
_PROBE = 200
"""The reply's last characters whose earlier places give the long units to try."""
_LONG_TRIES = 16
"""Earlier places of the probe tried per look, nearest first."""


def loop_start(text: str) -> int | None:
    """Where the loop `text` ends in begins (the end of the unit's first copy), or None.

    A loop: the last `max(MIN_CHARS, MIN_REPEATS * p)` characters repeat with one period
    `p`, the shortest such. Each period is one slice comparison done in C, so a look at a
    long reply costs about a millisecond."""
    size = len(text)
    for period in range(1, min(MAX_PERIOD, size // MIN_REPEATS) + 1):
        span = max(MIN_CHARS, MIN_REPEATS * period)
        if span + period > size:
            break
        if text[size - span :] == text[size - span - period : size - period]:
            return _first_round_end(text, size - span - period, period)
    return _long_loop_start(text)


def _long_loop_start(text: str) -> int | None:
    """`loop_start` for a unit longer than `MAX_PERIOD`: each earlier place of the text's
    last `_PROBE` characters (nearest first) is a period to try."""
    size = len(text)
    if size < (LONG_REPEATS + 1) * MAX_PERIOD:
        return None
    probe = text[size - _PROBE :]
    before = size - _PROBE  # the probe's earlier places start before this
    for _ in range(_LONG_TRIES):
        found = text.rfind(probe, max(0, size - _PROBE - MAX_LONG_PERIOD), before + _PROBE - 1)
        if found < 0:
            return None
        period = size - _PROBE - found
        span = LONG_REPEATS * period
        if span + period > size:
            return None
        if (
            period > MAX_PERIOD
            and text[size - span :] == text[size - span - period : size - period]
        ):
            return _first_round_end(text, size - span - period, period)
        before = found
    return None


def _first_round_end(text: str, start: int, period: int) -> int:
    """Where the first round of a cycle of `period` found from `start` on ends."""
    while start > 0 and text[start - 1] == text[start - 1 + period]:
        start -= 1  # back to where the cycle began
    end = start + period  # one round kept, ending on a line's end if it has one
    newline = text.find("\n", end - 1, end + period - 1)
    return end if newline < 0 else newline + 1


class LoopWatch:
    """Looks at a growing list of streamed pieces every `CHECK_EVERY` pieces."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = CHECK_EVERY

    def cut(self, pieces: list[str], skip: int = 0) -> str | None:
        """The text to keep when `pieces` (after the first `skip`) now end in a loop (one
        copy of the unit kept), else None."""
        if len(pieces) - skip < self._next:
            return None
        self._next = len(pieces) - skip + CHECK_EVERY
        text = "".join(pieces[skip:])
        start = loop_start(text)
        return None if start is None else text[:start]
