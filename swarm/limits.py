"""Limits shared by the whole swarm: concurrency, request/token rates, AIMD, spend caps.

One `Gate` per provider (and per provider/model where configured) combines a priority
queue of concurrency slots, requests/min and tokens/min buckets, pacing from the
provider's `x-ratelimit-*` headers, and AIMD on 429 (halve the slot count, win it back one
slot per N successes). `SpendTracker` caps USD and tokens for a run or a tier.

The uncontended path runs for every model call, so it is plain arithmetic: no spans, no
sleeps, no allocations beyond the permit. Only waits that really block make a
`swarm.wait` span (kind `queue` or `rate_limit`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass

import anyio
import sniffio

from swarm import _semconv as sc
from swarm.errors import BudgetExceeded
from swarm.messages import RateLimitInfo
from swarm.tracing import tracer

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

    async def enter(self, tokens: int, priority: int = 0) -> None:
        """Take a slot and the rate budget for one call of about `tokens` tokens."""
        slots = self.slots
        if not slots.try_acquire():
            await slots.acquire(priority)
        try:
            if self.rpm is None and self.tpm is None and not self.paused_until:
                return
            now = clock()
            wait = self.paused_until - now
            if self.rpm is not None:
                wait = max(wait, self.rpm.reserve(1, now))
            if self.tpm is not None:
                wait = max(wait, self.tpm.reserve(tokens, now))
            if wait > 1e-3:  # sub-millisecond debts are clock noise, not worth a span
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
                if self.rpm is not None:
                    self.rpm.refund(1)
                if self.tpm is not None:
                    self.tpm.refund(tokens)
                raise

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
        if ok:
            slots.on_success()
        if self.tpm is not None and actual_tokens is not None:
            self.tpm.refund(estimated_tokens - actual_tokens)
        if info is not None:
            self.pace(info)

    def rate_limited(self, retry_after: float | None) -> None:
        """A 429 came back: cut concurrency and hold new calls for Retry-After."""
        now = clock()
        self.slots.on_rate_limited(now)
        if retry_after:
            self.paused_until = max(self.paused_until, now + retry_after)

    def pace(self, info: RateLimitInfo) -> None:
        now = clock()
        if info.remaining_requests == 0 and info.reset_requests_s:
            self.paused_until = max(self.paused_until, now + info.reset_requests_s)
        if info.remaining_tokens == 0 and info.reset_tokens_s:
            self.paused_until = max(self.paused_until, now + info.reset_tokens_s)


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
