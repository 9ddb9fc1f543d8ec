"""A degraded provider: a hanging first candidate is hedged past within its profile's
first-token latency, and a provider failing 5-30 % of calls does not fail subtasks."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from swarm._routing.router import Router
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm.config import Faults, ProviderConfig, RoutingConfig, SwarmConfig, TierConfig
from swarm.messages import ChatRequest, Message
from swarm.providers.sim import SimEngine
from swarm.providers.sim._server import serve_sim

MODEL = "cerebras/llama-3.3-70b"  # a catalog ref: its profile gives the expected TTFT


async def test_hanging_first_provider_is_hedged_past_without_history() -> None:
    hang = SimEngine(profile=MODEL, faults=Faults(hang_rate=1.0), time_scale=0.1)
    good = SimEngine(profile=MODEL, time_scale=0.1)
    async with serve_sim(hang) as hang_url, serve_sim(good) as good_url:
        config = SwarmConfig(
            providers={
                "hang": ProviderConfig(kind="openai", base_url=hang_url, stall_timeout_s=30),
                "good": ProviderConfig(kind="openai", base_url=good_url),
            },
            tiers={"speed": TierConfig(models=[f"hang/{MODEL}", f"good/{MODEL}"])},
            routing=RoutingConfig(breaker_failures=3),
        )
        providers: list[str] = []
        async with Router(config, env={}) as router:

            async def one() -> None:
                request = ChatRequest(messages=[Message.user("hi")], max_tokens=8, stream=True)
                providers.append((await router.chat(request)).provider)

            # each call would wait the 30 s stall timeout without hedging
            with anyio.fail_after(15):
                for _ in range(6):
                    await one()
            assert router.breaker_state(f"hang/{MODEL}") == "open"  # hedge losses count
    assert providers == ["good"] * 6


BASE = SimSpec(agents=50, steps=500, tool_s=0.5, check_s=1.0, virtual=True, traces_dir=None)


@pytest.mark.parametrize("rate", [0.05, 0.3])
def test_5xx_on_the_only_provider_fails_no_subtask(rate: float) -> None:
    out = run_simulation(replace(BASE, faults=Faults(error_rate=rate)))
    assert out["merged"] == 50 and out["failed"] == 0  # was 12/100 and 82/100 failed
    assert out["attempts"] > 500


@pytest.mark.parametrize("first", ["hang", "refuse", "error"])
def test_dead_or_hanging_first_provider_costs_little(first: str) -> None:
    clean = run_simulation(BASE)
    out = run_simulation(replace(BASE, first=Faults(**{f"{first}_rate": 1.0})))
    assert out["merged"] == 50 and out["first_attempts"] > 0
    assert out["wall_s"] <= 1.3 * clean["wall_s"]  # the hang-first run was 10.8x


def test_the_last_resort_hedges_against_itself() -> None:
    clean = run_simulation(BASE)
    out = run_simulation(replace(BASE, faults=Faults(hang_rate=0.05)))
    assert out["merged"] == 50
    # a hang on the only provider is raced by further calls to it, not waited out for the
    # 30 s stall timeout (9.3x before, on the 100-agent matrix; 2.6x with one backup only)
    assert out["wall_s"] <= 1.5 * clean["wall_s"]
