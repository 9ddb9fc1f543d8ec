"""Remote overhead in a trace: each `swarm.remote {call}` span (a round trip from the
driver to a workspace's actor on a cluster node) split into the command's own time on the
node (`swarm.remote.duration_s`) and the rest: the overhead of going remote (Ray's call,
serialising arguments and results, the actor's queue). `swarm trace summary` prints it.

A call whose reply carries no node time (`patch`, `apply`, `open`) counts as a call with
its round trip only, not in the split.
"""

from __future__ import annotations

from typing import Any

from swarm._analysis.model import Trace
from swarm._tracing import semconv as sc

__all__ = ["remote_split"]

_PREFIX = f"{sc.REMOTE_SPAN} "


def _row() -> dict[str, float]:
    return {"calls": 0, "round_trip_s": 0.0, "command_s": 0.0, "overhead_s": 0.0, "timed": 0}


def remote_split(tr: Trace) -> dict[str, Any] | None:
    """Per remote call kind and in total: calls, round trip, the command's time on the
    node, overhead (round trip minus command) and overhead per timed call; None: no
    remote calls in the trace."""
    by_call: dict[str, dict[str, float]] = {}
    for i, name in enumerate(tr.name):
        if not name.startswith(_PREFIX):
            continue
        row = by_call.setdefault(name[len(_PREFIX) :], _row())
        trip = tr.duration_s(i)
        row["calls"] += 1
        row["round_trip_s"] += trip
        node_s = tr.attributes(i).get(sc.REMOTE_DURATION)
        if isinstance(node_s, int | float):
            row["timed"] += 1
            row["command_s"] += float(node_s)
            row["overhead_s"] += trip - float(node_s)
    if not by_call:
        return None
    total = _row()
    for row in by_call.values():
        for key in total:
            total[key] += row[key]
    return {
        "total": _finish(total),
        "by_call": {k: _finish(v) for k, v in sorted(by_call.items(), key=lambda kv: kv[0])},
    }


def _finish(row: dict[str, float]) -> dict[str, float]:
    timed = row["timed"]
    out = {k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}
    out["overhead_ms_per_call"] = round(1000 * row["overhead_s"] / timed, 3) if timed else 0.0
    return out
