"""Shared limits: concurrency with priorities, cancellation safety, token buckets, AIMD,
x-ratelimit pacing, quotas learned from headers and from 429s, and the gate's permit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TypeVar

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._routing.gate import Gate, Overload, admit
from swarm._routing.limits import ConcurrencyLimiter, TokenBucket
from swarm._tracing import semconv as sc
from swarm.messages import RateLimitInfo

T = TypeVar("T")


QUICK = Overload(sample=4, hold_s=0.0)
"""Overload judged on 4 calls and at once, as before 20 calls and a second were needed:
these tests are about what a verdict does (test_faults_429: when it is reached)."""


def wait_kinds(exporter: InMemorySpanExporter) -> list[object]:
    return [
        (s.attributes or {}).get(sc.WAIT_KIND)
        for s in exporter.get_finished_spans()
        if s.name.startswith(f"{sc.WAIT_SPAN} ")
    ]


async def test_concurrency_respected_under_500_callers(spans: InMemorySpanExporter) -> None:
    gate = Gate("p", max_concurrency=10)
    in_flight = peak = 0

    async def caller(i: int) -> None:
        nonlocal in_flight, peak
        async with gate.admit(100, priority=i % 3) as permit:
            in_flight += 1
            peak = max(peak, in_flight)
            await checkpoint()
            in_flight -= 1
            permit.settle(90)

    async with anyio.create_task_group() as tg:
        for i in range(500):
            tg.start_soon(caller, i)
    assert peak == 10
    assert gate.slots.max_in_flight == 10
    assert gate.slots.in_flight == 0
    assert "queue" in wait_kinds(spans)


async def test_uncontended_path_makes_no_spans(spans: InMemorySpanExporter) -> None:
    gate = Gate("p", max_concurrency=4, rpm=1000, tpm=1_000_000)
    for _ in range(50):
        async with gate.admit(10) as permit:
            permit.settle(10)
    assert spans.get_finished_spans() == ()


async def test_priority_order_then_fifo() -> None:
    limiter = ConcurrencyLimiter(1)
    await limiter.acquire()
    order: list[str] = []

    async def waiter(label: str, priority: int) -> None:
        await limiter.acquire(priority)
        order.append(label)
        limiter.release()

    async with anyio.create_task_group() as tg:
        for label, prio in [("low1", 0), ("high1", 5), ("mid", 1), ("high2", 5), ("low2", 0)]:
            tg.start_soon(waiter, label, prio)
            await wait_all_tasks_blocked()
        limiter.release()
    assert order == ["high1", "high2", "mid", "low1", "low2"]


async def test_cancelled_waiter_never_leaks_a_slot() -> None:
    limiter = ConcurrencyLimiter(1)
    await limiter.acquire()
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def cancelled_waiter() -> None:
            with scope:
                await limiter.acquire()
                pytest.fail("should have been cancelled")

        tg.start_soon(cancelled_waiter)
        await wait_all_tasks_blocked()
        scope.cancel()
    limiter.release()
    assert limiter.in_flight == 0
    assert limiter.try_acquire()
    limiter.release()


async def test_slot_granted_during_cancellation_is_passed_on() -> None:
    limiter = ConcurrencyLimiter(1)
    await limiter.acquire()
    got: list[str] = []
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def first() -> None:
            with scope:
                await limiter.acquire()
                got.append("first")  # may run if the grant wins; then it must release
                limiter.release()

        async def second() -> None:
            await limiter.acquire()
            got.append("second")
            limiter.release()

        tg.start_soon(first)
        await wait_all_tasks_blocked()
        tg.start_soon(second)
        await wait_all_tasks_blocked()
        limiter.release()  # grants `first` ...
        scope.cancel()  # ... which is cancelled before it runs
    assert "second" in got
    assert limiter.in_flight == 0


def test_token_bucket_reserves_and_waits() -> None:
    bucket = TokenBucket(60)  # 1 per second, burst of 60
    now = 1000.0  # the first reserve sets the clock origin
    assert bucket.reserve(60, now) == 0.0
    assert bucket.reserve(1, now) == pytest.approx(1.0)
    assert bucket.reserve(1, now) == pytest.approx(2.0)  # queued behind the first debt
    assert bucket.reserve(1, now + 10) == pytest.approx(0.0)  # 10 s refilled the debt
    # larger than the capacity: clamped to a full bucket, so it is served, not stuck forever
    assert bucket.reserve(10_000, now + 100) == 0.0
    assert bucket.reserve(1, now + 100) == pytest.approx(1.0)


async def test_tpm_corrected_by_real_usage() -> None:
    gate = Gate("p", tpm=6000)
    assert gate.tpm is not None
    async with gate.admit(5000) as permit:
        permit.settle(1000)  # used far less than estimated: refunded
    assert gate.tpm.level == pytest.approx(5000, abs=5)


async def test_rate_wait_makes_a_span_and_refunds_on_cancel(
    spans: InMemorySpanExporter,
) -> None:
    gate = Gate("p", rpm=60)
    assert gate.rpm is not None
    gate.rpm.drain()
    with anyio.move_on_after(0.05):
        async with gate.admit(1):
            pytest.fail("should have waited for the rate")
    assert gate.slots.in_flight == 0
    assert gate.rpm.level > -0.5  # the cancelled reservation was refunded
    assert wait_kinds(spans) == ["rate_limit"]


async def test_pacing_from_ratelimit_headers(spans: InMemorySpanExporter) -> None:
    gate = Gate("p")
    async with gate.admit(10) as permit:
        permit.settle(10, RateLimitInfo(remaining_requests=0, reset_requests_s=0.1))
    start = anyio.current_time()
    async with gate.admit(10) as permit:
        permit.settle(10)
    assert anyio.current_time() - start >= 0.09
    assert wait_kinds(spans) == ["rate_limit"]


def test_aimd_cuts_once_per_burst_and_recovers_additively() -> None:
    limiter = ConcurrencyLimiter(8, recover_every=3)
    limiter.on_rate_limited(now=100.0)
    assert limiter.limit == 4
    limiter.on_rate_limited(now=100.5)  # same burst
    assert limiter.limit == 4
    limiter.on_rate_limited(now=102.0)
    assert limiter.limit == 2
    for _ in range(3):
        limiter.on_success()
    assert limiter.limit == 3
    for _ in range(100):
        limiter.on_success()
    assert limiter.limit == 8  # never above the configured ceiling
    one = ConcurrencyLimiter(1)
    one.on_rate_limited(now=0.0)
    assert one.limit == 1  # min 1


def test_aimd_on_unbounded_limiter_cuts_from_in_flight() -> None:
    limiter = ConcurrencyLimiter()
    for _ in range(20):
        assert limiter.try_acquire()
    limiter.on_rate_limited(now=0.0)
    assert limiter.limit == 10
    assert not limiter.try_acquire()


async def test_aimd_cut_holds_back_waiters_until_recovery() -> None:
    gate = Gate("p", max_concurrency=4, recover_every=1, overload=QUICK)
    async with AsyncExitStack() as last:
        await last.enter_async_context(gate.admit(1))
        async with AsyncExitStack() as three:
            permits = [await three.enter_async_context(gate.admit(1)) for _ in range(3)]
            for permit in permits:
                permit.rate_limited(None)  # three of four calls bounce: an overload
            assert gate.slots.limit == 2
        # the three leave unsettled (failed calls): slots back, no AIMD recovery
        assert gate.slots.in_flight == 1
        assert gate.slots.try_acquire()  # 2 allowed now
        assert not gate.slots.try_acquire()


# -- quotas learned from rate-limit info, and from 429s alone -----------------------------


def on_mock_clock(fn: Callable[[], Awaitable[T]]) -> T:
    from trio.testing import MockClock

    return anyio.run(fn, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})


def test_quota_learned_from_ratelimit_info() -> None:
    async def run() -> float:
        gate = Gate("p")
        async with gate.admit(1000) as permit:
            # a 10,000 tokens/min quota: 1,000 used, 9,000 left, full again in 12 s
            permit.settle(1000, RateLimitInfo(remaining_tokens=9000, reset_tokens_s=12.0))
        assert gate.learned_tpm is not None and gate.learned_tpm.bucket is not None
        bucket = gate.learned_tpm.bucket
        assert bucket.rate * 60 == pytest.approx(5000)  # (10,000 - 9,000) / 12 s
        assert bucket.capacity == pytest.approx(10_000)
        start = anyio.current_time()
        for _ in range(10):  # 10,000 tokens: 9,000 are there, 1,000 take 12 s to refill
            async with gate.admit(1000) as permit:
                permit.settle(1000)
        return anyio.current_time() - start

    assert on_mock_clock(run) == pytest.approx(12.0, rel=0.01)


def test_configured_tpm_wins_over_learned() -> None:
    gate = Gate("p", tpm=1000)
    assert gate.learned_tpm is None and gate.blind_tpm is None
    assert gate.learned_rpm is not None  # requests/min is still learned


async def enter_and_leave(gate: Gate, tokens: int) -> None:
    async with gate.admit(tokens):
        pass


def test_a_429_pauses_calls_already_waiting_on_the_rate() -> None:
    async def run() -> float:
        gate = Gate("p", tpm=60, overload=QUICK)  # one token a second
        async with gate.admit(60) as permit:
            permit.settle(60)
        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(enter_and_leave, gate, 2)  # owes 2 s
            await anyio.sleep(1)
            for _ in range(2):  # half the calls bounce: an overload
                gate.rate_limited(5.0)  # the provider says: nothing before start + 6 s
        return anyio.current_time() - start

    assert on_mock_clock(run) == pytest.approx(6.0, abs=0.01)


def test_blind_quota_aimd_on_rate() -> None:
    async def run() -> None:
        gate = Gate("p", overload=QUICK)
        blind = gate.blind_tpm
        assert blind is not None
        for _ in range(10):  # 1,000 tokens a second for 10 s
            await anyio.sleep(1)
            async with gate.admit(1000) as permit:
                permit.settle(1000)
        for _ in range(4):  # 4 of 10 recent calls bounce: no overload yet
            gate.rate_limited(1.0)
        assert blind.bucket is None
        gate.rate_limited(1.0)
        assert blind.bucket is not None
        first = blind.bucket.rate
        assert 900 <= first <= 1200  # tokens/s over the window
        await anyio.sleep(0.5)
        gate.rate_limited(1.0)  # same burst: no second cut
        assert blind.bucket.rate == first
        await anyio.sleep(20)  # nothing admitted since: cut, but at most by half
        gate.rate_limited(1.0)
        gate.rate_limited(1.0)
        assert blind.bucket.rate == pytest.approx(first * 0.5)
        assert gate.tpm_bucket() is blind.bucket

    on_mock_clock(run)


def test_swarm_paced_by_sim_quota_headers_alone() -> None:
    from swarm.catalog import LatencyProfile
    from swarm.errors import RateLimited
    from swarm.messages import ChatRequest, Message
    from swarm.providers.sim import Faults, SimProvider

    quota = 60_000  # 1,000 tokens/s; each call is 1 + 500 tokens and takes 0.5 s
    profile = LatencyProfile(ttft_s=0.0, output_tps=1000, prefill_tps=1e12, jitter=0.0)
    provider = SimProvider(profile=profile, faults=Faults(quota_tpm=quota))
    request = ChatRequest(messages=[Message.user("go")], max_tokens=500)
    gate = Gate("sim")
    rejected = 0

    async def agent() -> None:
        nonlocal rejected
        for _ in range(40):
            while True:
                async with admit((gate,), 501) as permit:
                    try:
                        result = await provider.chat("m", request)
                    except RateLimited as exc:
                        permit.rate_limited(exc.retry_after)
                        retry_after = exc.retry_after
                    else:
                        permit.settle(501, result.rate_limit)
                        break
                rejected += 1
                await anyio.sleep(retry_after or 1.0)

    async def run() -> float:
        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(agent)
        return anyio.current_time() - start

    elapsed = on_mock_clock(run)
    used = 400 * 501
    # the bucket's first minute, then the refill: well used, and no storm of 429s
    assert elapsed < (used - quota) / 1000 * 1.1
    assert rejected <= 3


# -- the permit: everything held is given back on every path -------------------------------


async def test_permit_cancelled_on_a_later_gate_gives_back_the_earlier_ones() -> None:
    provider, model = Gate("p", max_concurrency=2), Gate("p/m", max_concurrency=1)
    async with model.admit(1):  # the model's only slot is taken
        with anyio.move_on_after(0.01):
            async with admit((provider, model), 1):
                pytest.fail("the model gate is full")
        assert provider.slots.in_flight == 0
    assert model.slots.in_flight == 0


async def test_permit_released_on_error_and_unsettled_counts_as_failure() -> None:
    gate = Gate("p", max_concurrency=4, tpm=6000)
    assert gate.tpm is not None
    gate.slots.limit = 2  # as after an AIMD cut: a success would win a slot back
    with pytest.raises(RuntimeError):
        async with gate.admit(1000):
            raise RuntimeError("boom")
    assert gate.slots.in_flight == 0
    assert gate.slots.limit == 2  # no AIMD recovery from a failed call
    assert gate.tpm.level == pytest.approx(5000, abs=5)  # the request may have been sent


async def test_permit_429_cuts_before_the_slot_goes_back() -> None:
    gate = Gate("p", max_concurrency=2, overload=QUICK)
    async with anyio.create_task_group() as tg, gate.admit(1):
        async with gate.admit(1) as permit:
            tg.start_soon(enter_and_leave, gate, 1)
            await wait_all_tasks_blocked()  # queued for a slot
            permit.rate_limited(0.01)
            permit.rate_limited(0.01)  # as if both calls had bounced: an overload
        assert gate.slots.limit == 1
        assert gate.slots.in_flight == 1  # the freed slot did not go to the waiter
        assert gate.paused_until > 0
