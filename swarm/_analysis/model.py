"""A loaded trace's types: spans from an OTLP JSON Lines file held in columns.

A swarm run produces 10⁴–10⁶ spans, so `Trace` keeps one column per field the analyses
need (numbers in `array`s, strings interned) instead of one object per span, and keeps the
rest of each span (all attributes, events, links) in the file: `Trace.span_json(i)` re-reads
the line it came from. `Trace.span(i)` gives a `SpanRecord` view of one span.
Nothing here reads a whole file: `swarm._analysis.loader` fills a `Trace`.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarm._analysis.otlp import otlp_value

__all__ = ["SpanRecord", "Trace"]


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span's analysed fields (a view over a `Trace`'s columns)."""

    index: int
    span_id: str
    parent_index: int
    """Index of the parent span, -1 for a root (or a parent missing from the file)."""
    name: str
    op: str
    """`chat`, `execute_tool`, `invoke_agent`, `invoke_workflow`, `wait` or `other`."""
    start_ns: int
    end_ns: int
    role: str
    """The enclosing agent's name (planner, coder, ...), '' outside any agent."""
    tier: str
    provider: str
    model: str
    wait_kind: str
    tool: str
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    """-1 when the span did not say."""
    ttft_s: float
    """-1 when unknown."""
    cost_usd: float
    attempts: int
    error: str
    """`error.type`, or the status message of an ERROR status, else ''."""

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


class Trace:
    """Spans of one trace file, in columns. Index i is the i-th span read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.trace_ids: set[str] = set()
        self.run_id = ""
        self.span_id: list[str] = []
        self.parent = array("q")
        self.name: list[str] = []
        self.kind = array("b")
        self.start = array("q")
        self.end = array("q")
        self.status = array("b")
        self.op: list[str] = []
        self.role: list[str] = []
        self.agent: list[str] = []
        self.subtask: list[str] = []
        """`swarm.subtask.id` where the span carries it (agents do), else ""."""
        self.tier: list[str] = []
        self.provider: list[str] = []
        self.model: list[str] = []
        self.wait_kind: list[str] = []
        self.tool: list[str] = []
        self.error: list[str] = []
        self.input_tokens = array("q")
        self.output_tokens = array("q")
        self.reasoning_tokens = array("q")
        self.ttft = array("d")
        self.cost = array("d")
        self.attempts = array("i")
        self.tests_failed = array("i")
        self.cached_input_tokens = array("q")
        """Input tokens served from the provider's prompt cache (chat spans; else 0)."""
        self.route_reason: list[str] = []
        """Why the router chose the candidate (`swarm.route.reason`), else ""."""
        self.links: dict[int, list[int]] = {}
        """depends_on targets of each span that has any (indices)."""
        self.children: dict[int, list[int]] = {}
        """Child indices of each span that has children, in file order."""
        self.truncated = False
        """True when the file ended in a partial line (the run died mid-write)."""
        self.roots: list[int] = []
        self.root = -1
        """The `invoke_workflow` span if any, else the earliest root."""
        self._line_offsets = array("q")
        self._line_of = array("i")
        self._pos_in_line = array("i")
        self._cache: tuple[int, list[dict[str, Any]]] | None = None

    def __len__(self) -> int:
        return len(self.span_id)

    @property
    def start_ns(self) -> int:
        return min(self.start) if self.start else 0

    @property
    def end_ns(self) -> int:
        return max(self.end) if self.end else 0

    @property
    def wall_s(self) -> float:
        """Wall-clock of the run: first span start to last span end."""
        return (self.end_ns - self.start_ns) / 1e9

    def span(self, i: int) -> SpanRecord:
        return SpanRecord(
            i,
            self.span_id[i],
            self.parent[i],
            self.name[i],
            self.op[i],
            self.start[i],
            self.end[i],
            self.role[i],
            self.tier[i],
            self.provider[i],
            self.model[i],
            self.wait_kind[i],
            self.tool[i],
            self.input_tokens[i],
            self.output_tokens[i],
            self.reasoning_tokens[i],
            self.ttft[i],
            self.cost[i],
            self.attempts[i],
            self.error[i],
        )

    def spans(self) -> Iterator[SpanRecord]:
        return (self.span(i) for i in range(len(self)))

    def index_of(self, span_id: str) -> int:
        """Index of a span by hex id (linear; build a dict for many look-ups)."""
        return self.span_id.index(span_id)

    def duration_s(self, i: int) -> float:
        return (self.end[i] - self.start[i]) / 1e9

    def span_json(self, i: int) -> dict[str, Any]:
        """The span as written in the file, with attributes decoded into a dict."""
        line_no = self._line_of[i]
        if self._cache is None or self._cache[0] != line_no:
            with self.path.open("rb") as fh:
                fh.seek(self._line_offsets[line_no])
                doc = json.loads(fh.readline())
            flat = [
                sp
                for rs in doc.get("resourceSpans", [])
                for ss in rs.get("scopeSpans", [])
                for sp in ss.get("spans", [])
            ]
            self._cache = (line_no, flat)
        raw = dict(self._cache[1][self._pos_in_line[i]])
        raw["attributes"] = {
            a["key"]: otlp_value(a.get("value", {})) for a in raw.get("attributes", [])
        }
        for part in ("events", "links"):  # copies: the cached line is decoded again later
            raw[part] = [
                {
                    **item,
                    "attributes": {
                        a["key"]: otlp_value(a.get("value", {})) for a in item.get("attributes", [])
                    },
                }
                for item in raw.get(part, [])
            ]
        return raw

    def attributes(self, i: int) -> dict[str, Any]:
        attrs: dict[str, Any] = self.span_json(i)["attributes"]
        return attrs
