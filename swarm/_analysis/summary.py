"""The run summary: figures per tier, provider, model and role, the ledger, the critical
path and the calls on it that a faster provider would shorten most, and the merge queue's
batches and time (`merge_queue`, None for a run without merge spans), and how far the
run's finish estimate was from its real end (`estimate`, from its pulse file)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from swarm._analysis.context import context_summary
from swarm._analysis.critical_path import critical_path_indices
from swarm._analysis.estimate import estimate_accuracy
from swarm._analysis.ledger import ledger_indices
from swarm._analysis.merges import merge_breakdown
from swarm._analysis.model import Trace
from swarm._analysis.remote import remote_split
from swarm._tracing import semconv as sc

__all__ = ["group_stats", "percentile", "summarize"]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of already sorted values; 0 if empty."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _profile_tps(ref: str) -> float | None:
    from swarm.catalog import find_profile
    from swarm.errors import ConfigError

    try:
        return find_profile(ref).output_tps
    except ConfigError:
        return None


class _Acc:
    __slots__ = (
        "calls",
        "cost",
        "decode_s",
        "durations",
        "errors",
        "input",
        "output",
        "reasoning",
        "retries",
        "ttfts",
    )

    def __init__(self) -> None:
        self.calls = self.input = self.output = self.reasoning = self.errors = 0
        self.retries = 0
        self.cost = self.decode_s = 0.0
        self.ttfts: list[float] = []
        self.durations: list[float] = []

    def add(self, tr: Trace, i: int) -> None:
        self.calls += 1
        self.input += tr.input_tokens[i]
        self.output += tr.output_tokens[i]
        self.reasoning += max(0, tr.reasoning_tokens[i])
        self.cost += tr.cost[i]
        self.errors += 1 if tr.error[i] else 0
        self.retries += max(0, tr.attempts[i] - 1)
        dur = (tr.end[i] - tr.start[i]) / 1e9
        self.durations.append(dur)
        if tr.ttft[i] >= 0:
            self.ttfts.append(tr.ttft[i])
            self.decode_s += max(0.0, dur - tr.ttft[i])

    def result(self, profile_tps: float | None = None) -> dict[str, Any]:
        self.ttfts.sort()
        self.durations.sort()
        return {
            "calls": self.calls,
            "input_tokens": self.input,
            "output_tokens": self.output,
            "reasoning_tokens": self.reasoning,
            "cost_usd": self.cost,
            "errors": self.errors,
            "retries": self.retries,
            "ttft_p50_s": percentile(self.ttfts, 50),
            "ttft_p95_s": percentile(self.ttfts, 95),
            "ttft_p99_s": percentile(self.ttfts, 99),
            "total_s": sum(self.durations),
            "latency_p50_s": percentile(self.durations, 50),
            "latency_p95_s": percentile(self.durations, 95),
            "tokens_per_s": self.output / self.decode_s if self.decode_s > 0 else 0.0,
            "profile_tokens_per_s": profile_tps,
        }


def group_stats(tr: Trace, indices: Sequence[int] | None = None) -> dict[str, dict[str, Any]]:
    """Model-call figures grouped `by_tier`, `by_provider`, `by_model` and `by_role`."""
    groups: dict[str, dict[str, _Acc]] = {
        "by_tier": {},
        "by_provider": {},
        "by_model": {},
        "by_role": {},
    }
    idx = range(len(tr)) if indices is None else indices
    for i in idx:
        if tr.op[i] != sc.OP_CHAT:
            continue
        keys = (
            ("by_tier", tr.tier[i] or "-"),
            ("by_provider", tr.provider[i] or "-"),
            ("by_model", f"{tr.provider[i]}/{tr.model[i]}"),
            ("by_role", tr.role[i] or "-"),
        )
        for group, key in keys:
            acc = groups[group].get(key)
            if acc is None:
                acc = groups[group][key] = _Acc()
            acc.add(tr, i)
    out: dict[str, dict[str, Any]] = {}
    for group, accs in groups.items():
        out[group] = {
            key: acc.result(_profile_tps(key) if group == "by_model" else None)
            for key, acc in sorted(accs.items(), key=lambda kv: -kv[1].calls)
        }
    return out


def _time_by(tr: Trace, path: Sequence[int], key: str) -> dict[str, float]:
    """Seconds of critical-path steps per role, tier or model (as Uber's CRISP does)."""
    out: dict[str, float] = {}
    for i in path:
        if key == "model":
            k = f"{tr.provider[i]}/{tr.model[i]}" if tr.op[i] == sc.OP_CHAT else tr.op[i]
        else:
            k = getattr(tr, key)[i] or "-"
        out[k] = out.get(k, 0.0) + (tr.end[i] - tr.start[i]) / 1e9
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _savings(tr: Trace, path: Sequence[int], top: int = 10) -> list[dict[str, Any]]:
    """Calls on the critical path that the fastest provider of the same model shortens most."""
    from swarm.catalog import all_models

    by_model: dict[str, list[Any]] = {}
    for m in all_models():
        by_model.setdefault(m.ref.split("/", 1)[1], []).append(m)
    rows = []
    for i in path:
        if tr.op[i] != sc.OP_CHAT or tr.model[i] not in by_model:
            continue
        recorded = (tr.end[i] - tr.start[i]) / 1e9
        reasoning = tr.reasoning_tokens[i]
        out = tr.output_tokens[i] - max(reasoning, 0)
        r = None if reasoning < 0 else reasoning
        best = min(
            by_model[tr.model[i]], key=lambda m: m.profile.expected_s(tr.input_tokens[i], out, r)
        )
        expected = best.profile.expected_s(tr.input_tokens[i], out, r)
        if recorded - expected > 0:
            rows.append(
                {
                    "span_id": tr.span_id[i],
                    "name": tr.name[i],
                    "role": tr.role[i],
                    "tier": tr.tier[i],
                    "model": f"{tr.provider[i]}/{tr.model[i]}",
                    "recorded_s": recorded,
                    "faster": best.ref,
                    "expected_s": expected,
                    "saving_s": recorded - expected,
                }
            )
    rows.sort(key=lambda row: -row["saving_s"])
    return rows[:top]


def summarize(trace: Trace) -> dict[str, Any]:
    """Everything `swarm trace summary` reports, as plain data (JSON-serialisable)."""
    tr = trace
    path = critical_path_indices(tr)
    total = _Acc()
    for i in range(len(tr)):
        if tr.op[i] == sc.OP_CHAT:
            total.add(tr, i)
    ops: dict[str, int] = {}
    for op in tr.op:
        ops[op] = ops.get(op, 0) + 1
    path_ledger = ledger_indices(tr, path)
    merges = merge_breakdown(tr)
    return {
        "run_id": tr.run_id,
        "path": str(tr.path),
        "spans": len(tr),
        "spans_by_operation": ops,
        "wall_s": tr.wall_s,
        "totals": total.result(),
        **group_stats(tr),
        "ledger": ledger_indices(tr),
        "context": context_summary(tr),
        "critical_path": {
            "steps": len(path),
            "busy_s": tr.wall_s - path_ledger["orchestration"],
            "ledger": path_ledger,
            "seconds_by_role": _time_by(tr, path, "role"),
            "seconds_by_tier": _time_by(tr, path, "tier"),
            "seconds_by_model": _time_by(tr, path, "model"),
            "span_ids": [tr.span_id[i] for i in path],
            "top_savings": _savings(tr, path),
        },
        "merge_queue": merges.as_dict() if merges is not None else None,
        "remote": remote_split(tr),
        "estimate": estimate_accuracy(tr),
    }
