"""A circuit breaker per provider/model, so a dead endpoint is skipped within seconds.

Closed: calls pass. After `threshold` consecutive failures (or stalls) it opens: the router
skips the candidate. After `cooldown_s` one probe call is let through (half-open); its
success closes the breaker, its failure opens it for another cooldown.
"""

from __future__ import annotations

from swarm._routing.limits import clock

__all__ = ["Breaker"]


class Breaker:
    __slots__ = ("cooldown_s", "failures", "opened_at", "probing", "threshold")

    def __init__(self, threshold: int = 5, cooldown_s: float = 15.0) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.failures = 0
        """Consecutive failures since the last success."""
        self.opened_at: float | None = None
        self.probing = False
        """True while the single half-open probe call is in flight."""

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half_open" if self.probing else "open"

    def available(self, now: float | None = None) -> bool:
        """Would `allow` let a call through now? (Does not take the probe.)"""
        if self.opened_at is None:
            return True
        if self.probing:
            return False
        now = clock() if now is None else now
        return now - self.opened_at >= self.cooldown_s

    def allow(self, now: float | None = None) -> bool:
        """Let a call through; when the cooldown is over this takes the one probe."""
        if self.opened_at is None:
            return True
        if not self.available(now):
            return False
        self.probing = True
        return True

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None
        self.probing = False

    def failure(self, now: float | None = None) -> None:
        self.failures += 1
        if self.probing or self.failures >= self.threshold:
            self.opened_at = clock() if now is None else now
            self.probing = False

    def abandon(self) -> None:
        """The call ended without a verdict (cancelled): free the probe for another call."""
        self.probing = False
