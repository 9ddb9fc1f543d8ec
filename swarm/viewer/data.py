"""What the viewer page draws, computed once from a trace file.

`ViewerData.build(path)` loads the trace with `swarm.analysis` and precomputes:

- `spans_json`: a columnar payload (one array per field, spans sorted by start time) that
  the page turns into typed arrays, so 100k+ spans cost a few MB and one `JSON.parse`;
- `summary_json`: the analysis summary, latency ledger and critical path, per-tier
  TTFT/latency histograms, and the catalog models offered to the what-if form.

`span_detail(i)` and `whatif(...)` answer on demand. The page's span index `i` is the
position in start order; `order[i]` is the index in the analysis `Trace`.

Lanes: each `invoke_agent` span owns a lane and its descendants are drawn in it, one row
per depth below the agent. The merge queue's batches and splits share lane 1, "merge
queue", when the run has any (each labelled with its size and outcome: `merges`); spans
outside any agent or batch (the workflow root, merge waits) go to lane 0, "run".
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.analysis import Trace, critical_path, ledger, load_trace, summarize, whatif
from swarm.analysis.merges import SPLIT_SPAN, merge_batches
from swarm.tracing import semconv as sc

__all__ = ["KINDS", "MAX_DEPTH", "ViewerData", "histogram"]

KINDS = ("other", "workflow", "agent", "chat", "tool", "wait")
"""Kind codes sent to the page: index into this tuple."""
MAX_DEPTH = 3
"""Rows below an agent's own row; deeper spans share the last row."""
_KIND_OF_OP = {sc.OP_WORKFLOW: 1, sc.OP_AGENT: 2, sc.OP_CHAT: 3, sc.OP_TOOL: 4, "wait": 5}
_AGENT, _CHAT = 2, 3
_TIERS = ("", "speed", "reasoning")


class _Table:
    """Interns strings to small integer codes; code 0 means "none"."""

    def __init__(self, first: Sequence[str] = ("",)) -> None:
        self.items: list[str] = list(first)
        self._codes = {s: i for i, s in enumerate(self.items)}

    def code(self, value: str) -> int:
        c = self._codes.get(value)
        if c is None:
            c = self._codes[value] = len(self.items)
            self.items.append(value)
        return c


def histogram(values: Sequence[float], bins: int = 24) -> dict[str, Any]:
    """Equal-width bins from 0 to the 99th percentile (the tail lands in the last bin)."""
    if not values:
        return {"edges": [], "counts": [], "n": 0}
    ordered = sorted(values)
    n = len(ordered)

    def q(p: float) -> float:
        return ordered[min(n - 1, int(n * p))]

    top = q(0.99) or ordered[-1] or 1.0
    width = top / bins
    counts = [0] * bins
    for v in ordered:
        counts[min(bins - 1, max(0, int(v / width)))] += 1
    return {
        "edges": [round(width * i, 6) for i in range(bins + 1)],
        "counts": counts,
        "n": n,
        "p50": round(q(0.5), 6),
        "p90": round(q(0.9), 6),
        "p99": round(q(0.99), 6),
    }


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _catalog() -> list[str]:
    try:
        from swarm.catalog import all_models
    except ImportError:  # the catalog is optional for viewing a trace
        return []
    return [m.ref for m in all_models()]


def _jsonable(v: Any) -> Any:
    """Analysis results may hold tuples, dataclasses or non-finite floats; make them JSON."""
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    if v is None or isinstance(v, (str, int, bool)):
        return v
    if hasattr(v, "__dataclass_fields__"):
        return {k: _jsonable(getattr(v, k)) for k in v.__dataclass_fields__}
    return str(v)


