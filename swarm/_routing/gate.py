"""Gates: everything that limits calls to one provider (or one provider/model), and the
permit a call holds while it runs.

One `Gate` per provider (and per provider/model where configured) combines a priority
queue of concurrency slots, requests/min and tokens/min buckets, pacing from the
provider's `x-ratelimit-*` headers (a pause at zero remaining and, when no rpm/tpm is
configured, a bucket whose size and refill rate are learned from them), and AIMD on 429
(halve the slot count, win it back one slot per N successes; for a provider that sends no
headers, also AIMD on a tokens/min rate measured from what it admitted).

A 429 pauses and cuts only once 429s have been at least `OVERLOAD_SHARE` of the calls
admitted lately for `Overload.hold_s`, or when the provider's headers have shown a quota
(then a 429 says our estimate of it is off). A quota overrun shows as a high share (once
the provider's bucket is empty, most calls bounce); 429s sent at random, whatever the
load, keep the same share whatever we do, and cutting on them spirals: measured on
`swarm simulate --agents 100 --steps 1000 --rate-limit-rate 0.3`, 24,826 s of virtual
time (1,367x the fault-free 18 s) with the cuts on every 429, 679 s under a fixed `tpm`.
Below the share, a 429 costs only its own retry (after Retry-After, or a short floor when
scattered: `swarm._routing.retry`): a provider at its quota serves at its quota either way.

A call goes through its gates like through anyio's `CapacityLimiter`::

    async with admit(gates, tokens, priority) as permit:   # or gate.admit(tokens)
        result = await provider.chat(...)
        permit.settle(used_tokens, result.rate_limit)      # or permit.rate_limited(...)

Leaving the block gives back what the permit holds on every path (error, cancellation);
a permit that was not settled counts as a failed call.

The uncontended path runs for every model call, so it is plain arithmetic: no spans, no
sleeps, no allocations beyond the permit. Only waits that really block make a
`swarm.wait` span (kind `queue` or `rate_limit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import TracebackType

import anyio

from swarm._routing.limits import ConcurrencyLimiter, TokenBucket, clock
from swarm._routing.quota import BlindQuota, LearnedQuota
from swarm._tracing import semconv as sc
from swarm._tracing.waits import waiting
from swarm.messages import RateLimitInfo

__all__ = ["OVERLOAD_SHARE", "Gate", "Overload", "Permit", "admit"]

SCATTER_SAMPLE = 20
"""Recent calls needed before a 429 below `OVERLOAD_SHARE` counts as scattered (its retry
then skips the Retry-After wait: `swarm._routing.retry`)."""
OVERLOAD_SHARE = 0.5
"""Share of 429s among the calls admitted in the last `_Recent.SECONDS` above which a 429
pauses and cuts. Counted against calls admitted, not outcomes: 429s come back at once,
successes only after the whole reply, so among outcomes the first 429s look like all."""


@dataclass(frozen=True)
class Overload:
    """When 429s count as overload (`[routing] overload_sample`, `overload_hold_s`)."""

    sample: int = SCATTER_SAMPLE
    """Fewer recent calls than this count as this many: a verdict either way needs a
    sample, so overload needs 10 429s at least. With 4, two random 429s in a row on the
    planner's lone call (9 % at a 30 % rate) read as overload and cut the slots to the one
    call then in flight; 50 coders then started one at a time, too few calls for their
    429s to look scattered, and each cut again (11-24x the fault-free makespan on seeds 0
    and 3). With 16, the coders' first calls did it: a simulated 429 comes back before the
    next agent's call is admitted, and 8 of the first 16 bounced (6.4x on seed 0). Calls
    made at once pile up a sample within a second, so a real overload is still cut."""
    hold_s: float = 1.0
    """How long 429s must stay at `OVERLOAD_SHARE` or more before they cut and pause (for
    a provider whose headers show no quota). Calls made at once are admitted one after
    another, and a 429 that comes back at once is counted before the rest are: 10 of the
    first 20 of 100 coders bouncing at a 30 % rate cut the slots to 5 (1.52x the
    fault-free makespan on seed 0). A real overload lasts; until it is judged, its 429s
    wait their Retry-After."""


class _Recent:
    """Calls admitted and 429s received over the last `SECONDS`, in one-second bins."""

    SECONDS = 10

    __slots__ = ("_admits", "_limits", "_min_calls", "_stamps")

    def __init__(self, min_calls: int) -> None:
        self._min_calls = min_calls
        self._admits = [0] * self.SECONDS
        self._limits = [0] * self.SECONDS
        self._stamps = [-1] * self.SECONDS

    def _bin(self, now: float) -> int:
        second = int(now)
        i = second % self.SECONDS
        if self._stamps[i] != second:
            self._stamps[i], self._admits[i], self._limits[i] = second, 0, 0
        return i

    def admitted(self, now: float) -> None:
        self._admits[self._bin(now)] += 1

    def limited(self, now: float) -> tuple[float, int]:
        """Record a 429; return the share of 429s among recent calls, and their number."""
        self._limits[self._bin(now)] += 1
        oldest = int(now) - self.SECONDS
        live = [i for i, stamp in enumerate(self._stamps) if stamp > oldest]
        calls = sum(self._admits[i] for i in live)
        return sum(self._limits[i] for i in live) / max(calls, self._min_calls), calls


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
        overload: Overload = Overload(),
    ) -> None:
        self.name = name
        self.overload = overload
        """When 429s count as overload."""
        self.slots = ConcurrencyLimiter(
            math.inf if max_concurrency is None else max_concurrency, recover_every=recover_every
        )
        self.rpm = TokenBucket(rpm) if rpm else None
        self.tpm = TokenBucket(tpm) if tpm else None
        self.paused_until = 0.0
        """Monotonic time before which no call starts (from x-ratelimit-* or Retry-After)."""
        self.learned_rpm: LearnedQuota | None = None if rpm else LearnedQuota()
        self.learned_tpm: LearnedQuota | None = None if tpm else LearnedQuota()
        """Quotas inferred from the provider's rate-limit info, for unconfigured limits."""
        self.blind_tpm: BlindQuota | None = None if tpm else BlindQuota()
        """A tokens/min rate found by AIMD from 429s, for a provider that reports nothing."""
        self._recent = _Recent(overload.sample)
        """Calls admitted and 429s of the last seconds."""
        self._overloaded_since: float | None = None
        """When 429s last reached `OVERLOAD_SHARE` of recent calls (None: below it)."""

    def admit(self, tokens: int, priority: int = 0) -> Permit:
        """`async with gate.admit(tokens) as permit:` one call of about `tokens` tokens."""
        return Permit((self,), tokens, priority)

    def take_now(self) -> bool:
        """Take a slot for a call, if it needs no wait at all: a free slot, and no
        requests/min or tokens/min budget or pause to reckon with (what `acquire` does
        then, without a coroutine). False leaves nothing taken."""
        if self.paused_until or self.rpm_bucket() is not None or self.tpm_bucket() is not None:
            return False
        if not self.slots.try_acquire():
            return False
        self._recent.admitted(clock())
        return True

    async def acquire(self, tokens: int, priority: int = 0) -> None:
        """Take a slot and the rate budget for one call (what a `Permit` enters with).

        Raising (cancelled while waiting) leaves nothing held.
        """
        slots = self.slots
        if not slots.try_acquire():
            await slots.acquire(priority)
        try:
            now = clock()
            self._recent.admitted(now)
            rpm, tpm = self.rpm_bucket(), self.tpm_bucket()
            if rpm is None and tpm is None and not self.paused_until:
                return
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
        with waiting(sc.WAIT_RATE_LIMIT):
            try:
                await anyio.sleep(wait)
            except BaseException:
                rpm, tpm = self.rpm_bucket(), self.tpm_bucket()
                if rpm is not None:
                    rpm.refund(1)
                if tpm is not None:
                    tpm.refund(tokens)
                raise

    def rpm_bucket(self) -> TokenBucket | None:
        """The requests/min bucket pacing calls now: configured, else learned, if any."""
        return self.rpm or (self.learned_rpm.bucket if self.learned_rpm else None)

    def tpm_bucket(self) -> TokenBucket | None:
        """The tokens/min bucket pacing calls now: configured, learned from headers, or
        found by AIMD on 429s, if any."""
        if self.tpm is not None:
            return self.tpm
        learned = self.learned_tpm
        if learned is not None and learned.bucket is not None:
            return learned.bucket
        return self.blind_tpm.bucket if self.blind_tpm is not None else None

    def release(
        self, estimated_tokens: int, used_tokens: int | None, info: RateLimitInfo | None
    ) -> None:
        """Give the slot back (what a `Permit` exits with). `used_tokens` is None for a
        failed call; for a success it corrects the token estimate and feeds AIMD."""
        slots = self.slots
        slots.release()
        if used_tokens is None:
            return
        slots.on_success()
        blind = self.blind_tpm
        if blind is not None and self.tpm_bucket() in (None, blind.bucket):
            blind.on_success(used_tokens, clock())
        tpm = self.tpm_bucket()
        if tpm is not None:
            tpm.refund(estimated_tokens - used_tokens)
        if info is not None:
            self.pace(info, used_tokens)

    def rate_limited(self, retry_after: float | None) -> bool:
        """A 429 came back: if 429s are a large share of recent outcomes, cut concurrency
        (and a rate learned from 429s) and hold new calls for Retry-After. Returns whether
        it is scattered: a small share of a sample of `SCATTER_SAMPLE` recent calls or
        more, and no quota known (then it is not about load)."""
        now = clock()
        share, calls = self._recent.limited(now)
        if not self._reports_quota():
            if share < OVERLOAD_SHARE:
                self._overloaded_since = None
                return calls >= SCATTER_SAMPLE
            if self._overloaded_since is None:
                self._overloaded_since = now
            if now - self._overloaded_since < self.overload.hold_s:
                return False
        self.slots.on_rate_limited(now)
        if retry_after:
            self.paused_until = max(self.paused_until, now + retry_after)
        for learned in (self.learned_rpm, self.learned_tpm):
            if learned is not None:
                learned.drain()
        blind = self.blind_tpm
        if blind is not None and self.tpm_bucket() in (None, blind.bucket):
            blind.on_rate_limited(now)
        return False

    def _reports_quota(self) -> bool:
        """Has the provider's rate-limit info shown a quota? Then its 429s are about it."""
        return any(
            q is not None and q.bucket is not None for q in (self.learned_rpm, self.learned_tpm)
        )

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


