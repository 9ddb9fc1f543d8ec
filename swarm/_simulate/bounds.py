"""The critical-path lower bound of a simulated run (`bound`): from profile medians and
from each call's actual duration, with the run's capacity (`max_agents`, a simulated
cluster's slots) and with unlimited capacity (`floor`); see `swarm._simulate.simulation`."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from swarm._simulate.world import CallRecord
from swarm.catalog import find_profile
from swarm.run._plan import Plan

if TYPE_CHECKING:
    from swarm._simulate.simulation import SimSpec

__all__ = ["bound", "capacity"]


def bound(plan: Plan, calls: Mapping[str, list[CallRecord]], spec: SimSpec) -> dict[str, float]:
    """The critical-path lower bound, from profile medians and from actual call durations;
    `floor`: the expected one with room for every agent at once (no `max_agents`, no
    cluster limit), which no amount of capacity shortens."""
    return {
        "expected": _bound(plan, calls, spec, actual=False),
        "actual": _bound(plan, calls, spec, actual=True),
        "floor": _bound(plan, calls, spec, actual=False, k=len(plan.subtasks)),
    }


def capacity(spec: SimSpec) -> int:
    """Agents that can work at once: `max_agents`, and the simulated cluster's slots."""
    k = spec.max_agents or spec.agents
    return min(k, spec.cluster.slots) if spec.cluster is not None else k


def _agent_s(log: list[CallRecord], spec: SimSpec, *, actual: bool) -> float:
    total = max(0, len(log) - 1) * spec.tool_s  # every step but the last calls a tool
    for c in log:
        if actual:
            total += c.duration_s
        else:
            p = find_profile(c.model)
            total += spec.time_scale * p.expected_s(
                c.input_tokens, c.output_tokens, c.reasoning_tokens
            )
    return total


def _bound(
    plan: Plan,
    calls: Mapping[str, list[CallRecord]],
    spec: SimSpec,
    *,
    actual: bool,
    k: int | None = None,
) -> float:
    agent_s = partial(_agent_s, spec=spec, actual=actual)
    fixers: dict[str, float] = {}
    for agent_id, log in calls.items():
        if agent_id.startswith("fixer:"):
            sid = agent_id.split(":")[1]
            fixers[sid] = fixers.get(sid, 0.0) + agent_s(log) + spec.check_s
    own = {
        s.id: agent_s(calls.get(f"coder:{s.id}", []))
        + spec.check_s
        + fixers.get(s.id, 0.0)
        + spec.merge_s
        for s in plan.subtasks
    }
    chain: dict[str, float] = {}
    for s in plan.subtasks:  # make_plan lists dependencies before their dependents
        chain[s.id] = own[s.id] + max((chain[d] for d in s.depends_on), default=0.0)
    k = k or capacity(spec)
    work = sum(own.values())
    serial_merges = min(own.values(), default=0.0) + len(own) * spec.merge_s
    planner = sum(agent_s(log) for a, log in calls.items() if a.startswith("planner"))
    return planner + max(max(chain.values(), default=0.0), work / k, serial_merges) + spec.check_s
