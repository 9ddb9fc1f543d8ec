"""The span payload the page draws first: binary columns, built in well under a second.

Layout of `/api/spans` (little-endian): a 4-byte header length, a JSON header (span count,
string tables, lane labels and attributes, the list of columns as `[name, type, length]`),
padding to 8 bytes, then each column's raw bytes, each padded to 8 bytes. The page wraps
each column in a typed array over the response buffer: no JSON parsing of 100k+ spans
(the JSON payload this replaces took seconds to build and to parse at that size).

Spans are in start order (`order[p]` is the trace index of page index `p`).

Lanes: each `invoke_agent` span owns a lane, labelled by its subtask and role ("t17 ·
coder"; a second fixer round of t17 is "t17 · fixer 2"), and its descendants are drawn in
it, one row per depth below the agent. The merge queue's batches and splits share lane 1,
"merge queue", when the run has any; spans outside any agent or batch (the workflow root,
merge waits) go to lane 0, "run".
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from swarm.analysis import Trace
from swarm.analysis.merges import SPLIT_SPAN, merge_batches
from swarm.tracing import semconv as sc

__all__ = [
    "KINDS",
    "KIND_OF_OP",
    "MAX_DEPTH",
    "Lanes",
    "decode",
    "encode",
    "lanes",
    "spans_payload",
]

KINDS = ("other", "workflow", "agent", "chat", "tool", "wait")
"""Kind codes sent to the page: index into this tuple."""
KIND_OF_OP = {sc.OP_WORKFLOW: 1, sc.OP_AGENT: 2, sc.OP_CHAT: 3, sc.OP_TOOL: 4, "wait": 5}
MAX_DEPTH = 3
"""Rows below an agent's own row; deeper spans share the last row."""
_AGENT = 2
_TIERS = ("", "speed", "reasoning")


def _table(values: Sequence[str], first: Sequence[str] = ("",)) -> tuple[list[str], dict[str, int]]:
    """Distinct values (after `first`) and their codes; code 0 means "none"."""
    items = list(dict.fromkeys([*first, *values]))
    return items, {s: k for k, s in enumerate(items)}


@dataclass
class Lanes:
    lane: list[int]
    depth: list[int]
    labels: list[str]
    role: list[str]
    """Per lane: the agent's role ("" for the run and merge-queue lanes)."""
    subtask: list[str]


def lanes(trace: Trace, queue: Sequence[int], order: Sequence[int] | None = None) -> Lanes:
    """Lane and depth of every span (trace order); `queue`: the merge queue's spans, which
    share a lane of their own (see `_queue_rows`); `order`: the spans in start order."""
    n = len(trace)
    parent = trace.parent
    lane = [-1] * n
    depth = [0] * n
    out = Lanes(lane, depth, ["run"], [""], [""])
    if queue:
        out.labels.append("merge queue")
        out.role.append("")
        out.subtask.append("")
        for i in queue:
            lane[i] = 1
    seen: dict[tuple[str, str], int] = {}
    agents = [i for i, op in enumerate(trace.op) if op == sc.OP_AGENT]
    for i in sorted(agents, key=trace.start.__getitem__):
        role = trace.agent[i] or trace.name[i].split(" ", 1)[-1]
        sub = trace.subtask[i]
        k = seen[sub, role] = seen.get((sub, role), 0) + 1
        lane[i] = len(out.labels)
        label = f"{sub} · {role}" if sub else role
        out.labels.append(label if k == 1 else f"{label} {k}")
        out.role.append(role)
        out.subtask.append(sub)
    if order is None:
        order = sorted(range(n), key=trace.start.__getitem__)
    for i in order:  # parents first, mostly
        p = parent[i]
        if lane[i] >= 0:
            continue
        if p >= 0 and lane[p] >= 0:
            lane[i], depth[i] = lane[p], min(MAX_DEPTH, depth[p] + 1)
            continue
        # walk up to the nearest placed ancestor; iterative, memoised
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
    return out


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


def encode(header: dict[str, Any], columns: Sequence[tuple[str, array[Any]]]) -> bytes:
    """The binary layout described in the module docstring."""
    if sys.byteorder != "little":  # pragma: no cover - every platform we ship on
        for _, a in columns:
            a.byteswap()
    header = {**header, "columns": [[name, a.typecode, len(a)] for name, a in columns]}
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [struct.pack("<I", len(head)), head]
    at = 4 + len(head)
    for blob in [b""] + [a.tobytes() for _, a in columns]:
        parts.append(b"\0" * (-at % 8))
        at += -at % 8
        parts.append(blob)
        at += len(blob)
    return b"".join(parts)


def decode(body: bytes) -> dict[str, Any]:
    """The header with every column as a list: what the page reads, for Python readers."""
    (hlen,) = struct.unpack_from("<I", body)
    out: dict[str, Any] = json.loads(body[4 : 4 + hlen])
    at = 4 + hlen
    for name, typecode, length in out.pop("columns"):
        at += -at % 8
        col = array(typecode)
        col.frombytes(body[at : at + length * col.itemsize])
        at += length * col.itemsize
        out[name] = col.tolist()
    return out


def spans_payload(trace: Trace, order: list[int], page: list[int], crit: set[int]) -> bytes:
    """The page's span columns (see the module docstring)."""
    n = len(order)
    pick = itemgetter(*order) if n > 1 else (lambda col: tuple(col[i] for i in order))
    kinds = [KIND_OF_OP.get(op, 0) for op in trace.op]
    merges = _merge_marks(trace, page)
    ln = lanes(trace, [order[int(p)] for p in merges], order)
    t0 = trace.start_ns
    start, end = trace.start, trace.end
    tables: dict[str, list[str]] = {}

    def coded(name: str, col: Sequence[str], first: Sequence[str] = ("",)) -> array[int]:
        items, codes = _table(col, first)
        tables[name] = items
        return array("H" if len(items) < 65536 else "I", map(codes.__getitem__, pick(col)))

    ttft = trace.ttft
    columns = [
        ("start", array("d", [(start[i] - t0) / 1e6 for i in order])),
        ("end", array("d", [(max(end[i], start[i]) - t0) / 1e6 for i in order])),
        ("ttft", array("f", [ttft[i] * 1e3 if ttft[i] >= 0 else -1.0 for i in order])),
        ("lane", array("i", pick(ln.lane))),
        ("depth", array("B", pick(ln.depth))),
        ("kind", array("B", pick(kinds))),
        ("crit", array("B", [1 if i in crit else 0 for i in order])),
        ("parent", array("i", [page[p] if p >= 0 else -1 for p in pick(trace.parent)])),
        ("name", coded("names", trace.name)),
        ("tier", coded("tiers", trace.tier, _TIERS)),
        ("wait", coded("waits", trace.wait_kind)),
        ("provider", coded("providers", trace.provider)),
    ]
    roles, role_code = _table(ln.role)
    subtasks, sub_code = _table(ln.subtask)
    header = {
        "n": n,
        "t0_ns": str(t0),
        **tables,
        "kinds": list(KINDS),
        "lanes": ln.labels,
        "roles": roles,
        "lane_role": [role_code[r] for r in ln.role],
        "subtasks": subtasks,
        "lane_subtask": [sub_code[s] for s in ln.subtask],
        "merges": merges,
        "merge_lane": 1 if merges else -1,
    }
    return encode(header, columns)
