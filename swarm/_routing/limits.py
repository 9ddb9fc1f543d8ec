"""The two limiting mechanisms the gates are built of, and the clock they read.

`ConcurrencyLimiter`: slots with a priority queue, and AIMD on 429 (halve the slot count,
win it back one slot per N successes). `TokenBucket`: a requests/min or tokens/min
bucket that callers reserve from and then sleep off their debt. `clock()`: the event
loop's clock, so limits hold on a virtual clock too. `swarm._routing.gate` combines
them per provider; `swarm._routing.quota` learns bucket rates the config does not give.

The uncontended path runs for every model call, so it is plain arithmetic: no spans, no
sleeps. Only a wait for a slot that really blocks makes a `swarm.wait` span (kind `queue`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import sniffio

from swarm._tracing import semconv as sc
from swarm._tracing.waits import waiting

__all__ = ["ConcurrencyLimiter", "TokenBucket", "clock"]

_seq = itertools.count()


def clock() -> float:
    """The running event loop's clock (virtual in a virtual simulation), else monotonic."""
    try:  # asyncio's loop straight away: anyio asks sniffio which library runs first
        return asyncio.get_running_loop().time()
    except RuntimeError:
        pass
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

    def __init__(
        self, limit: float = math.inf, *, recover_every: int = 10, wait_kind: str = sc.WAIT_QUEUE
    ) -> None:
        self.limit = limit
        self.wait_kind = wait_kind
        """The `swarm.wait` kind of the time spent waiting for a slot."""
        self.ceiling = limit
        """The configured limit; additive recovery never goes above it."""
        self.in_flight = 0
        self.max_in_flight = 0
        """Highest `in_flight` seen (for tests and reports)."""
        self.recover_every = recover_every
        self._successes = 0
        self._last_cut = -math.inf
        self._waiters: list[tuple[int, int, _Waiter]] = []

    def widen(self, limit: float) -> None:
        """Set the slot count, and the ceiling, to `limit`: waiters take new slots at once."""
        self.limit = self.ceiling = limit
        self._wake()

    @asynccontextmanager
    async def slot(self, priority: int = 0) -> AsyncIterator[None]:
        """A slot for the block (higher `priority` first, FIFO within one)."""
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()

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
        with waiting(self.wait_kind):
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
    """A bucket of `capacity` refilled at `rate` per second; callers reserve, then sleep their
    debt.

    Reserving may take the level below zero: each caller sleeps until its own share has
    refilled, so waiters are served in arrival order without a loop or a lock. The quotas
    of `swarm._routing.quota` retune a bucket's rate as they learn it (`set_rate`) and empty
    it when the provider says it is emptier than ours (`drain`).
    """

    __slots__ = ("_stamp", "capacity", "level", "rate")

    def __init__(
        self,
        per_minute: float,
        *,
        capacity: float | None = None,
        level: float | None = None,
        now: float | None = None,
    ) -> None:
        self.capacity = float(per_minute) if capacity is None else capacity
        """Most the bucket holds (a minute's worth unless given)."""
        self.rate = per_minute / 60.0
        """Refill per second."""
        self.level = self.capacity if level is None else level
        """What is there now; below zero while callers sleep off their debt."""
        self._stamp = now  # set on first use otherwise: the clock is the event loop's

    def refill(self, now: float) -> None:
        """Add what refilled since the last use (up to `capacity`)."""
        if self._stamp is not None:
            self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    def reserve(self, amount: float, now: float) -> float:
        """Take `amount`; return how long the caller must wait (0 when it was there)."""
        self.refill(now)
        self.level -= min(amount, self.capacity)
        return -self.level / self.rate if self.level < 0 else 0.0

    def refund(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)

    def set_rate(self, rate: float, now: float, *, capacity: float | None = None) -> None:
        """Refill per second is `rate` from `now` on (what refilled before stays); the
        capacity becomes a minute's worth unless given."""
        self.refill(now)
        self.rate = rate
        self.capacity = rate * 60.0 if capacity is None else capacity

    def drain(self) -> None:
        """Start again from empty (or from the debt already owed)."""
        self.level = min(self.level, 0.0)
