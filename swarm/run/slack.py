"""Each subtask's slack on the plan's critical path, for routing by the run's shape.

`plan_slack(plan)` is, per subtask, how many subtask-lengths it could be late without
delaying the run: the longest chain of the plan minus the longest chain through it
(counting subtasks, as the plan's durations are not known in advance). 0 is on the
critical path. The router reads it as the step's slack (`swarm.routing.Need.slack`): a
`balanced` tier sends critical calls to the fastest candidate and the others to the
cheapest expected within (1 + slack) x the fastest. `Pace` watches a run with a deadline:
when the critical path still ahead no longer fits, every call goes to the speed tier's
fastest candidate (`RouteHints.hurry`), before the deadline has to stop the run.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from swarm.run._plan_graph import chain_lengths
from swarm.run.plan import Plan

__all__ = ["Pace", "RouteHints", "plan_slack"]


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


@dataclass
class RouteHints:
    """What the coordinator tells the router about the run's shape, as it goes."""

    slack: dict[str, float] = field(default_factory=dict)
    """Each subtask's slack, in subtask lengths (0: on the critical path)."""
    hurry: str | None = None
    """Why the run is behind its deadline, once it is: every call then goes to the speed
    tier's fastest candidate (the report says so)."""
    margin: float = 1.0
    """Hurry when the estimated finish times this passes the deadline."""


class Pace:
    """Estimates the run's finish from the critical path still ahead and the subtasks'
    measured length; when that passes the deadline (times `margin`), it hurries."""

    def __init__(self, plan: Plan, hints: RouteHints) -> None:
        self._ids = [s.id for s in plan.subtasks]
        index = {x: i for i, x in enumerate(self._ids)}
        self._down = chain_lengths([[index[d] for d in s.depends_on] for s in plan.subtasks])
        self._hints, self._margin = hints, hints.margin
        self._walls: list[float] = []

    def finished(self, wall_s: float, finished: Set[str], remaining_s: float) -> str | None:
        """Note one subtask's length; the reason, when this is what made the run hurry."""
        if wall_s > 0:
            self._walls.append(wall_s)
        if self._hints.hurry is not None or not self._walls or remaining_s == float("inf"):
            return None
        ahead = max(
            (n for x, n in zip(self._ids, self._down, strict=True) if x not in finished),
            default=0,
        )
        estimate = ahead * sum(self._walls) / len(self._walls)
        if estimate * self._margin <= remaining_s:
            return None
        self._hints.slack.update(dict.fromkeys(self._hints.slack, 0.0))
        self._hints.hurry = (
            f"deadline: {ahead} subtask(s) still on the critical path at ~{estimate / ahead:.0f} s "
            f"each need ~{estimate:.0f} s, {remaining_s:.0f} s left: every call moved to the "
            "speed tier's fastest candidate"
        )
        return self._hints.hurry
