"""The per-workload inference scorecard: how each provider/model and each role served a run.

`scorecard(trace)` groups the run's `chat` spans by `provider/model` and by role: calls,
TTFT p50/p95/p99, decode tokens/s, error and 429 rates, effective USD per million tokens
(what was paid over all tokens, prompt-cache hits at their price included), the share of
input served from the cache, the share of the run's cost, and why the router chose the
candidate (`swarm.route.reason`, counted by its leading words). It is what a team reads
to decide where traffic should go (`swarm trace scorecard`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from swarm._analysis.model import Trace
from swarm._analysis.summary import percentile
from swarm._tracing import semconv as sc

__all__ = ["scorecard"]


class _Card:
    """One row's figures, from the indices of its `chat` spans (columns only: a 100k-span
    run's scorecard takes a fraction of a second)."""

    __slots__ = (
        "cached",
        "calls",
        "cost",
        "decode_s",
        "errors",
        "inp",
        "limited",
        "out",
        "reasons",
        "ttfts",
    )

    def __init__(self, tr: Trace, calls: list[int]) -> None:
        error, ttft, start, end = tr.error, tr.ttft, tr.start, tr.end
        self.calls = len(calls)
        failed = [error[i] for i in calls if error[i]]
        self.errors, self.limited = len(failed), failed.count("429")
        self.inp = sum(map(tr.input_tokens.__getitem__, calls))
        self.out = sum(map(tr.output_tokens.__getitem__, calls))
        self.cached = sum(map(tr.cached_input_tokens.__getitem__, calls))
        self.cost = sum(map(tr.cost.__getitem__, calls))
        timed = [i for i in calls if ttft[i] >= 0 and not error[i]]
        self.ttfts = [ttft[i] for i in timed]
        self.decode_s = sum(max(0.0, (end[i] - start[i]) / 1e9 - ttft[i]) for i in timed)
        reasons = (tr.route_reason[i] for i in calls)
        self.reasons = Counter(r.split(";")[0].split(",")[0] for r in reasons if r)

    def row(self, total_cost: float) -> dict[str, Any]:
        ttfts = sorted(self.ttfts)
        tokens = self.inp + self.out
        return {
            "calls": self.calls,
            "ttft_p50_s": percentile(ttfts, 50),
            "ttft_p95_s": percentile(ttfts, 95),
            "ttft_p99_s": percentile(ttfts, 99),
            "tokens_per_s": self.out / self.decode_s if self.decode_s > 0 else 0.0,
            "error_rate": self.errors / self.calls,
            "rate_limited_rate": self.limited / self.calls,
            "input_tokens": self.inp,
            "cached_input_tokens": self.cached,
            "output_tokens": self.out,
            "cached_share": self.cached / self.inp if self.inp else 0.0,
            "cost_usd": self.cost,
            "usd_per_mtok": self.cost / tokens * 1e6 if tokens else 0.0,
            "cost_share": self.cost / total_cost if total_cost > 0 else 0.0,
            "reasons": dict(self.reasons.most_common(3)),
        }


def scorecard(tr: Trace) -> dict[str, Any]:
    """`by_candidate` (`provider/model`) and `by_role` rows, and the run's totals."""
    by_ref: dict[str, list[int]] = {}
    by_role: dict[str, list[int]] = {}
    provider, model, role, op = tr.provider, tr.model, tr.role, tr.op
    calls = [i for i in range(len(tr)) if op[i] == sc.OP_CHAT]
    for i in calls:
        by_ref.setdefault(f"{provider[i] or '?'}/{model[i] or '?'}", []).append(i)
        by_role.setdefault(role[i] or "-", []).append(i)
    total = _Card(tr, calls)
    cost = total.cost
    return {
        "run_id": tr.run_id,
        "by_candidate": {k: _Card(tr, c).row(cost) for k, c in sorted(by_ref.items())},
        "by_role": {k: _Card(tr, c).row(cost) for k, c in sorted(by_role.items())},
        "total": total.row(cost) if total.calls else {},
    }
