"""Hand a trace to other tools: Chrome trace-event JSON (Perfetto, chrome://tracing) and
replay into any OTLP/HTTP endpoint as protobuf (Jaeger, Phoenix, Tempo, a collector)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from swarm._analysis.model import Trace
from swarm._tracing import semconv as sc

__all__ = ["CHROME_SUFFIX", "export_chrome", "otlp_requests", "send_otlp"]

_RETRY_STATUS = {429, 502, 503, 504}


@dataclass
class _Track:
    """One thread of the export: the slices open on it, innermost last."""

    tid: int
    label: str
    owner: int
    """The agent (or root) span whose work this thread shows."""
    open: list[int] = field(default_factory=list)
    """Indices of the spans whose slices enclose the present instant, outermost first."""

    def settle(self, tr: Trace, start: int) -> None:
        """Close the slices that ended by `start`."""
        while self.open and tr.end[self.open[-1]] <= start:
            self.open.pop()

    def takes(self, tr: Trace, i: int) -> bool:
        """Can span `i` go here? On an empty track, or inside the span on top, which must
        be its parent: a slice never lands inside an unrelated one."""
        self.settle(tr, tr.start[i])
        if not self.open:
            return True
        top = self.open[-1]
        return top == tr.parent[i] and tr.end[i] <= tr.end[top]


class _Tracks:
    """Assigns every span a thread so that on each thread slices nest as a stack.

    Each agent gets its own thread (the run's own spans are on `swarm`); a span goes on
    its parent's thread when it fits inside the parent there, else on a free thread of
    the same agent (parallel tool calls: `coder 3 · 2`), else on a new one."""

    def __init__(self, tr: Trace) -> None:
        self.tr = tr
        self.subtask = _subtasks(tr)
        self.tracks: list[_Track] = []
        self.of_owner: dict[int, list[_Track]] = {}
        self.track_of: dict[int, _Track] = {}

    def place(self, i: int) -> _Track:
        tr = self.tr
        parent = tr.parent[i]
        owner = i if tr.op[i] == sc.OP_AGENT or parent < 0 else self.owner_of(parent)
        home = self.track_of.get(parent)
        if home is not None and owner == home.owner and home.takes(tr, i):
            track = home
        else:
            own = self.of_owner.setdefault(owner, [])
            track = next((t for t in own if t.takes(tr, i)), None) or self._new(owner, own)
        track.open.append(i)
        self.track_of[i] = track
        return track

    def owner_of(self, i: int) -> int:
        """The agent (or root) whose threads span `i` is drawn on (`i` when unplaced)."""
        track = self.track_of.get(i)
        return i if track is None else track.owner

    def _new(self, owner: int, own: list[_Track]) -> _Track:
        label = _label(self.tr, owner, self.subtask.get(self.tr.span_id[owner]))
        if own:
            label = f"{label} · {len(own) + 1}"
        track = _Track(len(self.tracks) + 1, label, owner)
        own.append(track)
        self.tracks.append(track)
        return track


_SUBTASK_OR_SPAN = re.compile(
    rb'"spanId":"([0-9a-fA-F]{16})","(?:parentSpanId|name)"'
    rb'|"key":"swarm\.subtask\.id","value":\{"stringValue":"((?:[^"\\]|\\.)*)"\}'
)
"""A span's own id (followed by its parent or name, which a link's is not) or a subtask
attribute: in OTLP/JSON lines as swarm writes them, a span's id comes before its
attributes."""


def _subtasks(tr: Trace) -> dict[str, str]:
    """The `swarm.subtask.id` of the spans that have one, by span id, for thread names.

    No column holds it, and parsing every line again costs ten times the export: the ids
    are picked out of the raw lines instead (a line laid out otherwise just names fewer)."""
    if sc.OP_AGENT not in tr.op:
        return {}
    found: dict[str, str] = {}
    with tr.path.open("rb") as fh:
        for line in fh:
            if b"swarm.subtask.id" not in line:
                continue
            span = None
            for m in _SUBTASK_OR_SPAN.finditer(line):
                if m.group(1):
                    span = m.group(1).decode().lower()
                elif span is not None:
                    found[span] = json.loads(b'"' + m.group(2) + b'"')
    return found


def _label(tr: Trace, i: int, subtask: str | None) -> str:
    """A thread's name: `swarm` for the run, else the agent (and its subtask)."""
    if tr.op[i] == sc.OP_WORKFLOW:
        return "swarm"
    if tr.op[i] != sc.OP_AGENT:
        return tr.name[i]
    name = tr.agent[i] or tr.name[i]
    where = f" · {subtask}" if subtask and str(subtask) not in name else ""
    return f"{name}{where} [{tr.span_id[i][-6:]}]"


def _depths(tr: Trace) -> list[int]:
    """Each span's depth below its root (a parent loop, in a broken file, stops the walk)."""
    depth = [-1] * len(tr)
    for i in range(len(tr)):
        chain: list[int] = []
        j = i
        while j >= 0 and depth[j] < 0 and len(chain) <= len(tr):
            chain.append(j)
            j = tr.parent[j]
        d = depth[j] if j >= 0 else -1
        for k in reversed(chain):
            d += 1
            depth[k] = d
    return depth


CHROME_SUFFIX = ".trace.json"
"""What to name a Chrome export: Perfetto and speedscope both read it by its content.
(speedscope takes `*.chrome.json` for a Chrome *profile* and rejects trace events.)"""


