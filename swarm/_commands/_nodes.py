"""`swarm simulate --nodes N[,N...] --cores-per-node C`: the options, and the printed
comparison of cluster sizes (`swarm._simulate.capacity`)."""

from __future__ import annotations

import argparse
from typing import Any

from swarm._commands._args import at_least, seconds

__all__ = ["add_node_options", "node_counts", "print_capacity", "print_cluster"]


def node_counts(text: str) -> list[int]:
    """`4` or `1,4,16`: node counts, each 1 or more."""
    parse = at_least(1)
    return [parse(part.strip()) for part in text.split(",") if part.strip()] or [parse(text)]


def add_node_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("a simulated cluster (capacity planning)")
    group.add_argument(
        "--nodes",
        type=node_counts,
        metavar="N[,N...]",
        help="workspaces on N simulated nodes; several counts (1,4,16) compare the makespans",
    )
    group.add_argument(
        "--cores-per-node", type=seconds, default=8.0, help="cores per node (default 8)"
    )
    group.add_argument(
        "--cpus-per-workspace",
        type=seconds,
        default=1.0,
        help="cores a workspace reserves on its node, as [cluster] cpus_per_workspace (1)",
    )


def print_cluster(out: dict[str, Any]) -> None:
    """The cluster lines of a single simulated run."""
    c = out["cluster"]
    print(
        f"  cluster     {c['nodes']} nodes x {c['cores_per_node']:g} cores: {c['slots']} "
        f"workspaces at once (peak {c['peak_workspaces']}, {c['waited']} waited)"
    )
    print(
        f"  cores       reserved {100 * c['reserved']:.0f}%, busy in checks "
        f"{100 * c['busy']:.0f}% (the rest: held while agents wait)"
    )
    print(f"  floor       {out['floor_s']:.2f} s   (with room for every agent at once)")


def print_capacity(plan: dict[str, Any]) -> None:
    """The comparison table of `plan_capacity`, and where scaling stops."""
    runs, scaling = plan["runs"], plan["scaling"]
    first = runs[0]
    c = first["cluster"]
    print(
        f"swarm simulate: {first['agents']} agents, {first['steps']} steps, {first['shape']}, "
        f"check {first['check_s']:g} s, {c['cores_per_node']:g} cores/node, "
        f"{c['cpus_per_workspace']:g} cores/workspace ({_clock(first)} clock)"
    )
    print(
        f"  {'nodes':>5} {'slots':>6} {'makespan':>10} {'speedup':>8} {'effic.':>7} "
        f"{'waited':>7} {'reserved':>9} {'busy':>6} {'merged':>7}"
    )
    for out, step in zip(runs, scaling["steps"], strict=True):
        c = out["cluster"]
        eff = "" if step["efficiency"] is None else f"{step['efficiency']:.2f}"
        print(
            f"  {c['nodes']:>5} {c['slots']:>6} {out['wall_s']:>9.1f}s {step['speedup']:>7.2f}x "
            f"{eff:>7} {c['waited']:>7} {100 * c['reserved']:>8.0f}% {100 * c['busy']:>5.0f}% "
            f"{out['merged']:>7}"
        )
    print(f"  floor {first['floor_s']:.1f} s (room for every agent at once)")
    stops = scaling["stops"]
    where = f"stops scaling after {stops['after_nodes']} nodes: " if stops["after_nodes"] else ""
    print(f"  {where}{stops['reason']}")


def _clock(out: dict[str, Any]) -> str:
    return "virtual" if out["virtual"] else "real"
