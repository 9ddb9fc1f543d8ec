"""Latency budgets as pytest assertions over a recorded trace.

    from swarm._analysis.assertions import assert_critical_path_under
    assert_critical_path_under(run.path, 120)

Each helper takes a `Trace` or a path and raises `AssertionError` explaining where the
time went, so a failed budget reads like a diagnosis.
"""

from __future__ import annotations

from pathlib import Path

from swarm._analysis.critical_path import critical_path_indices
from swarm._analysis.ledger import ledger_indices
from swarm._analysis.loader import load_trace
from swarm._analysis.model import Trace
from swarm._analysis.summary import percentile
from swarm._tracing import semconv as sc

__all__ = [
    "assert_critical_path_under",
    "assert_p95_call_latency_under",
    "assert_rate_limit_waits_under",
]


def _trace(trace: Trace | Path | str) -> Trace:
    return trace if isinstance(trace, Trace) else load_trace(trace)


def _top(ledger: dict[str, float], n: int = 4) -> str:
    items = sorted(((v, k) for k, v in ledger.items() if v > 0), reverse=True)[:n]
    return ", ".join(f"{k} {v:.2f} s" for v, k in items) or "nothing"


def assert_critical_path_under(trace: Trace | Path | str, seconds: float) -> None:
    """The run's wall-clock (the length of its critical path) is under `seconds`."""
    tr = _trace(trace)
    if tr.wall_s < seconds:
        return
    path = critical_path_indices(tr)
    slowest = sorted(path, key=lambda i: tr.start[i] - tr.end[i])[:3]
    steps = "; ".join(
        f"{tr.name[i]} ({tr.role[i] or '-'}) {tr.duration_s(i):.2f} s" for i in slowest
    )
    raise AssertionError(
        f"critical path took {tr.wall_s:.2f} s, budget {seconds:.2f} s "
        f"({len(path)} steps). Where it went: {_top(ledger_indices(tr, path))}. "
        f"Longest steps: {steps or 'none'}."
    )


def assert_p95_call_latency_under(
    trace: Trace | Path | str, seconds: float, tier: str | None = None
) -> None:
    """The 95th percentile of model-call latency (optionally of one tier) is under
    `seconds`."""
    tr = _trace(trace)
    calls = [
        i for i in range(len(tr)) if tr.op[i] == sc.OP_CHAT and (tier is None or tr.tier[i] == tier)
    ]
    durations = sorted(tr.duration_s(i) for i in calls)
    p95 = percentile(durations, 95)
    if p95 < seconds:
        return
    slow = sorted(calls, key=lambda i: tr.start[i] - tr.end[i])[:3]
    detail = "; ".join(
        f"{tr.provider[i]}/{tr.model[i]} {tr.duration_s(i):.2f} s (TTFT "
        f"{max(tr.ttft[i], 0):.2f} s, {tr.output_tokens[i]} tokens out)"
        for i in slow
    )
    scope = f"tier {tier!r}" if tier else "all tiers"
    raise AssertionError(
        f"p95 call latency ({scope}, {len(calls)} calls) is {p95:.2f} s, budget "
        f"{seconds:.2f} s. Slowest: {detail or 'none'}."
    )


def assert_rate_limit_waits_under(trace: Trace | Path | str, seconds: float) -> None:
    """Total time spent waiting on rate limits and backoff is under `seconds`."""
    tr = _trace(trace)
    waits = [
        i
        for i in range(len(tr))
        if tr.op[i] == "wait" and tr.wait_kind[i] in (sc.WAIT_RATE_LIMIT, sc.WAIT_BACKOFF)
    ]
    total = sum(tr.duration_s(i) for i in waits)
    if total < seconds:
        return
    by_role: dict[str, float] = {}
    for i in waits:
        parent = tr.parent[i]
        key = tr.role[i] or (tr.name[parent] if parent >= 0 else "-")
        by_role[key] = by_role.get(key, 0.0) + tr.duration_s(i)
    where = ", ".join(
        f"{k} {v:.2f} s" for k, v in sorted(by_role.items(), key=lambda kv: -kv[1])[:4]
    )
    raise AssertionError(
        f"{len(waits)} rate-limit/backoff waits took {total:.2f} s in all, budget "
        f"{seconds:.2f} s. By role: {where}."
    )
