"""Following a run while it goes: what the live page draws, from its growing trace file.

`Follower.poll()` reads the whole lines the run appended since the last poll (spans are
written as they end, about every half second) and its pulse file (`swarm._tracing.pulse`:
the estimate, waits in progress, merge queue, spend), and keeps what the page shows:

- a lane per agent (a span's parent agent; labelled by role and subtask once known) and
  each ended span as a bar on it, sent to the page as the bars since its last poll;
- per provider, over the last minute of the run: calls, TTFT p50 and decode tokens/s;
- agents retrying (a call with more than one attempt or a backoff in the last minute)
  and agents stuck (nothing ended on their lane for `STUCK_S` while the run went on);
- the estimated finish as recorded each time, so the page draws how it moved.

It reads the files only, so a run in another process is followed the same way
(`swarm trace view --follow`); each span is decoded once, so a poll costs in proportion
to what is new. `done` once the root span is in the file and the run said it ended
(`end()`), or, following another process, the file stopped growing after it.
"""

from __future__ import annotations

import statistics
from collections import deque
from pathlib import Path
from typing import Any

import orjson

from swarm._analysis.otlp import otlp_value
from swarm._tracing import semconv as sc
from swarm._tracing.pulse import pulse_path, read_pulses

__all__ = ["STUCK_S", "Follower"]

STUCK_S = 30.0
"""Seconds with nothing ended on a lane, while the run goes on, before its agent is stuck."""
_WINDOW_NS = 60_000_000_000
_KIND = {sc.OP_CHAT: "chat", sc.OP_TOOL: "tool", sc.OP_AGENT: "agent"}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {kv["key"]: otlp_value(kv.get("value", {})) for kv in span.get("attributes", ())}


