"""Each subtask's slack on the plan's critical path, and what the router is told of it.

`plan_slack(plan)` is, per subtask, how many subtask-lengths it could be late without
delaying the run: the longest chain of the plan minus the longest chain through it
(counting subtasks, as the plan's durations are not known in advance). 0 is on the
critical path. `RouteHints` is where the coordinator keeps each subtask's slack as the run
goes (`swarm.run._live_path` re-estimates it from what has happened) and what a deadline
changed; the router reads it on every call (`swarm._routing.Need.slack`): a `balanced`
tier sends critical calls to the fastest candidate and the others to the cheapest
expected within (1 + slack) x the fastest, and a hurried subtask's calls go to the speed
tier's fastest candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from swarm.run._plan import Plan
from swarm.run._plan_graph import chain_lengths

__all__ = ["RouteHints", "plan_slack"]


def plan_slack(plan: Plan) -> dict[str, float]:
    ids = [s.id for s in plan.subtasks]
    index = {x: i for i, x in enumerate(ids)}
    deps = [[index[d] for d in s.depends_on] for s in plan.subtasks]
    after: list[list[int]] = [[] for _ in ids]
    for i, ds in enumerate(deps):
        for d in ds:
            after[d].append(i)
    down = chain_lengths(deps)  # this one and what waits on it
    up = chain_lengths(after)  # this one and what it waits for
    longest = max(down, default=0)
    return {x: float(longest - (up[i] + down[i] - 1)) for i, x in enumerate(ids)}


def _nothing() -> None:
    return None


@dataclass
class RouteHints:
    """What the coordinator tells the router about the run's shape, as it goes."""

    slack: dict[str, float] = field(default_factory=dict)
    """Each subtask's slack, in subtask lengths (0: on the critical path), kept current."""
    hurry: str | None = None
    """Why the run first fell behind its deadline, once it did: the calls of the subtasks
    in `hurried`, and those of no subtask (planner, final verification), then go to the
    speed tier's fastest candidate."""
    hurried: set[str] = field(default_factory=set)
    """Subtasks whose chain no longer fit the deadline (for good: no flapping back)."""
    changes: list[str] = field(default_factory=list)
    """What the deadline changed and why, in order (the report's notes)."""
    margin: float = 1.0
    """Move when the estimated finish times this passes the deadline."""
    one_model: bool = False
    """Every tier has the same one model: moving a call to the fastest candidate leaves it
    where it was (the deadline's notes say so)."""
    max_agents: int | None = None
    """The most agents at once a run behind its deadline may widen to (None: twice the
    run's `max_agents`; 0 or the run's own number: never widen)."""
    on_call: Callable[[], None] = _nothing
    """Called before each call routed by these hints (the live path refreshes if due)."""
