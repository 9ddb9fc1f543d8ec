"""Provider quotas the config does not give, estimated while the run goes.

`LearnedQuota` infers a requests/min or tokens/min bucket from the provider's rate-limit
info (`remaining`, `reset`); `BlindQuota` finds a tokens/min rate by AIMD on 429s, for a
provider that reports nothing. Each owns the `TokenBucket` it estimates and tunes it only
through the bucket's methods. `swarm._routing.gate` decides which bucket paces a call.
"""

from __future__ import annotations

import math
from collections import deque

from swarm._routing.limits import TokenBucket

__all__ = ["BlindQuota", "LearnedQuota"]


class LearnedQuota:
    """A provider quota inferred from `remaining` and `reset` (seconds until full again).

    The capacity is at least `remaining + used` of any call (exact for a call admitted into
    a full bucket, which the first call of a run is); the refill rate is then
    `(capacity - remaining) / reset`. The bucket starts at the reported remaining.
    """

    __slots__ = ("bucket", "capacity")

    def __init__(self) -> None:
        self.capacity = 0.0
        self.bucket: TokenBucket | None = None

    def observe(
        self, remaining: int | None, reset_s: float | None, used: int | None, now: float
    ) -> None:
        if remaining is None or not reset_s or used is None:
            return
        self.capacity = max(self.capacity, float(remaining + used))
        per_minute = (self.capacity - remaining) / reset_s * 60.0
        if per_minute <= 0:
            return
        if self.bucket is None:
            self.bucket = TokenBucket(
                per_minute, capacity=self.capacity, level=float(remaining), now=now
            )
        else:
            self.bucket.set_rate(per_minute / 60.0, now, capacity=self.capacity)

    def drain(self) -> None:
        """The provider's bucket was emptier than ours: start again from empty."""
        if self.bucket is not None:
            self.bucket.drain()


class BlindQuota:
    """AIMD on a tokens/min rate, for a provider whose only signal is the 429.

    Cutting concurrency cannot pace a quota that even one call at a time overdraws; a rate
    can. The first 429 sets the rate to the throughput of the last `WINDOW_S` seconds (too
    high: it includes the opening burst of the provider's full bucket). Each later 429 (at
    most one a second) lowers it to the throughput of the last `WINDOW_S` — a 429 means the
    client is saturating the quota, so that is about the quota — but by at most `MAX_CUT`.
    Every success while the bucket holds calls back adds `GROWTH`, so the rate probes
    upwards again.
    """

    WINDOW_S = 10.0
    MAX_CUT = 0.5
    GROWTH = 0.004

    __slots__ = ("_last_cut", "_samples", "_sum", "bucket")

    def __init__(self) -> None:
        self.bucket: TokenBucket | None = None
        self._samples: deque[tuple[float, int]] = deque()
        self._sum = 0
        self._last_cut = -math.inf

    def on_success(self, tokens: int, now: float) -> None:
        samples = self._samples
        samples.append((now, tokens))
        self._sum += tokens
        while samples[0][0] < now - self.WINDOW_S:
            self._sum -= samples.popleft()[1]
        bucket = self.bucket
        if bucket is not None:
            bucket.refill(now)
            if bucket.level < 0:  # only a rate that holds calls back needs to grow
                bucket.set_rate(bucket.rate * (1.0 + self.GROWTH), now)

    def on_rate_limited(self, now: float) -> None:
        if now - self._last_cut < 1.0:
            return
        samples = self._samples
        if not samples:
            return
        span = min(self.WINDOW_S, now - samples[0][0])
        admitted = sum(n for t, n in samples if t >= now - span) if span > 0 else 0
        self._last_cut = now
        bucket = self.bucket
        if bucket is None:
            if admitted <= 0:
                return
            self.bucket = bucket = TokenBucket(admitted / span * 60.0, now=now)
        else:
            bucket.refill(now)
            measured = admitted / span if span > 0 else 0.0
            # above our rate, the provider is still admitting calls queued before the last
            # cut: they drain on their own, and cutting again would only compound the cut
            if measured < bucket.rate:
                bucket.set_rate(max(measured, bucket.rate * self.MAX_CUT), now)
        bucket.drain()
