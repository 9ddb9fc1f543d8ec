"""Capacity planning: one workload on clusters of several sizes (`swarm simulate --nodes
1,4,16`), and where adding nodes stops paying, with the reason.

Each size is a full simulation (`run_simulation`) with the same seed, so the runs differ
only in the nodes. Scaling from one size to the next is efficient when the makespan falls
nearly as fast as the node count grows (`EFFICIENT`); the first step below it is where the
cluster stops scaling, and the reason is read off the run: the cluster no longer filled up
(the plan or `max_agents` keeps fewer agents busy than it has room for), the agents fit
in a wave or two (so the makespan is mostly its fixed part), or the makespan reached its
floor (the planner, the longest chain of subtasks and the final check, which no amount of
capacity shortens).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from swarm._simulate.nodes import Nodes

__all__ = ["EFFICIENT", "plan_capacity", "scaling"]

EFFICIENT = 0.7
"""Scaling efficiency (speedup ÷ node-count ratio) below which a step stops paying."""
_NEAR_FLOOR = 1.25
_FEW_WAVES = 2


def plan_capacity(
    spec: Any, node_counts: Sequence[int], run: Callable[[Any], dict[str, Any]]
) -> dict[str, Any]:
    """`run` (a `run_simulation`) of `spec` on each node count; the runs and the verdict."""
    shape = spec.cluster or Nodes(1)
    runs = []
    for n in sorted(set(node_counts)):
        out = run(replace(spec, cluster=replace(shape, nodes=n).validate()))
        runs.append(out)
    return {"runs": runs, "scaling": scaling(runs)}


def _reason(out: dict[str, Any]) -> str | None:
    """Why `out` gains little from more nodes, or None when the cluster is still the limit."""
    cluster, wall, floor = out["cluster"], out["wall_s"], out["floor_s"]
    if wall <= _NEAR_FLOOR * floor:
        return (
            f"the makespan ({wall:.0f} s) is near its floor of {floor:.0f} s: the planner, "
            "the longest chain of subtasks and the final check, which more nodes do not "
            "shorten"
        )
    if cluster["peak_workspaces"] < cluster["slots"]:
        return (
            f"the cluster no longer fills: at most {cluster['peak_workspaces']} workspaces "
            f"were open at once for {cluster['slots']} places (the plan's width and "
            f"max_agents={out['max_agents']} set it), so more nodes stay idle"
        )
    waves = -(-out["max_agents"] // cluster["slots"])
    if waves <= _FEW_WAVES:
        return (
            f"{out['max_agents']} agents take only {waves} waves of {cluster['slots']} "
            f"workspaces: the makespan ({wall:.0f} s) is mostly its floor of {floor:.0f} s "
            "(the planner, the longest subtask, the final check), which more nodes do not "
            f"shorten: at most the {wall - floor:.0f} s above it is left to win"
        )
    return None


def scaling(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Speedup and efficiency per run against the first; where scaling stops, and why."""
    first = runs[0]
    steps: list[dict[str, Any]] = []
    stop: dict[str, Any] | None = None
    for prev, out in zip([None, *runs], runs, strict=False):
        n = out["cluster"]["nodes"]
        row = {
            "nodes": n,
            "makespan_s": out["wall_s"],
            "speedup": round(first["wall_s"] / out["wall_s"], 3) if out["wall_s"] else None,
            "efficiency": None,
        }
        if prev is not None and out["wall_s"]:
            grow = n / prev["cluster"]["nodes"]
            row["efficiency"] = round(prev["wall_s"] / out["wall_s"] / grow, 3)
            if stop is None and row["efficiency"] < EFFICIENT:
                reason = _reason(out) or _reason(prev) or "more nodes pay little"
                stop = {"after_nodes": prev["cluster"]["nodes"], "reason": reason}
        steps.append(row)
    if stop is None:
        last = runs[-1]
        found = _reason(last)
        c = last["cluster"]
        per_node = max(1, c["slots"] // c["nodes"])
        reason = found or (
            f"still scaling at {c['nodes']} nodes: the cluster stayed full "
            f"({c['waited']} workspaces waited for room); more nodes help until about "
            f"{-(-last['max_agents'] // per_node)} hold max_agents={last['max_agents']} "
            f"at once, and nothing goes below the floor of {last['floor_s']:.0f} s"
        )
        stop = {"after_nodes": None, "reason": reason}
    return {"steps": steps, "stops": stop}
