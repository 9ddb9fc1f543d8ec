"""Retrying one candidate: which errors are retried, the backoff between tries, its span.

`Retrier.run` makes the first attempt directly (the path every call takes) and only
then hands over to tenacity: exponential backoff with jitter, capped at `backoff_max_s`,
or the provider's Retry-After when it gave one (a Retry-After above `max_retry_after_s`
is not waited for: the error goes to failover instead). A 429 with Retry-After does not
use up `max_attempts`: those waits have their own budget, `max_rate_limit_wait_s`, so a
call is not lost while the limiter converges on a provider's quota. Each wait is a `wait`
span of kind `backoff`. A candidate whose circuit opened between tries is not tried again,
unless it is the tier's last resort.

No retry comes sooner than `MIN_RETRY_S`, and a 429's retry no sooner than a floor that
doubles per try (`Retrier.floor`): a `Retry-After: 0`, a negative one or a date in the
past would otherwise retry at once, forever (12,524 requests in 20 s measured before this
rule, since a zero wait never used up the wait budget). The wait budget counts what is
waited, not what the header said.

A 429 the gates take as scattered (429s under half of the recent calls, and no quota in
the provider's headers: `swarm._routing.gate`) is not about load, so waiting its
Retry-After only delays the call: its retry waits the floor with jitter instead, the
floor stopping at `SCATTERED_FLOOR_MAX_S` (a scattered 429 is luck: the provider serves
most calls; one call that drew ten 429s in a row waited 6.4 s, then 10 s, twice: 3.4x
the fault-free makespan on seed 12; stopping at the 1 s Retry-After, seven in a row still
took 6.3 s on the critical path: 1.50x on 100 agents, seed 2). Once
429s are frequent, or a quota is known, Retry-After is waited in full again. Measured on
`swarm simulate --agents 100 --steps 1000 --rate-limit-rate 0.3` (Retry-After 1 s):
1.58-1.73x the fault-free makespan over five seeds while waiting every Retry-After.

The jitter of a call's waits comes from a generator of its own, seeded by the retrier's
seed and the agent and step in the request's metadata: a call's waits do not depend on
which other calls happened to retry first, so a simulation on the virtual clock with a
fixed seed (`Router.seed_jitter`) repeats exactly. The seed is random unless set.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from swarm._routing.candidate import Call, Target
from swarm._tracing import semconv as sc
from swarm._tracing.waits import waiting
from swarm.config import RoutingConfig
from swarm.errors import ProviderError, RateLimited
from swarm.messages import ChatResult

__all__ = ["MIN_RETRY_S", "SCATTERED_FLOOR_MAX_S", "Once", "Retrier"]

MIN_RETRY_S = 0.05
"""The shortest wait before any retry, whatever the backoff settings and Retry-After say."""

SCATTERED_FLOOR_MAX_S = 0.2
"""Where the doubling floor stops for a scattered 429 (so its retries wait 0.2-0.4 s at
most; less when Retry-After asks for less)."""

Once = Callable[[Target, Target | None, Call], Awaitable[ChatResult]]
"""One try on a candidate (with its hedging backup, if any)."""


class Retrier:
    """The retry policy of `[routing]`, applied to one candidate at a time."""

    def __init__(self, routing: RoutingConfig) -> None:
        self._routing = routing
        self.seed = 0
        """Seeds each call's jitter (with the call's agent and step): random until
        `reseed`."""
        self._anon = random.Random()
        self.reseed(random.getrandbits(64))

    def reseed(self, seed: int) -> None:
        """Jitter from `seed` from now on (calls already retrying keep theirs)."""
        self.seed = seed
        self._anon.seed(seed)

    def jitter(self, call: Call | None) -> random.Random:
        """`call`'s own generator: seeded by its agent and step when the request names
        them (the same draws whatever order concurrent calls retry in), else drawn from
        the retrier's."""
        if call is None:
            return self._anon
        if call.rng is None:
            meta = call.request.metadata
            agent = meta.get("agent")
            key = f"{self.seed}/{agent}/{meta.get('step', '')}" if agent else self._anon.random()
            call.rng = random.Random(key)
        return call.rng

    def retryable(self, exc: BaseException) -> bool:
        if not isinstance(exc, ProviderError) or not exc.retryable:
            return False
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            return exc.retry_after <= self._routing.max_retry_after_s
        return True

    def floor(self, attempt: int) -> float:
        """The least a 429 on try `attempt` waits, whatever its Retry-After says:
        `MIN_RETRY_S` doubling per try, up to half of `backoff_max_s`. A sensible
        Retry-After (1 s) is above it for the first five tries."""
        cap = max(MIN_RETRY_S, self._routing.backoff_max_s / 2)
        return min(cap, MIN_RETRY_S * 2.0 ** (attempt - 1))

    def delay(self, attempt: int, exc: BaseException | None, call: Call | None = None) -> float:
        """The wait before try `attempt + 1` after `exc` (jittered by `call`'s generator)."""
        rng = self.jitter(call)
        if isinstance(exc, RateLimited):
            floor = self.floor(attempt)
            scattered = call is not None and call.scattered_429
            if scattered:
                # not about load: a later retry is no likelier to pass, so the doubling
                # floor stops early (and at what the provider asked for)
                asked = math.inf if exc.retry_after is None else exc.retry_after
                floor = min(floor, max(MIN_RETRY_S, min(asked, SCATTERED_FLOOR_MAX_S)))
            jittered = floor + rng.uniform(0, floor)
            return jittered if scattered else max(exc.retry_after or 0.0, jittered)
        r = self._routing
        base: float = min(r.backoff_max_s, r.backoff_initial_s * 2.0 ** (attempt - 1))
        return max(MIN_RETRY_S, base / 2 + rng.uniform(0, base / 2))

    def _wait(self, call: Call, state: RetryCallState) -> float:
        exc: BaseException | None = state.outcome.exception() if state.outcome else None
        return self.delay(state.attempt_number + 1, exc, call)

    async def backoff(self, delay: float) -> None:
        if delay <= 0:
            return
        with waiting(sc.WAIT_BACKOFF):
            await anyio.sleep(delay)

    async def run(self, once: Once, t: Target, backup: Target | None, call: Call) -> ChatResult:
        """`once(t, backup, call)`, retried while its errors are retryable."""
        try:  # the first attempt stays off tenacity: it is the path every call takes
            return await once(t, backup, call)
        except ProviderError as exc:
            if self._routing.max_attempts < 2 or not self.retryable(exc):
                raise
            first = exc
        spent = _Spent(self.floor)
        spent.add(first)
        if spent.exhausted(self._routing):
            raise first
        await self.backoff(self.delay(1, first, call))

        def stop(state: RetryCallState) -> bool:
            exc = state.outcome.exception() if state.outcome else None
            spent.add(exc)
            return spent.exhausted(self._routing)

        retrying = AsyncRetrying(
            stop=stop,
            wait=partial(self._wait, call),
            retry=retry_if_exception(self.retryable),
            sleep=self.backoff,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if not t.breaker.allow() and not call.last_resort:
                    raise ProviderError(
                        "circuit open", provider=t.provider.name, model=t.model, kind="connect"
                    )
                return await once(t, backup, call)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


class _Spent:
    """What one call has used of its retry budgets on one candidate."""

    __slots__ = ("attempts", "floor", "rate_limit_wait", "tries")

    def __init__(self, floor: Callable[[int], float]) -> None:
        self.floor = floor
        self.tries = 0
        self.attempts = 0
        """Failed attempts other than 429s with a Retry-After."""
        self.rate_limit_wait = 0.0
        """Retry-After seconds waited for so far."""

    def add(self, exc: BaseException | None) -> None:
        self.tries += 1
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            self.rate_limit_wait += max(exc.retry_after, self.floor(self.tries))
        else:
            self.attempts += 1

    def exhausted(self, routing: RoutingConfig) -> bool:
        return (
            self.attempts >= routing.max_attempts
            or self.rate_limit_wait > routing.max_rate_limit_wait_s
        )
