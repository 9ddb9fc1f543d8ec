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
Per run: makespan (simulated s), cost, calls per provider, router and run CPU per call,
what the deadline changed. Goals (issue 16):
  adaptive (latency) within 1.1x the oracle's makespan;
  shape-aware >= 30 % cheaper than all-fast (fixed order) at <= 1.1x its makespan;
  under the deadline (all-cheap routing): met, every subtask merged, for less than
  all-fast costs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

from swarm._sim_shifts import Shift
from swarm.config import RoutingConfig
from swarm.simulate.hosts import Host
from swarm.simulate.simulation import SimSpec, run_simulation

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--agents", type=int, default=12)
    parser.add_argument("--steps", type=int, default=144)
    parser.add_argument("--seed", type=int, default=1)
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
    result = {"slowdown_at_s": round(half, 2), "runs": runs, "goals": goals}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"fast slows 5x at {half:.1f} s (simulated)")
    for name, r in runs.items():
        calls = " ".join(f"{h}={n}" for h, n in r["calls"].items())
        print(f"  {name:22} {r['makespan_s']:8.1f} s  ${r['cost_usd']:.4f}  {calls}")
    for key, value in goals.items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
