"""Where a finished run's wall-clock went, added to its report from its trace.

The run report sums each phase over agents (planning, coding, fixing, checks, merges):
useful, but parallel work does not add up to a wall-clock. The trace does: its ledger
splits every second of the run between causes (model time, tests, tools, merges, worktree
setup and removal, waits for a slot, a rate limit, a dependency), so they sum to 100 %.
`swarm solve` and `swarm resume` add it to `report.md` and `report.json` when a run ends;
loading the trace then also writes its column cache, so `swarm trace view` starts fast.
"""

from __future__ import annotations

from pathlib import Path

from swarm._analysis.ledger import ledger
from swarm._analysis.loader import load_trace
from swarm.errors import SwarmError
from swarm.run._report import RunReport

__all__ = ["with_wall_clock"]


def with_wall_clock(report: RunReport) -> RunReport:
    """`report` with `wall_clock` from its trace (rewritten beside it when it has files)."""
    if not report.trace or not Path(report.trace).is_file():
        return report
    try:
        trace = load_trace(report.trace)
    except (SwarmError, OSError, ValueError):
        return report  # a report without the ledger beats no report
    split = {cause: round(s, 3) for cause, s in ledger(trace).items() if s > 0}
    accounted = report.model_copy(update={"wall_clock": split})
    if accounted.report:
        accounted.write(Path(accounted.report).parent)
    return accounted
