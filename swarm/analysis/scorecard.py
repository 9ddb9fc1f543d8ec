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

from swarm.analysis.model import Trace
from swarm.analysis.summary import percentile
from swarm.tracing import semconv as sc

__all__ = ["scorecard"]


class _Card:
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

    def __init__(self) -> None:
        self.calls = self.errors = self.limited = self.inp = self.out = self.cached = 0
        self.cost = self.decode_s = 0.0
        self.ttfts: list[float] = []
        self.reasons: Counter[str] = Counter()

    def add(self, tr: Trace, i: int) -> None:
        self.calls += 1
        error = tr.error[i]
        if error:
            self.errors += 1
            self.limited += error == "429"
        self.inp += tr.input_tokens[i]
        self.out += tr.output_tokens[i]
        self.cached += tr.cached_input_tokens[i]
        self.cost += tr.cost[i]
        ttft = tr.ttft[i]
        if ttft >= 0 and not error:
            self.ttfts.append(ttft)
            self.decode_s += max(0.0, (tr.end[i] - tr.start[i]) / 1e9 - ttft)
        reason = tr.route_reason[i]
        if reason:
            self.reasons[reason.split(";")[0].split(",")[0]] += 1

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
    by_ref: dict[str, _Card] = {}
    by_role: dict[str, _Card] = {}
    total = _Card()
    for i in range(len(tr)):
        if tr.op[i] != sc.OP_CHAT:
            continue
        ref = f"{tr.provider[i] or '?'}/{tr.model[i] or '?'}"
        for card in (
            by_ref.setdefault(ref, _Card()),
            by_role.setdefault(tr.role[i] or "-", _Card()),
            total,
        ):
            card.add(tr, i)
    cost = total.cost
    return {
        "run_id": tr.run_id,
        "by_candidate": {k: c.row(cost) for k, c in sorted(by_ref.items())},
        "by_role": {k: c.row(cost) for k, c in sorted(by_role.items())},
        "total": total.row(cost) if total.calls else {},
    }
