"""Routing by what each step needs, on one simulated workload (issue 16's benchmark).

    python -m benchmarks.bench_routing [--json] [--agents 12] [--steps 144] [--seed 1]

A `spine` plan (a chain of a third of the subtasks sets the makespan; the rest have
slack) runs through `swarm simulate`'s machinery on trio's virtual clock. The speed
tier is three simulated providers serving the same weights: `fast` (Cerebras's Llama
profile, $3/$9 per M), `mid` (Groq's, $1/$3) and `slow` (DeepInfra's, $0.2/$0.6);
`fast` slows 5x halfway through the all-fast run's makespan.
Side by side: fixed order (fast first), `sort = latency`, `balanced` (no slack),
shape-aware (`balanced` with each subtask's live slack), an exact oracle (`latency` told
every host's shift schedule: it routes on what each host will do at the moment of the
call, with no measuring, no hysteresis and no exploration), all-cheap (`sort = price`),
and the deadline runs: all-cheap routing under a deadline of 0.8x the all-cheap makespan
(it must move work to meet it), and shape-aware under the same deadline.
Per run: makespan (simulated s), cost, calls per provider, the run's CPU per call, what
the deadline changed. `router_cpu`: process CPU per call through the router on the
zero-latency simulator, alternating rounds, best of 5: a tier model (`tier`), a tier model
with the slack its agent was made with (`fixed_slack`, how calls were routed before the
live critical path) and the live per-call route (`live_slack`: hints read on every call).
Goals (issue 16):
  adaptive (latency) within 1.1x the oracle's makespan;
  shape-aware >= 30 % cheaper than all-fast (fixed order) at <= 1.1x its makespan;
  under the deadline (all-cheap routing): met, every subtask merged, for less than
  all-fast costs;
  the router's CPU per call (live_slack over fixed_slack) up by no more than 10 %.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

import anyio

from swarm._routing.router import Need, Router
from swarm._simulate.hosts import Host, host_configs
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm._simulate.world import make_plan
from swarm.config import RoutingConfig, SwarmConfig, TierConfig
from swarm.config._shifts import Shift
from swarm.messages import ChatRequest, Message
from swarm.model import Model
from swarm.run._live_path import LivePath
from swarm.run._models import RouterSource

_HOSTS = (
    Host("fast", "cerebras/llama-3.3-70b", 3.0, 9.0),
    Host("mid", "groq/llama-3.3-70b", 1.0, 3.0),
    Host("slow", "deepinfra/llama-3.3-70b", 0.2, 0.6),
)


def _run(spec: SimSpec) -> dict[str, Any]:
    out = run_simulation(spec)
    return {
        "makespan_s": out["wall_s"],
        "cost_usd": round(out["cost_usd"], 5),
        "calls": out["calls_per_host"],
        "stopped": out["stop_reason"],
        "failed": out["failed"],
        "cpu_ms_per_call": out["cpu_ms_per_call"],
        "notes": out["notes"],
    }


async def _router_cpu(calls: int) -> dict[str, float]:
    """CPU ms per call by way of routing (see the module docstring)."""
    tier = TierConfig(models=[f"{h.name}/{h.profile}" for h in _HOSTS], sort="balanced")
    config = SwarmConfig(
        providers=host_configs(_HOSTS, 0.0),
        tiers={"speed": tier},
        routing=RoutingConfig(hedge=False),
    )
    plan = make_plan(12, "spine", 1)
    ids = [s.id for s in plan.subtasks]
    async with Router(config, env={}) as router:
        source = RouterSource(router, config)
        live = LivePath(plan, source.hints)
        live.started(ids[0])
        live.finished(ids[0], 10.0)  # measured lengths: the live estimates are in use
        modes: dict[str, list[Model]] = {
            "tier": [router.model("speed", role="coder")],
            "fixed_slack": [
                router.model("speed", role="coder", need=Need(slack=source.hints.slack[x]))
                for x in ids[1:]
            ],
            "live_slack": [source.model("coder", agent_id=f"coder:{x}") for x in ids[1:]],
        }
        request = ChatRequest(messages=[Message.user("hello")], max_tokens=100)
        best = dict.fromkeys(modes, float("inf"))
        for _ in range(5):
            for name, models in modes.items():
                cpu = time.process_time()
                for k in range(calls):
                    await models[k % len(models)].chat(request)
                best[name] = min(best[name], (time.process_time() - cpu) * 1000 / calls)
    out = {k: round(v, 4) for k, v in best.items()}
    out["live_vs_fixed"] = round(best["live_slack"] / best["fixed_slack"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--agents", type=int, default=12)
    parser.add_argument("--steps", type=int, default=144)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cpu-calls", type=int, default=2000, help="per router_cpu round")
    args = parser.parse_args(argv)
    base = SimSpec(
        agents=args.agents,
        steps=args.steps,
        shape="spine",
        seed=args.seed,
        virtual=True,
        traces_dir=None,
        hosts=_HOSTS,
    )
    half = _run(base)["makespan_s"] / 2  # all-fast, unshifted
    slowed = (replace(_HOSTS[0], shifts=(Shift(at_s=half, speed=0.2),)), *_HOSTS[1:])
    world = replace(base, hosts=slowed)
    no_shape = RoutingConfig(shape=False)
    oracle = RoutingConfig(hysteresis=0.0, explore_every=0)
    runs = {
        "fixed_order": _run(world),
        "latency": _run(replace(world, sort="latency")),
        "balanced": _run(replace(world, sort="balanced", routing=no_shape)),
        "shape_aware": _run(replace(world, sort="balanced")),
        "oracle": _run(replace(world, sort="latency", routing=oracle, oracle=True)),
        "all_cheap": _run(replace(world, sort="price")),
    }
    deadline = round(0.8 * runs["all_cheap"]["makespan_s"], 1)
    runs["deadline"] = _run(replace(world, sort="price", deadline=deadline))
    runs["shape_aware_deadline"] = _run(replace(world, sort="balanced", deadline=deadline))
    fast, shape, dl = runs["fixed_order"], runs["shape_aware"], runs["deadline"]
    goals = {
        "adaptive_vs_oracle_makespan": round(
            runs["latency"]["makespan_s"] / runs["oracle"]["makespan_s"], 3
        ),
        "shape_aware_saving_vs_all_fast": round(1 - shape["cost_usd"] / fast["cost_usd"], 3),
        "shape_aware_makespan_vs_all_fast": round(shape["makespan_s"] / fast["makespan_s"], 3),
        "deadline_s": deadline,
        "deadline_met": dl["makespan_s"] <= deadline and not dl["stopped"] and not dl["failed"],
        "deadline_cost_vs_all_cheap": round(dl["cost_usd"] / runs["all_cheap"]["cost_usd"], 3),
        "deadline_cost_vs_all_fast": round(dl["cost_usd"] / fast["cost_usd"], 3),
    }
    goals["met"] = {
        "adaptive_within_1.1x_oracle": goals["adaptive_vs_oracle_makespan"] <= 1.1,
        "shape_aware_30pct_cheaper": goals["shape_aware_saving_vs_all_fast"] >= 0.30,
        "shape_aware_within_1.1x_all_fast": goals["shape_aware_makespan_vs_all_fast"] <= 1.1,
        "deadline_met_cheaper_than_all_fast": bool(goals["deadline_met"])
        and goals["deadline_cost_vs_all_fast"] < 1.0,
    }
    cpu = anyio.run(_router_cpu, args.cpu_calls)
    goals["router_cpu_live_vs_fixed"] = cpu["live_vs_fixed"]
    goals["met"]["router_cpu_within_10pct"] = cpu["live_vs_fixed"] <= 1.10
    result = {"slowdown_at_s": round(half, 2), "runs": runs, "router_cpu": cpu, "goals": goals}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"fast slows 5x at {half:.1f} s (simulated)")
    for name, r in runs.items():
        calls = " ".join(f"{h}={n}" for h, n in r["calls"].items())
        print(f"  {name:22} {r['makespan_s']:8.1f} s  ${r['cost_usd']:.4f}  {calls}")
    print(f"  router CPU ms/call: {cpu}")
    for key, value in goals.items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
