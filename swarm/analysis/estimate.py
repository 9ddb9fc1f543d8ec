"""How honest the run's finish estimate was: each estimate of its pulse file against the
real end.

At 25 %, 50 % and 75 % of the run's wall-clock, the last estimate made by then (a run
writes one every tenth of its elapsed time, at least once a minute: see
`swarm.run.pulse`) is compared with the trace's real end: `error_s` is estimated minus
real (negative: the estimate was early), `in_range` whether the real end fell inside the
estimate's range. The estimate covers the subtasks, not the final verification after
them, so it runs early by about that verification. None when the trace has no pulse file
(a run from before pulses, or a trace copied without it).
"""

from __future__ import annotations

from typing import Any

from swarm.analysis.model import Trace
from swarm.tracing.pulse import PulseRecord, read_pulses

__all__ = ["QUARTERS", "estimate_accuracy"]

QUARTERS = (25, 50, 75)


def estimate_accuracy(tr: Trace, pulses: list[PulseRecord] | None = None) -> dict[str, Any] | None:
    """`{"estimates": n, "at_25": {...}, "at_50": …, "at_75": …}` (see the module docstring);
    a quarter no estimate was made by yet is None."""
    if pulses is None:
        pulses, _ = read_pulses(tr.path)
    made = sorted((p for p in pulses if p.left_s is not None), key=lambda p: p.at_ns)
    if not made or tr.wall_s <= 0:
        return None
    start, end = tr.start_ns, tr.end_ns
    out: dict[str, Any] = {"estimates": len(made)}
    for q in QUARTERS:
        at = start + (end - start) * q // 100
        last = next((p for p in reversed(made) if p.at_ns <= at), None)
        out[f"at_{q}"] = None if last is None else _judged(last, start, end)
    return out


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
