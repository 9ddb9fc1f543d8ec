"""Compare two runs by latency: wall-clock, critical path and ledger, and the figures per
role, tier and model side by side, biggest changes first."""

from __future__ import annotations

from typing import Any

from swarm._analysis.ledger import CATEGORIES
from swarm._analysis.model import Trace
from swarm._analysis.summary import summarize

__all__ = ["diff"]


def _pair(a: float, b: float) -> dict[str, float]:
    return {"a": a, "b": b, "delta": b - a, "ratio": b / a if a else 0.0}


def _ledger_rows(a: dict[str, float], b: dict[str, float]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"category": c, **_pair(a.get(c, 0.0), b.get(c, 0.0))} for c in CATEGORIES
    ]
    rows.sort(key=lambda r: -abs(r["delta"]))
    return rows


def _group_rows(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    empty: dict[str, Any] = {}
    for key in sorted(set(a) | set(b)):
        ga, gb = a.get(key, empty), b.get(key, empty)
        row: dict[str, Any] = {"key": key}
        for field in (
            "calls",
            "total_s",
            "latency_p50_s",
            "latency_p95_s",
            "ttft_p95_s",
            "tokens_per_s",
            "cost_usd",
            "errors",
            "retries",
        ):
            row[field] = _pair(float(ga.get(field, 0) or 0), float(gb.get(field, 0) or 0))
        rows.append(row)
    rows.sort(key=lambda r: -abs(r["total_s"]["delta"]))
    return rows


def diff(a: Trace, b: Trace) -> dict[str, Any]:
    """How run `b` differs from run `a` (deltas are b − a)."""
    sa, sb = summarize(a), summarize(b)
    out: dict[str, Any] = {
        "a": {"path": sa["path"], "run_id": sa["run_id"], "spans": sa["spans"]},
        "b": {"path": sb["path"], "run_id": sb["run_id"], "spans": sb["spans"]},
        "wall_s": _pair(sa["wall_s"], sb["wall_s"]),
        "critical_path_busy_s": _pair(sa["critical_path"]["busy_s"], sb["critical_path"]["busy_s"]),
        "cost_usd": _pair(sa["totals"]["cost_usd"], sb["totals"]["cost_usd"]),
        "calls": _pair(sa["totals"]["calls"], sb["totals"]["calls"]),
        "ledger": _ledger_rows(sa["ledger"], sb["ledger"]),
        "critical_path_ledger": _ledger_rows(
            sa["critical_path"]["ledger"], sb["critical_path"]["ledger"]
        ),
    }
    changes: list[dict[str, Any]] = []
    for group in ("by_role", "by_tier", "by_model"):
        rows = _group_rows(sa[group], sb[group])
        out[group] = rows
        changes += [
            {"group": group, "key": r["key"], "delta_s": r["total_s"]["delta"]} for r in rows
        ]
    changes += [
        {"group": "critical_path_ledger", "key": r["category"], "delta_s": r["delta"]}
        for r in out["critical_path_ledger"]
    ]
    changes.sort(key=lambda c: -abs(c["delta_s"]))
    out["biggest_changes"] = [c for c in changes if c["delta_s"]][:10]
    return out
