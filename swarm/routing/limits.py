"""Limits shared by the whole swarm: concurrency, request/token rates, AIMD, spend caps.

One `Gate` per provider (and per provider/model where configured) combines a priority
queue of concurrency slots, requests/min and tokens/min buckets, pacing from the
provider's `x-ratelimit-*` headers (a pause at zero remaining and, when no rpm/tpm is
configured, a bucket whose size and refill rate are learned from them), and AIMD on 429
(halve the slot count, win it back one slot per N successes; for a provider that sends no
headers, also AIMD on a tokens/min rate measured from what it admitted). `SpendTracker`
caps USD and tokens for a run or a tier.

The uncontended path runs for every model call, so it is plain arithmetic: no spans, no
sleeps, no allocations beyond the permit. Only waits that really block make a
`swarm.wait` span (kind `queue` or `rate_limit`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from dataclasses import dataclass

import anyio
import sniffio

from swarm.errors import BudgetExceeded
from swarm.messages import RateLimitInfo
from swarm.tracing import semconv as sc
from swarm.tracing.setup import tracer

__all__ = ["ConcurrencyLimiter", "Gate", "SpendTracker", "TokenBucket"]

_seq = itertools.count()


def clock() -> float:
    """The running event loop's clock (virtual under trio's MockClock), else monotonic."""
    try:
        return anyio.current_time()
    except sniffio.AsyncLibraryNotFoundError:
        return time.monotonic()


class _Waiter:
    __slots__ = ("cancelled", "event", "granted")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False
        self.cancelled = False


class ConcurrencyLimiter:
    """Slots with a priority queue: higher priority first, FIFO within one priority.

    `limit` may change at run time (AIMD); `math.inf` means unbounded until a 429 arrives.
    """

    def __init__(self, limit: float = math.inf, *, recover_every: int = 10) -> None:
        self.limit = limit
        self.ceiling = limit
        """The configured limit; additive recovery never goes above it."""
        self.in_flight = 0
        self.max_in_flight = 0
        """Highest `in_flight` seen (for tests and reports)."""
        self.recover_every = recover_every
        self._successes = 0
        self._last_cut = -math.inf
        self._waiters: list[tuple[int, int, _Waiter]] = []

    def try_acquire(self) -> bool:
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            if self.in_flight > self.max_in_flight:
                self.max_in_flight = self.in_flight
            return True
        return False

    async def acquire(self, priority: int = 0) -> None:
        if self.try_acquire():
            return
        waiter = _Waiter()
        heapq.heappush(self._waiters, (-priority, next(_seq), waiter))
        self._wake()  # cancelled entries may have hidden a free slot
        if waiter.granted:
            return
        # a cancelled wait is normal (hedge losers, timeouts): not an error on the wait span
        with tracer().start_as_current_span(
            sc.WAIT_SPAN,
            attributes={sc.WAIT_KIND: sc.WAIT_QUEUE},
            record_exception=False,
            set_status_on_exception=False,
        ):
            try:
                await waiter.event.wait()
            except BaseException:
                if waiter.granted:
                    self.release()  # granted while being cancelled: pass the slot on
                else:
                    waiter.cancelled = True
                    self._wake()  # drop it now so the queue head is accurate
                raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters and (waiters[0][2].cancelled or self.in_flight < self.limit):
            _, _, w = heapq.heappop(waiters)
            if w.cancelled:
                continue
            w.granted = True
            self.in_flight += 1
            if self.in_flight > self.max_in_flight:
                self.max_in_flight = self.in_flight
            w.event.set()

    def on_success(self) -> None:
        if self.limit >= self.ceiling:
            return
        self._successes += 1
        if self._successes >= self.recover_every:
            self._successes = 0
            self.limit = min(self.ceiling, self.limit + 1)
            self._wake()

    def on_rate_limited(self, now: float | None = None) -> None:
        """Multiplicative decrease, at most once per second (one burst of 429s = one cut)."""
        now = clock() if now is None else now
        if now - self._last_cut < 1.0:
            return
        self._last_cut = now
        base = self.limit if self.limit != math.inf else max(self.in_flight, 1)
        self.limit = max(1, math.floor(base * 0.5))
        self._successes = 0


class TokenBucket:
    """A bucket of `capacity` refilled over a minute; callers reserve, then sleep their debt.

    Reserving may take the level below zero: each caller sleeps until its own share has
    refilled, so waiters are served in arrival order without a loop or a lock.
    """

    def __init__(self, per_minute: float) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self._stamp: float | None = None  # set on first use: the clock is the event loop's

    def _refill(self, now: float) -> None:
        if self._stamp is not None:
            self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    def reserve(self, amount: float, now: float) -> float:
        """Take `amount`; return how long the caller must wait (0 when it was there)."""
        self._refill(now)
        self.level -= min(amount, self.capacity)
        return -self.level / self.rate if self.level < 0 else 0.0

    def refund(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


class Gate:
    """Everything that limits calls to one provider (or one provider/model)."""

    def __init__(
        self,
        name: str,
        *,
        max_concurrency: int | None = None,
        rpm: int | None = None,
        tpm: int | None = None,
        recover_every: int = 10,
    ) -> None:
        self.name = name
        self.slots = ConcurrencyLimiter(
            math.inf if max_concurrency is None else max_concurrency, recover_every=recover_every
        )
        self.rpm = TokenBucket(rpm) if rpm else None
        self.tpm = TokenBucket(tpm) if tpm else None
        self.paused_until = 0.0
        """Monotonic time before which no call starts (from x-ratelimit-* or Retry-After)."""
        self.learned_rpm: _LearnedQuota | None = None if rpm else _LearnedQuota()
        self.learned_tpm: _LearnedQuota | None = None if tpm else _LearnedQuota()
        """Quotas inferred from the provider's rate-limit info, for unconfigured limits."""
        self.blind_tpm: _BlindQuota | None = None if tpm else _BlindQuota()
        """A tokens/min rate found by AIMD from 429s, for a provider that reports nothing."""

    async def enter(self, tokens: int, priority: int = 0) -> None:
        """Take a slot and the rate budget for one call of about `tokens` tokens."""
        slots = self.slots
        if not slots.try_acquire():
            await slots.acquire(priority)
        try:
            rpm, tpm = self._rpm_bucket(), self._tpm_bucket()
            if rpm is None and tpm is None and not self.paused_until:
                return
            now = clock()
            wait = self.paused_until - now
            if rpm is not None:
                wait = max(wait, rpm.reserve(1, now))
            if tpm is not None:
                wait = max(wait, tpm.reserve(tokens, now))
            if wait > 1e-3:  # sub-millisecond debts are clock noise, not worth a span
                await self._rate_wait(wait, tokens)
                # a 429 while we slept pauses us too: calls queued before it must not fire
                while (wait := self.paused_until - clock()) > 1e-3:
                    await self._rate_wait(wait, tokens)
        except BaseException:
            slots.release()
            raise

    async def _rate_wait(self, wait: float, tokens: int) -> None:
        attrs = {sc.WAIT_KIND: sc.WAIT_RATE_LIMIT}
        with tracer().start_as_current_span(
            sc.WAIT_SPAN, attributes=attrs, record_exception=False, set_status_on_exception=False
        ):
            try:
                await anyio.sleep(wait)
            except BaseException:
                rpm, tpm = self._rpm_bucket(), self._tpm_bucket()
                if rpm is not None:
                    rpm.refund(1)
                if tpm is not None:
                    tpm.refund(tokens)
                raise

    def _rpm_bucket(self) -> TokenBucket | None:
        return self.rpm or (self.learned_rpm.bucket if self.learned_rpm else None)

    def _tpm_bucket(self) -> TokenBucket | None:
        if self.tpm is not None:
            return self.tpm
        learned = self.learned_tpm
        if learned is not None and learned.bucket is not None:
            return learned.bucket
        return self.blind_tpm.bucket if self.blind_tpm is not None else None

    def exit(
        self,
        estimated_tokens: int,
        actual_tokens: int | None,
        *,
        ok: bool,
        info: RateLimitInfo | None = None,
    ) -> None:
        """Give the slot back; correct the token estimate; feed AIMD on success."""
        slots = self.slots
        slots.release()
        blind = self.blind_tpm
        if ok:
            slots.on_success()
            if (
                blind is not None
                and actual_tokens is not None
                and self._tpm_bucket() in (None, blind.bucket)
            ):
                blind.on_success(actual_tokens, clock())
        tpm = self._tpm_bucket()
        if tpm is not None and actual_tokens is not None:
            tpm.refund(estimated_tokens - actual_tokens)
        if info is not None:
            self.pace(info, actual_tokens)

    def rate_limited(self, retry_after: float | None) -> None:
        """A 429 came back: cut concurrency (and a rate learned from 429s) and hold new
        calls for Retry-After."""
        now = clock()
        self.slots.on_rate_limited(now)
        if retry_after:
            self.paused_until = max(self.paused_until, now + retry_after)
        for learned in (self.learned_rpm, self.learned_tpm):
            if learned is not None and learned.bucket is not None:
                # the provider's bucket was emptier than ours: start again from empty
                learned.bucket.level = min(learned.bucket.level, 0.0)
        blind = self.blind_tpm
        if blind is not None and self._tpm_bucket() in (None, blind.bucket):
            blind.on_rate_limited(now)

    def pace(self, info: RateLimitInfo, used_tokens: int | None = None) -> None:
        """Follow the provider's rate-limit info: pause while a quota is at zero, and learn
        the quotas that are not configured (`used_tokens`: what the reporting call cost)."""
        now = clock()
        if info.remaining_requests == 0 and info.reset_requests_s:
            self.paused_until = max(self.paused_until, now + info.reset_requests_s)
        if info.remaining_tokens == 0 and info.reset_tokens_s:
            self.paused_until = max(self.paused_until, now + info.reset_tokens_s)
        if self.learned_rpm is not None:
            self.learned_rpm.observe(info.remaining_requests, info.reset_requests_s, 1, now)
        if self.learned_tpm is not None:
            self.learned_tpm.observe(info.remaining_tokens, info.reset_tokens_s, used_tokens, now)