@dataclass
class ViewerData:
    """Everything the server hands out, computed once at startup."""

    trace: Trace
    order: list[int]
    """Page index -> trace index (spans in start order)."""
    spans_json: bytes
    summary_json: bytes
    build_s: float
    page_of: dict[str, int] = field(default_factory=dict)
    """Span id -> page index."""
    critical: frozenset[int] = frozenset()
    """Trace indices of the spans on the critical path."""

    @classmethod
    def build(cls, path: str | Path) -> ViewerData:
        started = time.perf_counter()
        trace = load_trace(Path(path))
        start, end = trace.start, trace.end
        order = sorted(range(len(trace)), key=lambda i: (start[i], -end[i]))
        page = [0] * len(order)
        for p, i in enumerate(order):
            page[i] = p
        path_records = critical_path(trace)
        crit = [r.index for r in path_records]
        spans_json = _columns(trace, order, page, set(crit))
        summary = _summary(trace, page, crit)
        # summarize() already computed both ledgers; only recompute if its shape changes
        analysed = summary["summary"]
        on_path = analysed.get("critical_path", {}).get("ledger")
        summary["ledger"] = (
            on_path if on_path is not None else _jsonable(ledger(trace, path_records))
        )
        run = analysed.get("ledger")
        summary["ledger_run"] = run if run is not None else _jsonable(ledger(trace))
        data = cls(
            trace=trace,
            order=order,
            spans_json=spans_json,
            summary_json=json.dumps(summary, separators=(",", ":")).encode(),
            build_s=0.0,
            page_of={trace.span_id[i]: p for p, i in enumerate(order)},
            critical=frozenset(crit),
        )
        data.build_s = time.perf_counter() - started
        return data

    def __len__(self) -> int:
        return len(self.order)

    def whatif(self, *, speed: str, reasoning: str, max_agents: int | None) -> dict[str, Any]:
        """Predicted wall-clock and cost with other models per tier ('' = as recorded)."""
        chosen = {k: v for k, v in (("speed", speed), ("reasoning", reasoning)) if v}
        result: dict[str, Any] = _jsonable(whatif(self.trace, set=chosen, max_agents=max_agents))
        return result

    def span_detail(self, p: int) -> dict[str, Any]:
        """Everything about the span at page index `p`, plus the figures people look for."""
        tr, i = self.trace, self.order[p]
        raw = tr.span_json(i)
        attrs: dict[str, Any] = raw.get("attributes", {})
        dur = tr.duration_s(i)
        ttft = tr.ttft[i] if tr.ttft[i] >= 0 else None
        out_tok = tr.output_tokens[i]
        tps = _number(attrs.get(sc.DECODE_TPS))
        if tps is None and out_tok and ttft is not None and dur > ttft:
            tps = out_tok / (dur - ttft)
        chat = tr.op[i] == sc.OP_CHAT
        t0 = tr.start_ns
        return {
            "index": p,
            "name": tr.name[i],
            "kind": KINDS[_KIND_OF_OP.get(tr.op[i], 0)],
            "span_id": tr.span_id[i],
            "trace_id": raw.get("traceId", ""),
            "parent": self.page_of.get(raw.get("parentSpanId", ""), -1),
            "start_ms": round((tr.start[i] - t0) / 1e6, 3),
            "duration_ms": round(dur * 1e3, 3),
            "metrics": {
                "input_tokens": tr.input_tokens[i] if chat else None,
                "output_tokens": out_tok if chat else None,
                "reasoning_tokens": tr.reasoning_tokens[i] if tr.reasoning_tokens[i] >= 0 else None,
                "cached_input_tokens": _number(attrs.get(sc.CACHED_INPUT_TOKENS)),
                "ttft_s": ttft,
                "tokens_per_s": round(tps, 2) if tps is not None else None,
                "cost_usd": tr.cost[i] if chat or tr.cost[i] else None,
                "attempts": tr.attempts[i] if chat else None,
            },
            "attributes": _jsonable(attrs),
            "events": [
                {
                    "name": e.get("name", ""),
                    "offset_ms": round((int(e.get("timeUnixNano", 0)) - tr.start[i]) / 1e6, 3),
                    "attributes": _jsonable(e.get("attributes", {})),
                }
                for e in raw.get("events", ())
            ],
            "links": [
                {
                    "span_id": ln.get("spanId", ""),
                    "index": self.page_of.get(ln.get("spanId", ""), -1),
                    "attributes": _jsonable(ln.get("attributes", {})),
                }
                for ln in raw.get("links", ())
            ],
            "status": raw.get("status") or {},
            "critical": i in self.critical,
        }


def _lanes(
    trace: Trace, kinds: list[int], queue: Sequence[int]
) -> tuple[list[int], list[int], list[str]]:
    """Lane and depth of every span (trace order), and lane labels; `queue`: the merge
    queue's spans, which share a lane of their own (see `_queue_rows`)."""
    n = len(trace)
    parent = trace.parent
    lane = [-1] * n
    depth = [0] * n
    labels = ["run"]
    if queue:
        labels.append("merge queue")
        for i in queue:
            lane[i] = 1
    seen: dict[str, int] = {}
    for i in sorted((i for i in range(n) if kinds[i] == _AGENT), key=trace.start.__getitem__):
        role = trace.agent[i] or trace.name[i].split(" ", 1)[-1]
        seen[role] = seen.get(role, 0) + 1
        lane[i] = len(labels)
        labels.append(f"{role} {seen[role]}")
    for i in range(n):  # walk up to the nearest placed ancestor; iterative, memoised
        chain: list[int] = []
        j = i
        while j >= 0 and lane[j] < 0 and len(chain) <= n:
            chain.append(j)
            j = parent[j]
        base_lane, base_depth = (lane[j], depth[j]) if j >= 0 else (0, -1)
        for k in reversed(chain):
            base_depth = min(MAX_DEPTH, base_depth + 1)
            lane[k], depth[k] = base_lane, base_depth
    if queue:
        row_of = _queue_rows(trace, queue)
        below = max(row_of.values())
        for i in range(n):  # what runs inside a batch or split: below all their rows
            if lane[i] == 1:
                depth[i] = row_of[i] if i in row_of else min(MAX_DEPTH, depth[i] + below)
    return lane, depth, labels


