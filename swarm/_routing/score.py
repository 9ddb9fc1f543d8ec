"""Live scores of one provider/model: decayed estimates of what its next call will be like.

`Score` holds exponentially decayed estimates of time to first token, decode rate, and the
error and 429 rates, seeded from the catalog profile (so a candidate never measured is
ranked by what it is published to do) and moved by each measured call. Updating and
reading are a few float operations: this is on every call's path.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Score"]

_FALLBACK_TTFT_S = 1.0
_FALLBACK_TPS = 50.0


class Score:
    """Decayed TTFT, decode rate and failure rates of one candidate."""

    __slots__ = ("alpha", "errors", "limited", "reasoning", "samples", "scale", "tps", "ttft")

    def __init__(self, profile: Any, alpha: float) -> None:
        self.alpha = alpha
        self.ttft = float(profile.ttft_s) if profile is not None else _FALLBACK_TTFT_S
        self.tps = float(profile.output_tps) if profile is not None else _FALLBACK_TPS
        self.reasoning = int(profile.reasoning_tokens) if profile is not None else 0
        """Hidden thinking tokens per call (decoded before the answer, at the same rate)."""
        self.errors = 0.0
        self.limited = 0.0
        self.samples = 0
        """Measured outcomes so far (successes and failures)."""
        self.scale = 1.0
        """A simulator's time scale: its measured durations are divided by it, so they are
        compared in the simulated seconds the profile speaks (0: measure nothing)."""

    def expected_s(self, out_tokens: int) -> float:
        """Expected duration of a call with `out_tokens` of answer, failures priced in: a
        call that fails half the time takes about twice as long to get an answer."""
        s = self.ttft + (self.reasoning + out_tokens) / self.tps
        return s / (1.0 - min(self.errors + self.limited, 0.9))

    def success(self, ttft_s: float, tps: float) -> None:
        a, scale = self.alpha, self.scale
        if scale <= 0:
            return
        if ttft_s > 0:
            self.ttft += a * (ttft_s / scale - self.ttft)
        if tps > 0:
            self.tps += a * (tps * scale - self.tps)
        self.errors -= a * self.errors
        self.limited -= a * self.limited
        self.samples += 1

    def failure(self, rate_limited: bool) -> None:
        a = self.alpha
        if rate_limited:
            self.limited += a * (1.0 - self.limited)
            self.errors -= a * self.errors
        else:
            self.errors += a * (1.0 - self.errors)
            self.limited -= a * self.limited
        self.samples += 1

    def waited(self, seconds: float) -> None:
        """A call cancelled before its first token (a hedge won): its TTFT is at least
        `seconds`, which is what a slowed provider looks like when hedges race it. Its
        decode rate cannot be seen, so it is assumed slowed by the same factor (an
        overloaded provider is slow at both); otherwise hedging would hide a slowdown."""
        if self.scale <= 0 or seconds / self.scale <= self.ttft:
            return
        bound, a = seconds / self.scale, self.alpha
        slower = bound / self.ttft
        self.ttft += a * (bound - self.ttft)
        self.tps -= a * (self.tps - self.tps / slower)

    def snapshot(self) -> dict[str, float]:
        return {
            "ttft_s": round(self.ttft, 4),
            "tps": round(self.tps, 1),
            "errors": round(self.errors, 3),
            "rate_limited": round(self.limited, 3),
        }
