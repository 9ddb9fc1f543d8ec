"""How honest the run's finish estimate was: each estimate of its pulse file against the
real end.

At 25 %, 50 % and 75 % of the run's wall-clock, the last estimate made by then (a run
writes one every tenth of its elapsed time, at least once a minute: see
`swarm.run._pulse`) is compared with the trace's real end: `error_s` is estimated minus
real (negative: the estimate was early), `in_range` whether the real end fell inside the
estimate's range. The estimate covers the subtasks, not the final verification after
them, so it runs early by about that verification.

The estimates come from the pulse file beside the trace, else from the run's report,
which keeps them too (`RunReport.estimates`, in `report.json`): the one named, else
`<state>/runs/<run-id>/report.json` where a run puts it (`.swarm/` beside the trace's
`traces/` folder, the folder above a trace in `<state>/traces/`, or `.swarm/` here).
`source` says which. None when neither has an estimate (a run from before estimates, or a
trace copied alone).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from swarm._analysis.model import Trace
from swarm._tracing.pulse import PulseRecord, read_pulses
from swarm.errors import ConfigError

__all__ = ["QUARTERS", "estimate_accuracy", "report_estimates"]

QUARTERS = (25, 50, 75)


def estimate_accuracy(tr: Trace, report: Path | None = None) -> dict[str, Any] | None:
    """`{"estimates": n, "source": …, "at_25": {...}, "at_50": …, "at_75": …}` (see the
    module docstring); a quarter no estimate was made by yet is None. `report`: the run's
    `report.json` to read them from when the trace has no pulse file."""
    pulses, _ = read_pulses(tr.path)
    source = "pulse"
    if not any(p.left_s is not None for p in pulses):
        pulses, found = report_estimates(tr, report)
        source = str(found)
    made = sorted((p for p in pulses if p.left_s is not None), key=lambda p: p.at_ns)
    if not made or tr.wall_s <= 0:
        return None
    start, end = tr.start_ns, tr.end_ns
    out: dict[str, Any] = {"estimates": len(made), "source": source}
    for q in QUARTERS:
        at = start + (end - start) * q // 100
        last = next((p for p in reversed(made) if p.at_ns <= at), None)
        out[f"at_{q}"] = None if last is None else _judged(last, start, end)
    return out


def _reports(tr: Trace) -> list[Path]:
    runs = Path("runs") / tr.run_id / "report.json"
    folder = tr.path.parent
    return [folder.parent / ".swarm" / runs, folder.parent / runs, Path(".swarm") / runs]


def report_estimates(
    tr: Trace, report: Path | None = None
) -> tuple[list[PulseRecord], Path | None]:
    """The estimates kept in the run's report (`report`, else where a run writes it: see
    the module docstring) and the report read; ([], None) when there is none. A report
    named but unreadable is a `ConfigError`; one found unreadable is passed over."""
    for path in [report] if report is not None else _reports(tr) if tr.run_id else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            found = [PulseRecord.model_validate(e) for e in doc.get("estimates", ())]
        except (OSError, ValueError, ValidationError, AttributeError) as exc:
            if report is not None:
                why = "not found" if isinstance(exc, FileNotFoundError) else "not a run report"
                raise ConfigError(why, path=str(path), key="estimates") from None
            continue
        return found, path
    return [], None


def _judged(p: PulseRecord, start: int, end: int) -> dict[str, Any]:
    assert p.left_s is not None
    low = p.low_s if p.low_s is not None else p.left_s
    high = p.high_s if p.high_s is not None else p.left_s
    estimated = (p.at_ns - start) / 1e9 + p.left_s
    real = (end - start) / 1e9
    made_at = (p.at_ns - start) / 1e9
    return {
        "made_at_s": round(made_at, 3),
        "estimated_end_s": round(estimated, 3),
        "low_end_s": round(made_at + low, 3),
        "high_end_s": round(made_at + high, 3),
        "real_end_s": round(real, 3),
        "error_s": round(estimated - real, 3),
        "error_share": round((estimated - real) / real, 4) if real > 0 else 0.0,
        "in_range": made_at + low <= real <= made_at + high,
    }
