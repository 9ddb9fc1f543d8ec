"""A loaded trace: spans from an OTLP JSON Lines file held in columns.

A swarm run produces 10⁴–10⁶ spans, so `Trace` keeps one column per field the analyses
need (numbers in `array`s, strings interned) instead of one object per span, and keeps the
rest of each span (all attributes, events, links) in the file: `Trace.span_json(i)` re-reads
the line it came from. `Trace.span(i)` gives a `SpanRecord` view of one span.
"""

from __future__ import annotations

import base64
import gc
import json
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarm import _semconv as sc

__all__ = ["SpanRecord", "Trace", "load_trace", "otlp_value"]


def otlp_value(v: dict[str, Any]) -> Any:
    """Decode one OTLP JSON `AnyValue`."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [otlp_value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return {kv["key"]: otlp_value(kv.get("value", {})) for kv in v["kvlistValue"]["values"]}
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def _hex_id(raw: str, size: int) -> str:
    """Ids are hex in the file-exporter format; accept base64 (protobuf JSON) too."""
    if len(raw) == size * 2:
        return raw.lower()
    try:
        return base64.b64decode(raw).hex()
    except ValueError:
        return raw


# attribute key -> column code (see _Loader.add)
_WANT = {
    sc.OPERATION: 0, sc.AGENT_NAME: 1, sc.TIER: 2, sc.PROVIDER: 3, sc.REQUEST_MODEL: 4,
    sc.RESPONSE_MODEL: 5, sc.INPUT_TOKENS: 6, sc.OUTPUT_TOKENS: 7, sc.REASONING_TOKENS: 8,
    sc.TIME_TO_FIRST_CHUNK: 9, sc.TTFT_S: 9, sc.COST_USD: 10, sc.ATTEMPTS: 11,
    sc.ERROR_TYPE: 12, sc.WAIT_KIND: 13, sc.TOOL_NAME: 14, sc.TESTS_FAILED: 15,
    sc.RUN_ID: 16,
}


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
            i, self.span_id[i], self.parent[i], self.name[i], self.op[i], self.start[i],
            self.end[i], self.role[i], self.tier[i], self.provider[i], self.model[i],
            self.wait_kind[i], self.tool[i], self.input_tokens[i], self.output_tokens[i],
            self.reasoning_tokens[i], self.ttft[i], self.cost[i], self.attempts[i],
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
            flat = [sp for rs in doc.get("resourceSpans", []) for ss in rs.get("scopeSpans", [])
                    for sp in ss.get("spans", [])]
            self._cache = (line_no, flat)
        raw = dict(self._cache[1][self._pos_in_line[i]])
        raw["attributes"] = {a["key"]: otlp_value(a.get("value", {}))
                             for a in raw.get("attributes", [])}
        for ev in raw.get("events", []):
            ev["attributes"] = {a["key"]: otlp_value(a.get("value", {}))
                                for a in ev.get("attributes", [])}
        for ln in raw.get("links", []):
            ln["attributes"] = {a["key"]: otlp_value(a.get("value", {}))
                                for a in ln.get("attributes", [])}
        return raw

    def attributes(self, i: int) -> dict[str, Any]:
        attrs: dict[str, Any] = self.span_json(i)["attributes"]
        return attrs


def _op_of(name: str, op_attr: str, wait_kind: str) -> str:
    if op_attr:
        return op_attr
    if wait_kind or name.startswith(sc.WAIT_SPAN):
        return "wait"
    first = name.split(" ", 1)[0]
    return first if first in (sc.OP_CHAT, sc.OP_TOOL, sc.OP_AGENT, sc.OP_WORKFLOW) else "other"


class _Loader:
    """Appends spans decoded from OTLP JSON to a Trace's columns."""

    def __init__(self, tr: Trace) -> None:
        self.tr = tr
        self.intern: dict[str, str] = {"": ""}
        self.ops: dict[tuple[str, str, str], str] = {}
        self.parent_ids: list[str] = []
        self.link_ids: dict[int, list[str]] = {}
        self.first_token: dict[int, int] = {}

    def s(self, x: Any) -> str:
        if x is None:
            return ""
        x = x if isinstance(x, str) else str(x)
        got = self.intern.get(x)
        if got is None:
            got = self.intern[x] = x
        return got

    def add(self, sp: dict[str, Any], line_no: int, pos: int) -> None:
        tr, s = self.tr, self.s
        i = len(tr.span_id)
        tr._line_of.append(line_no)
        tr._pos_in_line.append(pos)
        tid = sp.get("traceId", "")
        if tid:
            tr.trace_ids.add(tid if len(tid) == 32 else _hex_id(tid, 16))
        sid = sp.get("spanId", "")
        tr.span_id.append(sid if len(sid) == 16 else _hex_id(sid, 8))
        pid = sp.get("parentSpanId") or ""
        self.parent_ids.append(pid if len(pid) in (0, 16) else _hex_id(pid, 8))
        name = s(sp.get("name", ""))
        tr.name.append(name)
        tr.kind.append(int(sp.get("kind", 0)) & 0x7F)
        tr.start.append(int(sp.get("startTimeUnixNano", 0)))
        tr.end.append(int(sp.get("endTimeUnixNano", 0)))
        st = sp.get("status") or {}
        code = int(st.get("code", 0))
        tr.status.append(code)
        vals: list[Any] = [None] * 17
        want = _WANT
        for a in sp.get("attributes", ()):
            c = want.get(a["key"])
            if c is not None:
                vals[c] = otlp_value(a.get("value", {}))
        wait_kind = s(vals[13])
        key = (name, vals[0] or "", wait_kind)
        op = self.ops.get(key)
        if op is None:
            op = self.ops[key] = s(_op_of(name, str(key[1]), wait_kind))
        tr.op.append(op)
        tr.agent.append(s(vals[1]))
        tr.tier.append(s(vals[2]))
        tr.provider.append(s(vals[3]))
        tr.model.append(s(vals[4] or vals[5]))
        tr.wait_kind.append(wait_kind)
        tr.tool.append(s(vals[14]))
        err = vals[12] or ((st.get("message", "") or "error") if code == 2 else "")
        tr.error.append(s(err))
        tr.input_tokens.append(int(vals[6] or 0))
        tr.output_tokens.append(int(vals[7] or 0))
        tr.reasoning_tokens.append(-1 if vals[8] is None else int(vals[8]))
        tr.ttft.append(-1.0 if vals[9] is None else float(vals[9]))
        tr.cost.append(float(vals[10] or 0.0))
        tr.attempts.append(int(vals[11] or 1))
        tr.tests_failed.append(-1 if vals[15] is None else int(vals[15]))
        if vals[16] and not tr.run_id:
            tr.run_id = str(vals[16])
        if vals[9] is None and op == sc.OP_CHAT:
            for ev in sp.get("events", ()):
                if ev.get("name") == sc.FIRST_TOKEN_EVENT:
                    self.first_token[i] = int(ev.get("timeUnixNano", 0))
                    break
        for ln in sp.get("links", ()):
            for a in ln.get("attributes", ()):
                if a["key"] == sc.LINK_TYPE and otlp_value(a["value"]) == sc.LINK_DEPENDS_ON:
                    self.link_ids.setdefault(i, []).append(_hex_id(ln["spanId"], 8))


