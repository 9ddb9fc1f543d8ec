"""Agent steps/s and CPU per step: a zero-latency simulated model and a cheap tool.

Each agent makes `--steps` model calls: a tool call per step, then `finish`. Variants:
`bare` (the simulator as the model, no router, no tracing), `router` (the full path:
router, limits, spans recorded to a JSONL trace). Run at 1 and 300 concurrent agents.
`--events` runs every agent with an event callback and a hook (the cost of watching).

    python -m benchmarks.bench_agent [--agents 1,300] [--steps 20] [--events] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from swarm import Agent, Hooks, Router, load_config, tool
from swarm._tracing.setup import run_tracing
from swarm.catalog import LatencyProfile
from swarm.messages import ChatRequest, ChatResult
from swarm.providers.sim import Reply, SimProvider
from swarm.testing import call

ZERO_CONFIG = '[providers.sim]\nkind = "sim"\n[tiers.speed]\nmodels = ["sim/zero"]\n'
ZERO = LatencyProfile(ttft_s=0.0, output_tps=1e12, prefill_tps=1e12, jitter=0.0)


@tool
def lookup(key: str) -> str:
    """Return a value for the key."""
    return key.upper()


@tool
def finish(summary: str) -> None:
    """Finish."""
    from swarm import Finish

    raise Finish(summary)


def script(steps: int) -> Any:
    def play(request: ChatRequest) -> Reply:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done + 1 >= steps:
            return Reply(tool_calls=[call("finish", summary="ok")])
        return Reply(text="looking", tool_calls=[call("lookup", key=f"k{done}")])

    return play


class _Bare:
    name = "bare"

    def __init__(self, provider: SimProvider) -> None:
        self.provider = provider

    async def chat(self, request: ChatRequest) -> ChatResult:
        return await self.provider.chat("m", request)


async def run(variant: str, agents: int, steps: int, events: bool = False) -> dict[str, Any]:
    provider = SimProvider(profile=ZERO, script=script(steps))
    results = []
    seen: list[object] = []

    async def one(model: Any) -> None:
        hooks = [Hooks()] if events else []
        agent: Agent[str] = Agent(
            "coder", model=model, tools=[lookup, finish], max_steps=steps, hooks=hooks
        )
        results.append(await agent.run("go", on_event=seen.append if events else None))

    async def swarm(model_for: Any) -> float:
        cpu = time.process_time()
        async with anyio.create_task_group() as tg:
            for _ in range(agents):
                tg.start_soon(one, model_for())
        return time.process_time() - cpu

    t0 = time.perf_counter()
    if variant == "bare":
        cpu = await swarm(lambda: _Bare(provider))
    else:
        with tempfile.TemporaryDirectory() as tmp, run_tracing("bench", traces_dir=Path(tmp)):
            config = Path(tmp) / "swarm.toml"
            # a model name that is not a catalog ref keeps the provider's zero-latency profile
            config.write_text(ZERO_CONFIG)
            providers: dict[str, Any] = {"sim": provider}
            async with Router(load_config(config, env={}), providers=providers) as router:
                cpu = await swarm(lambda: router.model("speed", role="coder"))
    wall = time.perf_counter() - t0
    total = sum(r.steps for r in results)
    assert total == agents * steps, (total, agents * steps)
    return {
        "variant": variant + ("+events" if events else ""),
        "agents": agents,
        "steps": total,
        "wall_s": round(wall, 3),
        "steps_per_s": round(total / wall, 1),
        "cpu_ms_per_step": round(1000 * cpu / total, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="1,300")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--variants", default="bare,router")
    parser.add_argument("--events", action="store_true", help="an event callback and a hook")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [
        anyio.run(run, variant, int(n), args.steps, args.events)
        for n in args.agents.split(",")
        for variant in args.variants.split(",")
    ]
    if args.json:
        print(json.dumps({"benchmark": "agent", "results": rows}, indent=2))
        return
    for r in rows:
        print(
            f"{r['variant']:>7} agents={r['agents']:>4} steps={r['steps']:>6} "
            f"{r['steps_per_s']:>9,.0f} steps/s  {r['cpu_ms_per_step']:.3f} ms CPU/step"
        )


if __name__ == "__main__":
    main()
