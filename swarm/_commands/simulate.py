"""`swarm simulate`: a synthetic swarm through the real orchestrator, with figures."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from swarm._commands._args import at_least, positive_seconds, seconds
from swarm._commands._faults import add_fault_options, faults_from_args, parse_first
from swarm._commands._nodes import add_node_options, print_capacity, print_cluster

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add `simulate` to the `swarm` parser."""
    p = subparsers.add_parser(
        "simulate",
        help="run a synthetic swarm on simulated models and tools; report its efficiency",
        description="Plan, N coders doing M model steps in total, checks, fix rounds and "
        "merges, through the real coordinator and router on the simulator. Prints the "
        "makespan against the workload's critical-path lower bound.",
    )
    p.add_argument(
        "--preset",
        choices=["kimi-swarm", "devin-loop"],
        help="a named workload; other options override it",
    )
    p.add_argument("--agents", type=at_least(1), help="coder subtasks (default 10)")
    p.add_argument("--steps", type=at_least(1), help="coder model steps in total (default 100)")
    p.add_argument("--shape", choices=["fanout", "chain", "dag", "spine"])
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="TIER=PROVIDER/MODEL",
        help="a catalog model for a tier: speed=cerebras/kimi-k2.6",
    )
    p.add_argument("--max-agents", type=at_least(1), help="agents at once (default: all)")
    p.add_argument("--rpm", type=at_least(1), help="requests/min limit on the simulated provider")
    p.add_argument("--tpm", type=at_least(1), help="tokens/min limit on the simulated provider")
    p.add_argument("--seed", type=int)
    p.add_argument("--out-tokens", type=at_least(1), help="visible output tokens per step")
    p.add_argument("--tool-s", type=seconds, help="seconds per simulated tool call")
    p.add_argument("--check-s", type=seconds, help="seconds per simulated check")
    p.add_argument("--time-scale", type=seconds, help="multiply model latencies")
    p.add_argument(
        "--no-compaction",
        dest="compaction",
        action="store_false",
        help="agents never compact their history (requests over the window are rejected)",
    )
    p.add_argument(
        "--virtual", action="store_true", help="run on a virtual clock: hours of work in seconds"
    )
    p.add_argument("--traces-dir", default="traces")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument(
        "--stall-timeout-s",
        type=positive_seconds,
        help="when a client gives up on a silent stream (30)",
    )
    p.add_argument(
        "--deadline", type=positive_seconds, help="the run's deadline, simulated seconds"
    )
    p.add_argument(
        "--shift",
        action="append",
        default=[],
        metavar="at_s=S,speed=X[,error_rate=R]",
        help="the provider changes under the run: from simulated second S (or at_call=N) "
        "it runs X times as fast (0.2: 5x slower) and fails R of its calls; repeatable",
    )
    add_fault_options(p, first=True)
    add_node_options(p)
    p.set_defaults(func=_simulate)


def spec_from_args(args: argparse.Namespace) -> Any:
    """The `SimSpec` the options describe (preset first, explicit options over it)."""
    from swarm._simulate.simulation import PRESETS, SimSpec
    from swarm.errors import ConfigError

    values: dict[str, Any] = dict(PRESETS[args.preset]) if args.preset else {}
    for item in args.set:
        tier, sep, ref = item.partition("=")
        if not sep or tier not in ("speed", "reasoning") or "/" not in ref:
            raise ConfigError(f"--set {item!r}: expected speed=PROVIDER/MODEL or reasoning=...")
        values[tier] = ref
    names = {f.name for f in fields(SimSpec)}
    for name in (
        "agents",
        "steps",
        "shape",
        "max_agents",
        "rpm",
        "tpm",
        "seed",
        "out_tokens",
        "tool_s",
        "check_s",
        "time_scale",
        "stall_timeout_s",
        "deadline",
    ):
        value = getattr(args, name)
        if value is not None and name in names:
            values[name] = value
    from swarm.catalog import find_profile

    for tier in ("speed", "reasoning"):
        if tier in values:
            find_profile(values[tier])  # ConfigError naming the unknown ref
    return replace(
        SimSpec(**values),
        virtual=args.virtual,
        traces_dir=Path(args.traces_dir),
        faults=faults_from_args(args),
        first=parse_first(args.first),
        compaction=getattr(args, "compaction", True),
        shifts=_shifts(args.shift),
        cluster=_cluster(args),
    )