class _LearnedQuota:
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
        bucket = self.bucket
        if bucket is None:
            self.bucket = bucket = TokenBucket(per_minute)
            bucket.level = float(remaining)
            bucket._stamp = now
        else:
            bucket._refill(now)
            bucket.rate = per_minute / 60.0
        bucket.capacity = self.capacity


class _BlindQuota:
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
            bucket._refill(now)
            if bucket.level < 0:  # only a rate that holds calls back needs to grow
                bucket.rate *= 1.0 + self.GROWTH
                bucket.capacity = bucket.rate * 60.0

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
            self.bucket = bucket = TokenBucket(admitted / span * 60.0)
            bucket._stamp = now
        else:
            bucket._refill(now)
            measured = admitted / span if span > 0 else 0.0
            # above our rate, the provider is still admitting calls queued before the last
            # cut: they drain on their own, and cutting again would only compound the cut
            if measured < bucket.rate:
                bucket.rate = max(measured, bucket.rate * self.MAX_CUT)
                bucket.capacity = bucket.rate * 60.0
        bucket.level = min(bucket.level, 0.0)


@dataclass(frozen=True)
class SpendSnapshot:
    """What a tracker has spent so far."""

    usd: float
    tokens: int


class SpendTracker:
    """A USD and token cap for one scope (`run`, `tier speed`).

    `check()` before a call raises `BudgetExceeded` once spent plus in-flight reservations
    reach a cap; `reserve()` holds an estimate while the call runs; `record()` swaps the
    estimate for what the call really cost.
    """

    def __init__(
        self, *, usd: float | None = None, tokens: int | None = None, scope: str = "run"
    ) -> None:
        self.usd_limit = usd
        self.tokens_limit = tokens
        self.scope = scope
        self.usd = 0.0
        self.tokens = 0
        self._reserved_usd = 0.0
        self._reserved_tokens = 0

    def check(self) -> None:
        if self.usd_limit is not None and self.usd + self._reserved_usd >= self.usd_limit:
            raise BudgetExceeded("usd", limit=self.usd_limit, spent=self.usd, scope=self.scope)
        if (
            self.tokens_limit is not None
            and self.tokens + self._reserved_tokens >= self.tokens_limit
        ):
            raise BudgetExceeded(
                "tokens", limit=self.tokens_limit, spent=self.tokens, scope=self.scope
            )

    def reserve(self, usd: float, tokens: int) -> None:
        self.check()
        self._reserved_usd += usd
        self._reserved_tokens += tokens

    def release(self, usd: float, tokens: int) -> None:
        self._reserved_usd -= usd
        self._reserved_tokens -= tokens

    def record(
        self, usd: float, tokens: int, *, reserved_usd: float = 0.0, reserved_tokens: int = 0
    ) -> None:
        self.release(reserved_usd, reserved_tokens)
        self.usd += usd
        self.tokens += tokens

    def snapshot(self) -> SpendSnapshot:
        return SpendSnapshot(usd=self.usd, tokens=self.tokens)
