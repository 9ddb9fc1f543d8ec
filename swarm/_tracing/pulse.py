"""The pulse file beside a trace: `<trace>.pulse`, the run's state as it goes.

Spans are written when they end, so a trace cannot say what is happening now (the waits
in progress, the merge queue) nor what the run expected of itself. While a run works it
appends one JSON line here every few seconds (a tenth of the time elapsed, between 1 s
and a minute): the estimated finish with its range and the live critical path, the waits
in progress by kind, the merge queue, the subtasks' states, and the spend against the
budget. The live viewer reads it as it grows; `swarm trace summary` compares each
estimate with the run's real end. Figures only: no prompt, no secret.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["PulseRecord", "append_pulse", "pulse_path", "read_pulses"]


class PulseRecord(BaseModel):
    """One line of the pulse file."""

    at_ns: int
    """When (Unix ns)."""
    elapsed_s: float
    """Seconds since the run's subtasks started."""
    left_s: float | None = None
    """Estimated seconds to the last subtask's end (None: nothing measured yet)."""
    low_s: float | None = None
    """The estimate's range, low end."""
    high_s: float | None = None
    """The estimate's range, high end."""
    critical: list[str] = []
    """Subtasks ahead with no slack (the live critical path)."""
    waiting: dict[str, int] = {}
    """Waits in progress by kind (queue, rate_limit, check, merge, backoff…)."""
    merge_queued: int = 0
    """Patches in the merge queue now."""
    subtasks: dict[str, int] = {}
    """Subtasks by state (queued, running, fixing, merged, failed) and `total`."""
    spent_usd: float = 0.0
    """What the run has spent."""
    budget_usd: float | None = None
    """The run's money limit, if any."""


def pulse_path(trace_path: Path) -> Path:
    """The pulse file of a trace (`traces/<run>.jsonl.pulse`)."""
    return trace_path.with_name(trace_path.name + ".pulse")


def append_pulse(trace_path: Path, record: PulseRecord) -> None:
    """Append one record (a whole line, flushed)."""
    with pulse_path(trace_path).open("a", encoding="utf-8") as fh:
        fh.write(record.model_dump_json(exclude_defaults=True) + "\n")


def read_pulses(trace_path: Path, offset: int = 0) -> tuple[list[PulseRecord], int]:
    """The whole records from byte `offset` on, and the offset after the last whole line
    (a line being written is left for the next read; a bad line is skipped)."""
    path = pulse_path(trace_path)
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out: list[PulseRecord] = []
    for line in data[:end].splitlines():
        try:
            out.append(PulseRecord.model_validate(json.loads(line)))
        except (ValueError, ValidationError):
            continue
    return out, offset + end


def as_dicts(records: list[PulseRecord]) -> list[dict[str, Any]]:
    return [r.model_dump(exclude_defaults=True) for r in records]