def export_chrome(trace: Trace) -> dict[str, Any]:
    """Chrome trace-event JSON (Perfetto, speedscope, chrome://tracing), times in µs.

    One thread per agent and per parallel branch of an agent (see `_Tracks`): slices on a
    thread nest as a stack, and a child is on its parent's thread only inside it.

    Frames aggregate: a slice is its span's name (`chat kimi-k2.6`, `execute_tool
    run_tests`) and nothing else that varies per span, because speedscope folds a slice's
    whole `args` into the frame's identity. The span id is the event's own `id` field,
    which no tool folds into a frame; a model call's figures (provider, tokens, cost) ride
    on its first-token mark, which speedscope ignores and Perfetto shows on the bar."""
    tr = trace
    t0 = tr.start_ns
    depth = _depths(tr)
    order = sorted(range(len(tr)), key=lambda i: (tr.start[i], -tr.end[i], depth[i]))
    tracks = _Tracks(tr)
    events: list[dict[str, Any]] = []
    for i in order:
        tid = tracks.place(i).tid
        ts = (tr.start[i] - t0) / 1e3
        if tr.op[i] == sc.OP_CHAT and tr.ttft[i] >= 0:
            first = min(ts + tr.ttft[i] * 1e6, (tr.end[i] - t0) / 1e3)
            args = {"span_id": tr.span_id[i], "role": tr.role[i], **_chat_args(tr, i)}
            mark = {"name": sc.FIRST_TOKEN_EVENT, "ph": "i", "s": "t", "ts": first}
            events.append(mark | {"pid": 1, "tid": tid, "args": args})
        dur = (tr.end[i] - tr.start[i]) / 1e3
        slice_ = {"name": tr.name[i], "cat": _category(tr, i), "ph": "X", "ts": ts, "dur": dur}
        events.append(slice_ | {"pid": 1, "tid": tid, "id": tr.span_id[i]})
    return {"traceEvents": _metadata(tr, tracks.tracks) + events, "displayTimeUnit": "ms"}


def _category(tr: Trace, i: int) -> str:
    """The slice's category: its operation, and `error` for a failed span (Perfetto
    filters by category; speedscope ignores it, so frames still aggregate)."""
    op = tr.op[i] or "span"
    return f"{op},error" if tr.error[i] else op


def _metadata(tr: Trace, tracks: list[_Track]) -> list[dict[str, Any]]:
    """Process and thread names; threads sorted in the order they first appear."""
    meta: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"swarm run {tr.run_id}"}},
        {"name": "process_sort_index", "ph": "M", "pid": 1, "args": {"sort_index": 0}},
    ]
    for t in tracks:
        head = {"ph": "M", "pid": 1, "tid": t.tid}
        meta.append({"name": "thread_name", "args": {"name": t.label}} | head)
        meta.append({"name": "thread_sort_index", "args": {"sort_index": t.tid}} | head)
    return meta


def _chat_args(tr: Trace, i: int) -> dict[str, Any]:
    return {
        "provider": tr.provider[i],
        "model": tr.model[i],
        "tier": tr.tier[i],
        "input_tokens": tr.input_tokens[i],
        "output_tokens": tr.output_tokens[i],
        "cost_usd": tr.cost[i],
    }


def _ids_to_base64(doc: dict[str, Any]) -> None:
    """The file holds hex ids (OTLP/JSON); protobuf's JSON mapping wants base64 bytes."""

    def b64(h: str) -> str:
        return base64.b64encode(bytes.fromhex(h)).decode()

    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if sp.get(key):
                        sp[key] = b64(sp[key])
                for ln in sp.get("links", []):
                    ln["traceId"], ln["spanId"] = b64(ln["traceId"]), b64(ln["spanId"])


def otlp_requests(path: Path) -> Iterator[tuple[bytes, int]]:
    """Each line of a trace file as a serialized `ExportTraceServiceRequest` + span count."""
    from google.protobuf.json_format import ParseDict  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    with path.open("rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            doc = json.loads(line)
            _ids_to_base64(doc)
            msg = ParseDict(
                {"resourceSpans": doc.get("resourceSpans", [])},
                ExportTraceServiceRequest(),
                ignore_unknown_fields=True,
            )
            n = sum(len(ss.spans) for rs in msg.resource_spans for ss in rs.scope_spans)
            yield msg.SerializeToString(), n


async def send_otlp(
    path: Path | str,
    url: str,
    *,
    max_attempts: int = 8,
    backoff_s: float = 0.5,
    timeout_s: float = 30.0,
) -> int:
    """Replay a saved trace into an OTLP/HTTP endpoint (`…/v1/traces` is appended when
    missing) as protobuf; back off and retry on 429/503. Returns the spans sent."""
    url = url.rstrip("/")
    if not url.endswith("/v1/traces"):
        url += "/v1/traces"
    sent = 0
    headers = {"Content-Type": "application/x-protobuf"}
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        for body, n in otlp_requests(Path(path)):
            for attempt in range(max_attempts):
                resp = await client.post(url, content=body, headers=headers)
                if resp.status_code not in _RETRY_STATUS:
                    resp.raise_for_status()
                    break
                if attempt == max_attempts - 1:
                    resp.raise_for_status()
                delay = backoff_s * 2**attempt
                retry_after = resp.headers.get("retry-after", "")
                if retry_after.replace(".", "", 1).isdigit():
                    delay = min(float(retry_after), 60.0)
                await anyio.sleep(delay)
            sent += n
    return sent
