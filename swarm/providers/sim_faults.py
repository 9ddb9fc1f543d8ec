"""How simulated calls fail: fault rates, and the provider-side quota behind 429s.

`Faults` says how often a call gets a 500, a 429, a dropped connection, a stalled stream
or a garbage chunk, and which per-minute quotas the simulated provider enforces. `Quota`
is one such bucket, refilled continuously on the caller's clock (virtual under trio's
test clock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from swarm.errors import ConfigError

__all__ = [
    "FAULT_DROP",
    "FAULT_ERROR",
    "FAULT_KINDS",
    "FAULT_MALFORMED",
    "FAULT_RATE_LIMIT",
    "FAULT_STALL",
    "Faults",
    "Quota",
]

FAULT_ERROR = "error"
FAULT_RATE_LIMIT = "rate_limit"
FAULT_DROP = "drop"
FAULT_STALL = "stall"
FAULT_MALFORMED = "malformed"
FAULT_KINDS = (FAULT_ERROR, FAULT_RATE_LIMIT, FAULT_DROP, FAULT_STALL, FAULT_MALFORMED)
"""In the order `SimEngine` draws them."""


@dataclass(frozen=True)
class Faults:
    """How often simulated calls fail, and how."""

    error_rate: float = 0.0
    """Share of calls answered with HTTP 500."""
    rate_limit_rate: float = 0.0
    """Share of calls answered with 429."""
    retry_after_s: float = 1.0
    """The Retry-After a 429 carries."""
    drop_rate: float = 0.0
    """Share of calls whose connection drops mid-stream."""
    stall_rate: float = 0.0
    """Share of calls whose stream stops mid-way and never resumes."""
    malformed_rate: float = 0.0
    """Share of calls that receive a garbage chunk."""
    quota_tpm: int | None = None
    """Provider-side tokens/min quota (input + output + thinking, charged at admission);
    a call that would overdraw it gets a 429 whose Retry-After is the refill time."""
    quota_rpm: int | None = None
    """Provider-side requests/min quota."""
    quota_headers: bool = True
    """Whether successful calls report the quota left (`x-ratelimit-*`); some providers
    send none, leaving clients only the 429s."""


class Quota:
    """A provider-side bucket holding a minute's worth, refilled continuously.

    Times come from the caller (`anyio.current_time()`), so it runs on a virtual clock.
    """

    def __init__(self, per_minute: int) -> None:
        if per_minute <= 0:
            raise ConfigError(f"a quota must be positive, not {per_minute}")
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self._stamp: float | None = None

    def refill(self, now: float) -> None:
        if self._stamp is not None:
            self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    def shortfall_s(self, amount: float) -> float:
        """Seconds until `amount` is available (0 when it is there now); call after refill."""
        amount = min(amount, self.capacity)  # a call bigger than the bucket waits for a full one
        short = amount - self.level
        if short <= 1e-6:  # float dust after waiting exactly the advised time
            return 0.0
        return max(1e-3, short / self.rate)  # whole milliseconds, as retry-after-ms

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.capacity)

    @property
    def remaining(self) -> int:
        return max(0, math.floor(self.level))

    @property
    def reset_s(self) -> float:
        """Seconds until the bucket is full again (OpenAI's `x-ratelimit-reset-*`)."""
        return (self.capacity - self.level) / self.rate