def admit(gates: tuple[Gate, ...], tokens: int, priority: int = 0) -> Permit:
    """`async with admit(gates, tokens, priority) as permit:` one call through every gate
    of its candidate (the provider's, then the model's), taken in that order."""
    return Permit(gates, tokens, priority)


class Permit:
    """One call's hold on its gates: a slot on each, and the rate it reserved.

    Entering waits for every gate in order; if that is cancelled or fails, the gates
    already taken are given back before the error leaves. Inside the block, say how the
    call went: `settle(used_tokens, info)` after a success, `rate_limited(retry_after)`
    after a 429. Leaving the block releases every gate, whatever happened.
    """

    __slots__ = ("_gates", "_info", "_priority", "_tokens", "_used")

    def __init__(self, gates: tuple[Gate, ...], tokens: int, priority: int = 0) -> None:
        self._gates = gates
        self._tokens = tokens
        self._priority = priority
        self._used: int | None = None
        self._info: RateLimitInfo | None = None

    async def __aenter__(self) -> Permit:
        gates = self._gates
        if len(gates) == 1 and gates[0].take_now():  # the uncontended path: no coroutine
            return self
        for i, gate in enumerate(gates):
            try:
                await gate.acquire(self._tokens, self._priority)
            except BaseException:
                for held in gates[:i]:
                    held.release(self._tokens, None, None)
                raise
        return self

    def settle(self, used_tokens: int, info: RateLimitInfo | None = None) -> None:
        """The call succeeded and cost `used_tokens` (input + output); `info` is the
        provider's rate-limit info, if it sent any. Applied when the block is left."""
        self._used = used_tokens
        self._info = info

    def rate_limited(self, retry_after: float | None) -> bool:
        """The call got a 429: every gate cuts its concurrency and pauses for Retry-After
        (now, before the slots are given back) if it takes it as overload. Is it
        scattered for every gate (`Gate.rate_limited`)?"""
        scattered = [gate.rate_limited(retry_after) for gate in self._gates]  # every gate
        return all(scattered)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for gate in self._gates:
            gate.release(self._tokens, self._used, self._info)
