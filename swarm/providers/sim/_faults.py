"""How simulated calls fail: fault rates, and the provider-side quota behind 429s.

`Faults` (defined with the config, since `[providers.NAME.faults]` holds it) says how often
a call gets a 500, a 429, a dropped connection, a stalled stream, a garbage chunk, no
first token at all or a refused connection, and which per-minute quotas the simulated
provider enforces. `Quota`
is one such bucket, refilled continuously on the caller's clock (virtual under `swarm
simulate --virtual`).
"""

from __future__ import annotations

import math

from swarm.config import Faults
from swarm.errors import ConfigError

__all__ = [
    "FAULT_DROP",
    "FAULT_ERROR",
    "FAULT_HANG",
    "FAULT_KINDS",
    "FAULT_MALFORMED",
    "FAULT_RATE_LIMIT",
    "FAULT_REFUSE",
    "FAULT_STALL",
    "Faults",
    "Quota",
]

FAULT_ERROR = "error"
FAULT_RATE_LIMIT = "rate_limit"
FAULT_DROP = "drop"
FAULT_STALL = "stall"
FAULT_MALFORMED = "malformed"
FAULT_HANG = "hang"
FAULT_REFUSE = "refuse"
FAULT_KINDS = (
    FAULT_ERROR,
    FAULT_RATE_LIMIT,
    FAULT_DROP,
    FAULT_STALL,
    FAULT_MALFORMED,
    FAULT_HANG,
    FAULT_REFUSE,
)
"""In the order `SimEngine` draws them; `Faults` has a `{kind}_rate` for each."""


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
        """Add what flowed in since the last refill (`now` on the caller's clock)."""
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
        """Charge `amount` (at most a full bucket); check `shortfall_s` first."""
        self.level -= min(amount, self.capacity)

    @property
    def remaining(self) -> int:
        """Whole units left now (what an `x-ratelimit-remaining-*` header reports)."""
        return max(0, math.floor(self.level))

    @property
    def reset_s(self) -> float:
        """Seconds until the bucket is full again (OpenAI's `x-ratelimit-reset-*`)."""
        return (self.capacity - self.level) / self.rate
