"""The span payload the page draws: binary columns, sent as a stream of frames as they are
built, so the page draws the first screen before the rest has been built or sent.

Layout of `/api/spans` (little-endian): frames, each a 4-byte body length then the body: a
4-byte header length, a JSON header, padding to 8 bytes, then columns' raw bytes, each
padded to 8 bytes (the header lists them as `[name, type, length]`). The page wraps each
column in a typed array over the frame's buffer: no JSON parsing of 100k+ spans.

- The first frame's header holds what the whole stream shares: the span count `n`, the
  string tables, the lanes with their labels, `run_end_ms`, and `schema` (every column's
  name and type, so the page can allocate them at once).
- Every frame holds the columns of `count` spans from page index `first` on, and the
  merge-queue marks of those spans.
- The last frame (`final`) holds what needs the whole trace: `crit` (on the critical path)
  and `parent` (page index of the parent, -1 for none), for all `n` spans.

A preview (`preview=True`: a trace's head, drawn while the whole file is parsed) is a
stream of its own without the last frame, its first header marked `"preview": true`; the
whole trace's stream follows it, and its first frame (with `n`) starts the page afresh.

Page order (`order[p]` is the trace index of page index `p`), which is also the stream's:
first every lane's top row (agents, the run's roots, the merge queue's first row: a coarse
picture of every lane), then each lane's remaining rows lane by lane, the first screen's
lanes first. Within each lane row, spans are in start order.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from swarm._analysis import Trace
from swarm._analysis.critical_path import critical_path_indices
from swarm._analysis.merges import BATCH_SPAN, SPLIT_SPAN, merge_batches
from swarm._tracing import semconv as sc
from swarm._viewer.lanes import MAX_DEPTH, Lanes, plan_lanes, positions, walk

__all__ = [
    "FIRST_FRAME",
    "KINDS",
    "KIND_OF_OP",
    "MAX_DEPTH",
    "decode",
    "encode",
    "stream_spans",
]

KINDS = ("other", "workflow", "agent", "chat", "tool", "wait")
"""Kind codes sent to the page: index into this tuple."""
KIND_OF_OP = {sc.OP_WORKFLOW: 1, sc.OP_AGENT: 2, sc.OP_CHAT: 3, sc.OP_TOOL: 4, "wait": 5}
FIRST_FRAME = 20_000
"""Spans below the lanes' top rows in the first frame: a screenful of lanes many times
over (a screen shows ~30 lanes of ~30 spans), small enough to build in milliseconds."""
_LAST_FRAME = 400_000
"""Frames grow from `FIRST_FRAME` up to this size: few frames, few redraws."""
_TIERS = ("", "speed", "reasoning")
_CODED = (
    ("name", "name", "names", ("",)),
    ("tier", "tier", "tiers", _TIERS),
    ("wait", "wait_kind", "waits", ("",)),
    ("provider", "provider", "providers", ("",)),
)
"""Columns sent as codes into a string table: column, `Trace` field, table, first entries."""


def _table(values: Sequence[str], first: Sequence[str] = ("",)) -> tuple[list[str], dict[str, int]]:
    """Distinct values (after `first`) and their codes; code 0 means "none"."""
    items = list(dict.fromkeys([*first, *values]))
    return items, {s: k for k, s in enumerate(items)}


def merge_marks(trace: Trace) -> dict[int, dict[str, str]]:
    """Trace index -> label and outcome of every merge batch and split span."""
    if BATCH_SPAN not in trace.name and SPLIT_SPAN not in trace.name:  # scans in C
        return {}
    marks = {b.index: {"label": b.label, "outcome": b.outcome or "?"} for b in merge_batches(trace)}
    for i in positions(trace.name, SPLIT_SPAN):
        attrs = trace.attributes(i)
        label = f"split of {attrs.get(sc.MERGE_BATCH_SIZE, '?')}"
        label += f" · round {attrs.get(sc.MERGE_SPLIT_DEPTH, '?')}"
        marks[i] = {"label": label, "outcome": "split"}
    return marks


def encode(header: dict[str, Any], columns: Sequence[tuple[str, array[Any]]]) -> bytes:
    """One frame, length first (see the module docstring)."""
    if sys.byteorder != "little":  # pragma: no cover - every platform we ship on
        for _, a in columns:
            a.byteswap()
    header = {**header, "columns": [[name, a.typecode, len(a)] for name, a in columns]}
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [b"", struct.pack("<I", len(head)), head]
    at = 4 + len(head)
    for blob in [b""] + [a.tobytes() for _, a in columns]:
        parts.append(b"\0" * (-at % 8))
        at += -at % 8
        parts.append(blob)
        at += len(blob)
    parts[0] = struct.pack("<I", at)
    return b"".join(parts)


def decode(body: bytes) -> dict[str, Any]:
    """The whole stream as one header with every column as a list (in page order): what
    the page ends up with, for Python readers."""
    out: dict[str, Any] = {}
    merges: dict[str, Any] = {}
    at = 0
    while at < len(body):
        (size,) = struct.unpack_from("<I", body, at)
        frame, at = body[at + 4 : at + 4 + size], at + 4 + size
        (hlen,) = struct.unpack_from("<I", frame)
        head = json.loads(frame[4 : 4 + hlen])
        pos = 4 + hlen
        for name, typecode, length in head.pop("columns"):
            pos += -pos % 8
            col = array(typecode)
            col.frombytes(frame[pos : pos + length * col.itemsize])
            pos += length * col.itemsize
            out.setdefault(name, []).extend(col.tolist())
        merges.update(head.pop("merges", {}))
        for key in ("first", "count", "final", "schema"):
            head.pop(key, None)
        out.update(head)
    return {**out, "merges": merges}


class _Frames:
    """Encodes spans frame by frame in page order; `order` and `page` grow as they go."""

    def __init__(
        self,
        trace: Trace,
        lanes: Lanes,
        marks: dict[int, dict[str, str]],
        emit: Callable[[bytes], None],
        preview: bool,
    ) -> None:
        self.trace, self.lanes, self.marks, self.emit = trace, lanes, marks, emit
        self.preview = preview
        self.t0 = trace.start_ns  # a min() over every span: once
        self.order: list[int] = []
        self.page = [-1] * len(trace)
        self.codes: list[tuple[str, str, dict[str, int], str]] = []
        self.tables: dict[str, list[str]] = {}
        for column, field, table, first in _CODED:
            items, codes = _table(getattr(trace, field), first)
            self.tables[table] = items
            self.codes.append((column, field, codes, "H" if len(items) < 65536 else "I"))

    def head(self) -> dict[str, Any]:
        tr, ln = self.trace, self.lanes
        roles, role_code = _table(ln.role)
        subtasks, sub_code = _table(ln.subtask)
        end = max(max(tr.end, default=0), max(tr.start, default=0))
        schema = [["start", "d"], ["end", "d"], ["ttft", "f"], ["lane", "i"], ["depth", "B"]]
        schema += [["kind", "B"], *([c, t] for c, _, _, t in self.codes)]
        return {
            "n": len(tr),
            "t0_ns": str(self.t0),
            "run_end_ms": max(0.0, (end - self.t0) / 1e6),
            **self.tables,
            "kinds": list(KINDS),
            "lanes": ln.labels,
            "roles": roles,
            "lane_role": [role_code[r] for r in ln.role],
            "subtasks": subtasks,
            "lane_subtask": [sub_code[s] for s in ln.subtask],
            "merge_lane": ln.queue_lane,
            "schema": [*schema, ["crit", "B"], ["parent", "i"]],
            "preview": self.preview,
        }

    def send(self, spans: list[int]) -> None:
        tr, ln, first = self.trace, self.lanes, len(self.order)
        for p, i in enumerate(spans, first):
            self.page[i] = p
        self.order += spans
        pick = itemgetter(*spans) if len(spans) > 1 else (lambda col: [col[i] for i in spans])
        t0, start, end, ttft, op = self.t0, tr.start, tr.end, tr.ttft, tr.op
        columns = [
            ("start", array("d", [(start[i] - t0) / 1e6 for i in spans])),
            ("end", array("d", [(max(end[i], start[i]) - t0) / 1e6 for i in spans])),
            ("ttft", array("f", [ttft[i] * 1e3 if ttft[i] >= 0 else -1.0 for i in spans])),
            ("lane", array("i", pick(ln.lane))),
            ("depth", array("B", pick(ln.depth))),
            ("kind", array("B", [KIND_OF_OP.get(op[i], 0) for i in spans])),
        ]
        for column, field, codes, typecode in self.codes:
            coded = map(codes.__getitem__, pick(getattr(tr, field)))
            columns.append((column, array(typecode, coded)))
        marks = {str(self.page[i]): m for i, m in self.marks.items() if self.page[i] >= 0}
        header = {"first": first, "count": len(spans), "merges": marks}
        self.emit(encode({**self.head(), **header} if not first else header, columns))
        self.marks = {i: m for i, m in self.marks.items() if self.page[i] < 0}

    def finish(self, crit: Sequence[int]) -> None:
        """The last frame: what needs the whole trace (see the module docstring)."""
        n, page, parent = len(self.order), self.page, self.trace.parent
        on_path = bytearray(n)
        for i in crit:
            on_path[page[i]] = 1
        parents = array(
            "i", [page[p] if p >= 0 else -1 for p in map(parent.__getitem__, self.order)]
        )
        head = {"first": 0, "count": n, "final": True}
        self.emit(encode(head, [("crit", array("B", on_path)), ("parent", parents)]))


def stream_spans(
    trace: Trace, emit: Callable[[bytes], None], first: int = FIRST_FRAME, *, preview: bool = False
) -> tuple[list[int], list[int], list[int]]:
    """Build the payload frame by frame, handing each to `emit` as soon as it is encoded;
    returns the page order, its inverse (trace index -> page index) and the critical path
    (trace indices, in time order), which is computed last (not for a `preview`: see the
    module docstring)."""
    marks = merge_marks(trace)
    ln = plan_lanes(trace, list(marks))
    out = _Frames(trace, ln, marks, emit, preview)
    by_start, depth = trace.start.__getitem__, ln.depth
    fixed = [walk(trace, ln, lane) for lane in range(2 if ln.queue_rows else 1)]
    batch = [i for spans in fixed for i in sorted(spans, key=by_start) if not depth[i]]
    batch += [roots[0] for roots in ln.roots[len(fixed) :]]
    budget = len(batch) + first
    for lane in range(len(ln.labels)):
        spans = fixed[lane] if lane < len(fixed) else walk(trace, ln, lane)
        batch += sorted([i for i in spans if depth[i]], key=by_start)
        if len(batch) >= budget:
            out.send(batch)
            batch, budget = [], min(_LAST_FRAME, int(budget * 2.5))
    if batch or not out.order:
        out.send(batch)
    if preview:
        return out.order, out.page, []
    crit = critical_path_indices(trace)
    out.finish(crit)
    return out.order, out.page, crit