def _cluster(args: argparse.Namespace) -> Any:
    """The simulated cluster of the first `--nodes` count, or None without `--nodes`."""
    if not getattr(args, "nodes", None):
        return None
    from swarm._simulate.nodes import Nodes

    return Nodes(args.nodes[0], args.cores_per_node, args.cpus_per_workspace).validate()


def _shifts(items: list[str]) -> tuple[Any, ...]:
    from pydantic import ValidationError

    from swarm.config._shifts import parse_shift
    from swarm.errors import ConfigError

    out = []
    for item in items:
        try:
            _, shift = parse_shift(item)
        except (ValueError, ValidationError) as exc:
            msg = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise ConfigError(f"--shift {item!r}: {msg}") from None
        out.append(shift)
    return tuple(out)


def _simulate(args: argparse.Namespace) -> int:
    from swarm._simulate.simulation import run_simulation

    spec = spec_from_args(args)
    if args.nodes and len(set(args.nodes)) > 1:
        return _compare(args, spec)
    out = run_simulation(spec)
    if out["trace"]:  # the column cache, so `swarm trace view` starts fast
        from swarm._analysis.loader import load_trace

        load_trace(out["trace"])
    code = 1 if out["failed"] else 0  # a subtask that a real run would lose fails here too
    if args.json:
        print(json.dumps(out, indent=2))
        return code
    clock = "virtual" if out["virtual"] else "real"
    print(
        f"swarm simulate: {out['agents']} agents, {out['steps']} steps, {out['shape']}, "
        f"speed={out['speed']}, max_agents={out['max_agents']} ({clock} clock)"
    )
    print(f"  wall        {out['wall_s']:.2f} s   (real {out['real_s']:.2f} s)")
    print(
        f"  bound       {out['bound_s']:.2f} s   ratio {out['ratio']}  "
        f"(actual-latency bound {out['bound_actual_s']:.2f} s, ratio {out['ratio_actual']})"
    )
    print(
        f"  calls       {out['calls']}  tool calls {out['tool_calls']}  "
        f"429s {out['rate_limited']}  fix rounds {out['fix_rounds']}"
    )
    if out["faults"] or out["first_faults"]:
        print(f"  faults      {out['faults']}  first provider {out['first_faults']}")
    print(f"  tokens      {out['tokens']}  cost ${out['cost_usd']:.4f}")
    for note in out["notes"]:
        print(f"  note        {note}")
    print(
        f"  context     peak request {out['peak_input_tokens']} tokens  "
        f"rejected over the window {out['over_window']}  "
        f"compaction {'on' if out['compaction'] else 'off'}"
    )
    print(
        f"  cpu         {out['cpu_s']:.2f} s  ({out['cpu_ms_per_call']} ms/call)  "
        f"peak RSS {out['peak_rss_mb']} MB"
    )
    print(f"  merged      {out['merged']}  failed {out['failed']}")
    if out["cluster"]:
        print_cluster(out)
    note = f"  ({out['trace_note']})" if out["trace_note"] else ""
    print(f"  trace       {out['trace']}{note}")
    return code


def _compare(args: argparse.Namespace, spec: Any) -> int:
    """`--nodes 1,4,16`: the workload on each cluster size, and where scaling stops."""
    from swarm._simulate.capacity import plan_capacity
    from swarm._simulate.simulation import run_simulation

    plan = plan_capacity(spec, args.nodes, run_simulation)
    code = 1 if any(out["failed"] for out in plan["runs"]) else 0
    if args.json:
        print(json.dumps(plan, indent=2))
    else:
        print_capacity(plan)
    return code
