"""Which lane and row each span is drawn in, worked out lane by lane.

Each `invoke_agent` span owns a lane, labelled by its subtask and role ("t17 · coder"; a
second fixer round of t17 is "t17 · fixer 2"), in the order the agents started, and its
descendants are drawn in it, one row per depth below the agent (deeper spans share the
last row). The merge queue's batches and splits share lane 1, "merge queue", when the run
has any; spans outside any agent or batch (the workflow root, merge waits) go to lane 0,
"run".

`plan_lanes` finds the lanes and their labels from the agent spans alone (a few thousand
at 1M spans); `walk` then places one lane's spans by walking its owner's subtree. So the
payload builder can send the first screen's lanes before it has looked at the rest.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from swarm._analysis import Trace
from swarm._tracing import semconv as sc

__all__ = ["MAX_DEPTH", "Lanes", "plan_lanes", "positions", "walk"]

MAX_DEPTH = 3
"""Rows below an agent's own row; deeper spans share the last row."""


@dataclass
class Lanes:
    lane: array[int]
    """Per trace index: its lane, -1 until that lane was walked."""
    depth: array[int]
    """Per trace index: its row within the lane."""
    labels: list[str]
    role: list[str]
    """Per lane: the agent's role ("" for the run and merge-queue lanes)."""
    subtask: list[str]
    roots: list[list[int]] = field(default_factory=list)
    """Per lane: the spans its walk starts from (an agent lane: the agent)."""
    queue_rows: dict[int, int] = field(default_factory=dict)
    """The merge queue's spans and their rows (see `_queue_rows`)."""

    @property
    def queue_lane(self) -> int:
        return 1 if self.queue_rows else -1


def positions(values: Sequence[object], value: object) -> list[int]:
    """Indices of `value` in `values`: `list.index` scans in C, several times faster than a
    comprehension over a million spans when `value` is rare (agents: 1 span in 30)."""
    out: list[int] = []
    index = values.index
    try:
        while True:
            out.append(index(value, out[-1] + 1 if out else 0))
    except ValueError:
        return out


def plan_lanes(trace: Trace, queue: Sequence[int]) -> Lanes:
    """The lanes, their labels and where each one's walk starts; `queue`: the merge
    queue's batch and split spans."""
    n = len(trace)
    out = Lanes(array("i", [-1]) * n, array("B", bytes(n)), ["run"], [""], [""])
    agents = positions(trace.op, sc.OP_AGENT)
    out.queue_rows = _queue_rows(trace, queue) if queue else {}
    owns = set(agents).union(out.queue_rows)
    out.roots.append([i for i in trace.roots if i not in owns])
    if queue:
        out.labels.append("merge queue")
        out.role.append("")
        out.subtask.append("")
        out.roots.append(sorted(out.queue_rows, key=trace.start.__getitem__))
    seen: dict[tuple[str, str], int] = {}
    for i in sorted(agents, key=trace.start.__getitem__):
        role = trace.agent[i] or trace.name[i].split(" ", 1)[-1]
        sub = trace.subtask[i]
        k = seen[sub, role] = seen.get((sub, role), 0) + 1
        label = f"{sub} · {role}" if sub else role
        out.labels.append(label if k == 1 else f"{label} {k}")
        out.role.append(role)
        out.subtask.append(sub)
        out.roots.append([i])
        out.lane[i] = len(out.labels) - 1  # known before its lane is walked: it is sent first
    return out


def walk(trace: Trace, lanes: Lanes, lane: int) -> list[int]:
    """Place the spans of `lane` (lane and row, in `lanes`) and return them: its roots and
    what hangs below them, down to the next agent or merge-queue span (which own lanes)."""
    children, op = trace.children, trace.op
    rows, lane_of, depth = lanes.queue_rows, lanes.lane, lanes.depth
    below = max(rows.values()) if lane == lanes.queue_lane else 0
    out: list[int] = []
    stack = [(r, 0) for r in lanes.roots[lane]]
    while stack:
        i, dist = stack.pop()
        lane_of[i] = lane
        # what runs inside a batch or split goes below all their rows
        depth[i] = rows[i] if i in rows else min(MAX_DEPTH, dist + below)
        out.append(i)
        for c in children.get(i, ()):
            if op[c] != sc.OP_AGENT and c not in rows:
                stack.append((c, min(MAX_DEPTH, dist + 1)))
    return out


def _queue_rows(trace: Trace, queue: Sequence[int]) -> dict[int, int]:
    """Rows for batches and splits, which overlap (speculation): first fit in start order,
    in at most `MAX_DEPTH - 1` rows, so what runs inside them gets a row below."""
    ends: list[int] = []
    row_of: dict[int, int] = {}
    for i in sorted(queue, key=trace.start.__getitem__):
        free = [r for r, e in enumerate(ends) if e <= trace.start[i]]
        if free:
            row = free[0]
        elif len(ends) < MAX_DEPTH - 1:
            row = len(ends)
            ends.append(0)
        else:
            row = len(ends) - 1
        ends[row] = max(ends[row], trace.end[i])
        row_of[i] = row
    return row_of
