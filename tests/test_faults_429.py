"""429s: a retry floor whatever Retry-After says, and random 429s that do not choke a run.

Hostile Retry-After values are served over real loopback HTTP; the run-level figures come
from `swarm simulate` on the virtual clock (deterministic under the seed).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace

import anyio
import pytest
from aiohttp import web

from swarm._routing.gate import Gate
from swarm._routing.router import Router
from swarm._serve import serve_app
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm.config import Faults, ProviderConfig, RoutingConfig, SwarmConfig, TierConfig
from swarm.errors import RateLimited
from swarm.messages import ChatRequest, Message


@asynccontextmanager
async def always_429(retry_after: str, hits: list[float]) -> AsyncIterator[str]:
    async def chat(request: web.Request) -> web.Response:
        hits.append(anyio.current_time())
        body = {"error": {"message": "slow down", "type": "rate_limit_error"}}
        return web.json_response(body, status=429, headers={"Retry-After": retry_after})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with serve_app(app) as url:
        yield f"{url}/v1"


@pytest.mark.parametrize("retry_after", ["0", "-5", "Wed, 21 Oct 2015 07:28:00 GMT"])
async def test_hostile_retry_after_never_retries_at_once(retry_after: str) -> None:
    hits: list[float] = []
    async with always_429(retry_after, hits) as url:
        config = SwarmConfig(
            providers={"p": ProviderConfig(kind="openai", base_url=url)},
            tiers={"speed": TierConfig(models=["p/m"])},
            routing=RoutingConfig(backoff_initial_s=0.1, max_rate_limit_wait_s=1.0, hedge=False),
        )
        async with Router(config, env={}) as router:
            with anyio.fail_after(20), pytest.raises(RateLimited):
                await router.chat(ChatRequest(messages=[Message.user("hi")], max_tokens=4))
    # the floors (0.05, 0.1, 0.2, 0.4, ... s) use up the 1 s wait budget in a few tries
    assert 2 <= len(hits) <= 8


def test_random_429s_do_not_cut_or_pause() -> None:
    async def run() -> None:
        gate = Gate("p")
        scattered: list[bool] = []
        for i in range(100):  # 30 % of the calls bounce, whatever the load
            async with gate.admit(10) as permit:
                if i % 10 in (2, 5, 8):
                    scattered.append(permit.rate_limited(1.0))
                else:
                    permit.settle(10)
            await anyio.sleep(0.1)
        # the first ones are too few to judge (their Retry-After is waited), then scattered
        assert scattered[0] is False and all(scattered[7:])
        assert gate.slots.limit == math.inf
        assert gate.paused_until == 0.0
        assert gate.tpm_bucket() is None  # no rate learned from noise

    on_mock_clock(run)


def test_an_overload_still_cuts_and_pauses() -> None:
    async def run() -> None:
        gate = Gate("p")
        for i in range(15):  # every call bounces: overload
            async with gate.admit(10) as permit:
                assert not permit.rate_limited(2.0)
            # judged once 429s have been half of 20 calls (the 10th) for 1 s (the 15th)
            assert gate.slots.limit == (1 if i == 14 else math.inf)
            await anyio.sleep(0.2)
        assert gate.slots.limit == 1
        assert gate.paused_until > anyio.current_time()

    on_mock_clock(run)


def on_mock_clock(fn: Callable[[], Awaitable[None]]) -> None:
    from trio.testing import MockClock

    anyio.run(fn, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})


BASE = SimSpec(agents=50, steps=500, tool_s=0.5, check_s=1.0, virtual=True, traces_dir=None, seed=3)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tpm", [None, 5_000_000])
def test_30_percent_random_429s_cost_retries_not_the_run(tpm: int | None, seed: int) -> None:
    spec = replace(BASE, tpm=tpm, seed=seed)
    clean = run_simulation(spec)
    limited = run_simulation(replace(spec, faults=Faults(rate_limit_rate=0.3)))
    assert limited["merged"] == 50 and limited["rate_limited"] > 100
    # scattered 429s cost their calls a short floor, not the 1 s Retry-After (1.5-1.9x by
    # seed while it was waited; 1,367x with cuts and pauses on every 429, 37x under a
    # fixed tpm); 1.09-1.34x over seeds 0-5
    assert limited["wall_s"] <= 1.5 * clean["wall_s"], (limited["wall_s"], clean["wall_s"])


def test_the_same_seed_gives_the_same_faulted_run() -> None:
    faults = Faults(rate_limit_rate=0.3, error_rate=0.05, stall_rate=0.05, hang_rate=0.05)
    spec = replace(BASE, agents=20, steps=200, faults=faults)
    figures = ("wall_s", "attempts", "rate_limited", "calls", "merged", "tokens")
    first, again = run_simulation(spec), run_simulation(spec)
    assert first["rate_limited"] > 20 and first["merged"] == 20
    assert {k: first[k] for k in figures} == {k: again[k] for k in figures}
    other = run_simulation(replace(spec, seed=spec.seed + 1))
    assert (other["wall_s"], other["attempts"]) != (first["wall_s"], first["attempts"])


def test_zero_retry_after_429s_finish_on_the_virtual_clock() -> None:
    out = run_simulation(replace(BASE, faults=Faults(rate_limit_rate=0.3, retry_after_s=0)))
    assert out["merged"] == 50
    assert out["attempts"] < 2 * 500  # retries, not a storm
