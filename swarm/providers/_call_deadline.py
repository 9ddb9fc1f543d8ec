"""How long one model call may take in all: `total_timeout_s`, or from the model's speed.

The first-token deadline (`FirstTokenDeadline`) bounds the wait before a reply starts and
the stall timeout each silence after it, but a server that sends a token every 20 s, or
keep-alives and nothing else, passes both for as long as it likes, and every retry starts
them again. So a call also has a deadline for the whole: a fixed `total_timeout_s`, or its
first-token deadline plus the reply's tokens (`max_tokens`, else 1,024 plus the thinking
the catalog knows the model does) at its decode rate, times a margin for a server that
shares its compute among requests. The decode rate is the slower of the known one and
the one measured on this endpoint's replies (a local server on a busy machine writes a
fraction of its quiet speed), but never under `MIN_DECODE_TPS`: slower than that is a
drip, which the deadline is there to end. The router holds a candidate's retries, hedges and
backoffs to the same deadline, from its first try (and, until a reply starts, to two
first-token deadlines: `swarm._routing.candidate.Clock`).

A streamed reply with no `max_tokens` still being written when the deadline comes, and
already longer than the deadline allowed for (`tokens`), is a model that runs on, not a
slow server: it is not thrown away but ends there, as it stands, with `finish_reason:
"deadline"` (`DEADLINE_CUT`), and the agent is told it was cut. A small model that rambles for ten
minutes then loses one reply, not its subtask. A shorter one (a server dripping tokens)
fails the call, which fails over.
"""

from __future__ import annotations

__all__ = [
    "DEADLINE_CUT",
    "DEFAULT_OUTPUT_TOKENS",
    "MIN_DECODE_TPS",
    "UNKNOWN_DECODE_TPS",
    "CallDeadline",
]

DEADLINE_CUT = "deadline"
"""The finish reason of a streamed reply ended, as it stood, by its call's deadline."""

_MARGIN = 4.0
DEFAULT_OUTPUT_TOKENS = 1024
"""The reply's length when a request sets no `max_tokens`."""
UNKNOWN_DECODE_TPS = 10.0
"""Decode rate assumed for a model whose speed is not known: llama.cpp on two CPU cores
writes 5-20 tokens/s, every cloud more."""
MIN_DECODE_TPS = 1.0
"""The slowest measured decode rate a deadline follows (a 1.5B model on two loaded CPU
cores wrote 0.5-3 tokens/s; a server dripping a token every 20 s writes 0.05)."""
_MIN_MEASURED_TOKENS = 32
"""A reply shorter than this says little about the rate."""


class CallDeadline:
    """The whole-call deadline per model: fixed, or from the decode rate told by `expect`."""

    __slots__ = ("_fixed", "_measured", "_speeds")

    def __init__(self, fixed: float | None) -> None:
        self._fixed = fixed
        self._speeds: dict[str, tuple[float, int]] = {}  # model -> (decode tok/s, thinking)
        self._measured: dict[str, float] = {}  # model -> decode tok/s seen, smoothed

    def expect(self, model: str, decode_tps: float | None, reasoning_tokens: int = 0) -> None:
        """What `model` is known to do: tokens/s written (None: not known) and thinking
        tokens per reply."""
        self._speeds[model] = (decode_tps or UNKNOWN_DECODE_TPS, reasoning_tokens)

    def observe(self, model: str, output_tokens: int, decode_s: float) -> None:
        """A reply of `output_tokens` took `decode_s` after its first token: the measured
        rate decays toward it."""
        if output_tokens < _MIN_MEASURED_TOKENS or decode_s <= 0:
            return
        rate = output_tokens / decode_s
        seen = self._measured.get(model)
        self._measured[model] = rate if seen is None else 0.7 * seen + 0.3 * rate

    def seconds(self, model: str, max_tokens: int | None, first_s: float) -> tuple[float, object]:
        """The deadline of a call whose first-token deadline is `first_s`, and how it was
        set (its `str` is the error message's words: written only when one is shown, off
        the path of every call)."""
        if self._fixed is not None:
            return self._fixed, "total_timeout_s"
        tps = self._speeds.get(model, (UNKNOWN_DECODE_TPS, 0))[0]
        measured = self._measured.get(model)
        if measured is not None and measured < tps:
            tps = max(measured, MIN_DECODE_TPS)
        out = self.tokens(model, max_tokens)
        return first_s + _MARGIN * out / tps, _Why(first_s, out, tps)

    def tokens(self, model: str, max_tokens: int | None) -> int:
        """The reply's length a deadline allows for: `max_tokens`, else the default and
        the model's thinking."""
        if max_tokens is not None:
            return max_tokens
        return DEFAULT_OUTPUT_TOKENS + self._speeds.get(model, (0.0, 0))[1]


class _Why:
    """How a deadline from the model's speed was set, as the error message says it."""

    __slots__ = ("first_s", "out", "tps")

    def __init__(self, first_s: float, out: int, tps: float) -> None:
        self.first_s, self.out, self.tps = first_s, out, tps

    def __str__(self) -> str:
        return (
            f"total_timeout_s unset: {self.first_s:.0f} s for the first token + {_MARGIN:g} x "
            f"~{self.out / self.tps:.0f} s for {self.out:,} tokens at {self.tps:g} tok/s"
        )
