"""What the viewer page draws, computed from a trace file in two stages.

`ViewerData.build(path)` does what the drawing needs and nothing more: load the trace
(from its column cache, written when the run ended), then build the span payload frame by
frame, the first screen's lanes first, handing each frame on as it is done (the page draws
from the first), then the critical path (`spans_bytes`, binary: see
`swarm._viewer.payload`). A trace without a fresh cache (one copied from elsewhere) takes
seconds to parse: its head is parsed first and handed on as a preview payload, which the
page draws while the whole file is read (and its cache written). `summarize()` then
computes the rest while the page already draws: the analysis summary, both latency
ledgers, the critical-path list, per-tier TTFT/latency histograms and the catalog models
offered to the what-if form (`summary_json`).

`span_detail(i)` and `whatif(...)` answer on demand. The page's span index `i` is the
position in the payload's order; `order[i]` is the index in the analysis `Trace`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from swarm._analysis import Trace, ledger, load_trace, summarize, whatif
from swarm._analysis.loader import HEAD_BYTES
from swarm._tracing import semconv as sc
from swarm._viewer.payload import KIND_OF_OP, KINDS, MAX_DEPTH, stream_spans

__all__ = ["KINDS", "MAX_DEPTH", "ViewerData", "histogram"]


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
    """What the server hands out: the span payload at once, the summary once computed."""

    trace: Trace
    order: list[int]
    """Page index -> trace index (in the payload's order: see `swarm._viewer.payload`)."""
    page: list[int]
    """Trace index -> page index."""
    crit: list[int]
    """Trace indices of the critical-path steps, in time order."""
    spans_bytes: bytes
    build_s: float
    summary_json: bytes = b""
    """Empty until `summarize()` has run."""

    @classmethod
    def build(
        cls,
        path: str | Path,
        on_frame: Callable[[bytes], None] | None = None,
        *,
        head_bytes: int = HEAD_BYTES,
    ) -> ViewerData:
        """Load the trace and build the span payload, handing each frame to `on_frame` as
        soon as it is encoded (a trace without a fresh cache: a preview of its first
        `head_bytes` first); the summary waits for `summarize`."""
        started = time.perf_counter()

        def preview(head: Trace) -> None:
            if on_frame is not None:
                stream_spans(head, on_frame, preview=True)

        on_head = preview if on_frame is not None else None
        trace = load_trace(Path(path), on_head=on_head, head_bytes=head_bytes)
        frames: list[bytes] = []

        def emit(frame: bytes) -> None:
            frames.append(frame)
            if on_frame is not None:
                on_frame(frame)

        order, page, crit = stream_spans(trace, emit)
        spans_bytes = b"".join(frames)
        return cls(trace, order, page, crit, spans_bytes, time.perf_counter() - started)

    @classmethod
    def build_all(cls, path: str | Path) -> ViewerData:
        """`build` then `summarize`: everything at once (tests, benchmarks)."""
        data = cls.build(path)
        data.summarize()
        return data

    @cached_property
    def page_of(self) -> dict[str, int]:
        """Span id -> page index."""
        return {self.trace.span_id[i]: p for p, i in enumerate(self.order)}

    @cached_property
    def critical(self) -> frozenset[int]:
        """Trace indices of the spans on the critical path."""
        return frozenset(self.crit)

    def summarize(self) -> bytes:
        """Compute `summary_json` (seconds at 100k spans: run it off the event loop)."""
        if self.summary_json:
            return self.summary_json
        trace = self.trace
        summary = _summary(trace, self.page, self.crit)
        # summarize() already computed both ledgers; only recompute if its shape changes
        analysed = summary["summary"]
        on_path = analysed.get("critical_path", {}).get("ledger")
        if on_path is None:
            on_path = _jsonable(ledger(trace, [trace.span(i) for i in self.crit]))
        run = analysed.get("ledger")
        summary["ledger"] = on_path
        summary["ledger_run"] = run if run is not None else _jsonable(ledger(trace))
        self.summary_json = json.dumps(summary, separators=(",", ":")).encode()
        return self.summary_json

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
            "kind": KINDS[KIND_OF_OP.get(tr.op[i], 0)],
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
                "kind": KINDS[KIND_OF_OP.get(trace.op[i], 0)],
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
