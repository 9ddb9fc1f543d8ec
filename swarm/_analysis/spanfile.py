"""Writing spans to an OTLP JSON Lines file: the shared tail of every hand-made trace.

`SpanLines` batches encoded spans into `TracesData` lines; times are seconds from
`BASE_NS`, turned into nanoseconds by `at_ns`.
"""

from __future__ import annotations

from typing import TextIO

from swarm._tracing import semconv as sc
from swarm._tracing.otlp_json import traces_data_line

__all__ = ["BASE_NS", "SPANS_PER_LINE", "SpanLines", "at_ns"]

BASE_NS = 1_780_000_000_000_000_000
"""Start of every synthetic run, in Unix nanoseconds."""
SPANS_PER_LINE = 1000
_SEC = 1_000_000_000


class SpanLines:
    """Buffers encoded spans and writes one OTLP line per `SPANS_PER_LINE` spans."""

    def __init__(self, fh: TextIO, run_id: str) -> None:
        self.fh = fh
        self.resource = {"service.name": "swarm", sc.RUN_ID: run_id}
        self.buf: list[str] = []
        self.count = 0

    def add(self, span_json: str) -> None:
        self.buf.append(span_json)
        self.count += 1
        if len(self.buf) >= SPANS_PER_LINE:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.fh.write(traces_data_line(self.resource, "swarm", self.buf) + "\n")
            self.buf = []


def at_ns(t: float) -> int:
    """Seconds from the run start as Unix nanoseconds."""
    return BASE_NS + int(t * _SEC)
