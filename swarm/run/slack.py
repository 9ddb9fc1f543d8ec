"""Each subtask's slack on the plan's critical path, for routing by the run's shape.

`plan_slack(plan)` is, per subtask, how many subtask-lengths it could be late without
delaying the run: the longest chain of the plan minus the longest chain through it
(counting subtasks, as the plan's durations are not known in advance). 0 is on the
critical path. The router reads it as the step's slack (`swarm.routing.Need.slack`): a
`balanced` tier sends critical calls to the fastest candidate and the others to the
cheapest expected within (1 + slack) x the fastest.
"""

from __future__ import annotations

from swarm.run._plan_graph import chain_lengths
from swarm.run.plan import Plan

__all__ = ["plan_slack"]


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