class Follower:
    """The live state of one run's trace (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = self._pulse_offset = 0
        self.t0 = 0
        """The first span's start (ns): bars are seconds from it."""
        self.last_ns = 0
        """The latest end seen (ns): "now" in the run's clock."""
        self.lanes: dict[str, int] = {}
        self.labels: list[str] = []
        self._lane_end: list[int] = []
        self._lane_over: list[bool] = []
        self.bars: list[tuple[int, float, float, str]] = []
        self._calls: deque[tuple[int, str, float, float]] = deque()
        self._retries: deque[tuple[int, int]] = deque()
        self.pulses: list[dict[str, Any]] = []
        self.spans = 0
        self.root_seen = False
        self._ended = False
        self._quiet_polls = 0
        self.version = 0
        """Counts the polls that brought something new (the page waits for a change)."""

    def end(self) -> None:
        """The run (in this process) has ended and its trace is complete."""
        self._ended = True

    @property
    def done(self) -> bool:
        return self.root_seen and (self._ended or self._quiet_polls >= 4)

    # -- reading --------------------------------------------------------------------

    def grew(self) -> bool:
        """Whether the trace or its pulse file holds more than was read: two `stat`s, so
        a follower can look ten times a second for next to nothing."""
        return _size(self.path) > self._offset or _size(pulse_path(self.path)) > self._pulse_offset

    def idle(self) -> None:
        """A look that found nothing new (`grew()` was False)."""
        self._quiet_polls += 1
        if self.done:
            self.version += 1

    def poll(self) -> None:
        """Take in what the run wrote since the last poll."""
        grew = False
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n") + 1
        if end:
            grew = True
            self._offset += end
            for line in data[:end].splitlines():
                self._line(line)
        records, self._pulse_offset = read_pulses(self.path, self._pulse_offset)
        self.pulses += [r.model_dump(exclude_defaults=True) for r in records]
        self._quiet_polls = 0 if grew or records else self._quiet_polls + 1
        if grew or records or self.done:
            self.version += 1

    def _line(self, line: bytes) -> None:
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            return
        for rs in doc.get("resourceSpans", ()):
            for ss in rs.get("scopeSpans", ()):
                for span in ss.get("spans", ()):
                    self._span(span)

    def _span(self, span: dict[str, Any]) -> None:
        self.spans += 1
        start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
        if not self.t0 or start < self.t0:
            self.t0 = self.t0 or start
        self.last_ns = max(self.last_ns, end)
        parent = span.get("parentSpanId")
        attrs = _attrs(span)
        op = attrs.get(sc.OPERATION) or ""
        if not parent:
            self.root_seen = self.root_seen or op == sc.OP_WORKFLOW
            return
        if op == sc.OP_AGENT:
            lane = self._lane(span["spanId"])
            subtask = attrs.get(sc.SUBTASK_ID)
            role = attrs.get(sc.AGENT_NAME) or span["name"].split(" ", 1)[-1]
            self.labels[lane] = f"{role} · {subtask}" if subtask else str(role)
            self._lane_over[lane] = True
            return
        lane = self._lane(parent)
        if self.labels[lane] == "…":  # until its agent span ends (or for the run's own)
            self.labels[lane] = str(attrs.get(sc.ROLE) or attrs.get(sc.SUBTASK_ID) or span["name"])
        self._lane_end[lane] = max(self._lane_end[lane], end)
        kind = "wait" if attrs.get(sc.WAIT_KIND) else _KIND.get(op, "other")
        self.bars.append((lane, (start - self.t0) / 1e9, (end - self.t0) / 1e9, kind))
        if op == sc.OP_CHAT:
            self._call(end, attrs, (end - start) / 1e9)
            if int(attrs.get(sc.ATTEMPTS) or 1) > 1:
                self._retries.append((end, lane))
        elif attrs.get(sc.WAIT_KIND) == sc.WAIT_BACKOFF:
            self._retries.append((end, lane))

    def _lane(self, key: str) -> int:
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = len(self.labels)
            self.labels.append("…")
            self._lane_end.append(0)
            self._lane_over.append(False)
        return lane

    def _call(self, end: int, attrs: dict[str, Any], dur: float) -> None:
        if attrs.get(sc.HEDGE_OUTCOME) == sc.HEDGE_LOST or attrs.get(sc.ERROR_TYPE):
            return
        ttft = attrs.get(sc.TIME_TO_FIRST_CHUNK, attrs.get(sc.TTFT_S))
        if not isinstance(ttft, (int, float)):
            return
        out = attrs.get(sc.OUTPUT_TOKENS)
        decode = dur - float(ttft)
        tps = float(out) / decode if isinstance(out, int) and decode > 0 else 0.0
        self._calls.append((end, str(attrs.get(sc.PROVIDER) or "?"), float(ttft), tps))

    # -- what the page gets ---------------------------------------------------------

    def snapshot(self, since: int = 0) -> dict[str, Any]:
        """The page's update: bars from index `since` on, and everything else whole."""
        cut = self.last_ns - _WINDOW_NS
        while self._calls and self._calls[0][0] < cut:
            self._calls.popleft()
        while self._retries and self._retries[0][0] < cut:
            self._retries.popleft()
        since = max(0, min(since, len(self.bars)))
        pulse = self.pulses[-1] if self.pulses else {}
        return {
            "live": True,
            "done": self.done,
            "version": self.version,
            "t0_ms": self.t0 / 1e6,
            "spans": self.spans,
            "now_s": (self.last_ns - self.t0) / 1e9 if self.t0 else 0.0,
            "labels": self.labels,
            "bars": self.bars[since:],
            "cursor": len(self.bars),
            "pulse": pulse,
            "estimates": [
                [p["elapsed_s"], p["left_s"], p.get("low_s"), p.get("high_s")]
                for p in self.pulses
                if p.get("left_s") is not None
            ],
            "providers": self._providers(),
            "retrying": sorted({self.labels[lane] for _, lane in self._retries}),
            "stuck": self._stuck(),
        }

    def _providers(self) -> dict[str, dict[str, float]]:
        by: dict[str, list[tuple[float, float]]] = {}
        for _, provider, ttft, tps in self._calls:
            by.setdefault(provider, []).append((ttft, tps))
        return {
            p: {
                "calls": len(rows),
                "ttft_p50_s": statistics.median(r[0] for r in rows),
                "tokens_per_s": statistics.median(r[1] for r in rows),
            }
            for p, rows in sorted(by.items())
        }

    def _stuck(self) -> list[str]:
        if self.done:
            return []
        late = self.last_ns - int(STUCK_S * 1e9)
        return [
            self.labels[i]
            for i, end in enumerate(self._lane_end)
            if end and end < late and not self._lane_over[i]
        ]