def _queue_rows(trace: Trace, queue: Sequence[int]) -> dict[int, int]:
    """Rows for batches and splits, which overlap (speculation): first fit in start order,
    in at most `MAX_DEPTH - 1` rows, so what runs inside them gets a row below."""
    ends: list[int] = []
    row_of: dict[int, int] = {}
    for i in sorted(queue, key=trace.start.__getitem__):
        free = [r for r, e in enumerate(ends) if e <= trace.start[i]]
        if free:
            row = free[0]
        elif len(ends) < MAX_DEPTH - 1:
            row = len(ends)
            ends.append(0)
        else:
            row = len(ends) - 1
        ends[row] = max(ends[row], trace.end[i])
        row_of[i] = row
    return row_of


def _merge_marks(trace: Trace, page: list[int]) -> dict[str, dict[str, str]]:
    """Page index -> label and outcome of every merge batch and split span."""
    marks = {
        str(page[b.index]): {"label": b.label, "outcome": b.outcome or "?"}
        for b in merge_batches(trace)
    }
    for i, name in enumerate(trace.name):
        if name == SPLIT_SPAN:
            attrs = trace.attributes(i)
            label = f"split of {attrs.get(sc.MERGE_BATCH_SIZE, '?')}"
            label += f" · round {attrs.get(sc.MERGE_SPLIT_DEPTH, '?')}"
            marks[str(page[i])] = {"label": label, "outcome": "split"}
    return marks


def _columns(trace: Trace, order: list[int], page: list[int], crit: set[int]) -> bytes:
    kinds = [_KIND_OF_OP.get(op, 0) for op in trace.op]
    merges = _merge_marks(trace, page)
    lane, depth, labels = _lanes(trace, kinds, [order[int(p)] for p in merges])
    names, tiers, waits = _Table(), _Table(_TIERS), _Table()
    t0 = trace.start_ns
    start, end, parent = trace.start, trace.end, trace.parent
    payload = {
        "n": len(order),
        "t0_ns": str(t0),
        "start": [round((start[i] - t0) / 1e6, 3) for i in order],
        "end": [round((max(end[i], start[i]) - t0) / 1e6, 3) for i in order],
        "lane": [lane[i] for i in order],
        "depth": [depth[i] for i in order],
        "kind": [kinds[i] for i in order],
        "tier": [tiers.code(trace.tier[i]) for i in order],
        "wait": [waits.code(trace.wait_kind[i]) for i in order],
        "parent": [page[parent[i]] if parent[i] >= 0 else -1 for i in order],
        "name": [names.code(trace.name[i]) for i in order],
        "crit": [1 if i in crit else 0 for i in order],
        "names": names.items,
        "kinds": list(KINDS),
        "tiers": tiers.items,
        "waits": waits.items,
        "lanes": labels,
        "merges": merges,
        "merge_lane": 1 if merges else -1,
    }
    return json.dumps(payload, separators=(",", ":")).encode()


def _summary(trace: Trace, page: list[int], crit: list[int]) -> dict[str, Any]:
    by_tier: dict[str, tuple[list[float], list[float]]] = {}
    for i in range(len(trace)):
        if trace.op[i] != sc.OP_CHAT:
            continue
        ttfts, latencies = by_tier.setdefault(trace.tier[i] or "untiered", ([], []))
        latencies.append(trace.duration_s(i))
        if trace.ttft[i] >= 0:
            ttfts.append(trace.ttft[i])
    t0 = trace.start_ns
    return {
        "summary": _jsonable(summarize(trace)),
        "histograms": {
            tier: {"ttft_s": histogram(ttfts), "latency_s": histogram(lat)}
            for tier, (ttfts, lat) in sorted(by_tier.items())
        },
        "critical_path": [
            {
                "index": page[i],
                "name": trace.name[i],
                "kind": KINDS[_KIND_OF_OP.get(trace.op[i], 0)],
                "start_ms": round((trace.start[i] - t0) / 1e6, 3),
                "duration_ms": round(trace.duration_s(i) * 1e3, 3),
            }
            for i in sorted(crit, key=trace.start.__getitem__)
        ],
        "catalog": _catalog(),
        "duration_ms": round(trace.wall_s * 1e3, 3),
        "span_count": len(trace),
        "lane_count": 1 + sum(1 for op in trace.op if op == sc.OP_AGENT),
    }