def load_trace(path: Path | str) -> Trace:
    """Read an OTLP JSON Lines trace file (one `TracesData` object per line)."""
    # Parsing allocates millions of short-lived containers; the cyclic GC would rescan the
    # growing heap over and over (40% of the time at 1M spans), and nothing here is cyclic.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(Path(path))
    finally:
        if was_enabled:
            gc.enable()


def _load(path: Path) -> Trace:
    tr = Trace(path)
    loader = _Loader(tr)
    add = loader.add
    offset = 0
    with path.open("rb") as fh:
        for line_no, line in enumerate(fh):
            tr._line_offsets.append(offset)
            offset += len(line)
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                if not line.endswith(b"\n"):  # a run killed mid-write: keep the rest
                    tr.truncated = True
                    break
                raise ValueError(f"{path}:{line_no + 1}: not an OTLP JSON line") from None
            pos = 0
            for rs in doc.get("resourceSpans", []):
                for a in rs.get("resource", {}).get("attributes", []):
                    if a["key"] == sc.RUN_ID and not tr.run_id:
                        tr.run_id = str(otlp_value(a["value"]))
                for ss in rs.get("scopeSpans", []):
                    for sp in ss.get("spans", []):
                        add(sp, line_no, pos)
                        pos += 1
    _resolve(tr, loader.parent_ids, loader.link_ids, loader.first_token)
    return tr


def _resolve(tr: Trace, parent_ids: list[str], link_ids: dict[int, list[str]],
             first_token: dict[int, int]) -> None:
    """Turn ids into indices, then derive roots, children and each span's role."""
    index = {sid: i for i, sid in enumerate(tr.span_id)}
    for i, pid in enumerate(parent_ids):
        p = index.get(pid, -1) if pid else -1
        tr.parent.append(p)
        if p >= 0:
            tr.children.setdefault(p, []).append(i)
        else:
            tr.roots.append(i)
    for i, ids in link_ids.items():
        targets = [index[t] for t in ids if t in index]
        if targets:
            tr.links[i] = targets
    for i, t in first_token.items():
        tr.ttft[i] = max(0.0, (t - tr.start[i]) / 1e9)
    workflows = [r for r in tr.roots if tr.op[r] == sc.OP_WORKFLOW]
    if workflows or tr.roots:
        tr.root = min(workflows or tr.roots, key=lambda r: tr.start[r])
    # role = nearest enclosing agent's name; memoised walk up the tree
    role: list[str | None] = [None] * len(tr.span_id)
    for i in range(len(role)):
        path = []
        j = i
        while j >= 0 and role[j] is None:
            if tr.op[j] == sc.OP_AGENT:
                role[j] = tr.agent[j] or tr.name[j].split(" ", 1)[-1]
                break
            path.append(j)
            j = tr.parent[j]
        found = role[j] if j >= 0 else ""
        for k in path:
            role[k] = found
    tr.role = [r or "" for r in role]
