"""Which tracer swarm's spans go to.

A run installs its own `TracerProvider` (one per run, so two runs in one process keep
separate trace files); code that makes spans asks `tracer()` at the time it needs one.
With no run active, spans go to OpenTelemetry's global provider (a no-op unless the user
configured one).

`run_tracing` sets a run up: its provider writes every span to `traces/<run-id>.jsonl`
(OTLP JSON Lines, written as the run goes, nothing dropped) and optionally to an OTLP/HTTP
collector through a batch processor sized for swarm bursts that counts what it drops.

`span_clock` makes spans read another clock: a simulated run on a virtual clock records
virtual timestamps, so its trace's durations, TTFTs and wall-clock are the simulation's.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from swarm._tracing import semconv as sc
from swarm._tracing.file_span import FileSpan, SharedAttributes
from swarm._tracing.metrics import GenAIMetricsProcessor, meter_provider
from swarm._tracing.otlp_json import OtlpSpan, encode_span, traces_data_line
from swarm.config._secrets import capture_content as content_capture_on
from swarm.errors import UsageError

__all__ = [
    "GenAIMetricsProcessor",
    "JsonlSpanProcessor",
    "RunTrace",
    "current_run",
    "run_tracing",
    "span_clock",
    "start_span",
    "tracer",
    "use_tracer",
]

_current: ContextVar[trace.Tracer | None] = ContextVar("swarm_tracer", default=None)


def tracer() -> trace.Tracer:
    """The tracer of the active run, else one from the global provider."""
    return _current.get() or trace.get_tracer("swarm")


def start_span(
    name: str,
    attributes: dict[str, AttributeValue],
    kind: SpanKind = SpanKind.INTERNAL,
    shared: SharedAttributes | None = None,
) -> trace.Span:
    """`tracer().start_span(name, kind=kind, attributes=shared + attributes)`, for spans
    made on every model call: when the active run's trace file is the only place its spans
    go, a `FileSpan` (the same span at a fraction of the SDK's cost) written straight to
    it. `attributes` then belongs to the span: pass a dict of your own."""
    run = _current_run.get()
    if run is not None and run._file_only():
        parent = trace.get_current_span().get_span_context()
        if not parent.is_valid or parent.trace_flags.sampled:
            return run._file_span(name, parent, kind, attributes, shared)
    if shared is not None:
        attributes = {**shared.attributes, **attributes}
    return tracer().start_span(name, kind=kind, attributes=attributes)


@contextmanager
def use_tracer(provider: trace.TracerProvider) -> Iterator[trace.Tracer]:
    """Send spans made in this context (and tasks started from it) to `provider`."""
    with _using(provider.get_tracer("swarm")) as t:
        yield t


@contextmanager
def _using(t: trace.Tracer) -> Iterator[trace.Tracer]:
    token = _current.set(t)
    try:
        yield t
    finally:
        _current.reset(token)


# -- recording a run -------------------------------------------------------------------

_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_SAMPLED_RANDOM = trace.TraceFlags(trace.TraceFlags.SAMPLED | trace.TraceFlags.RANDOM_TRACE_ID)
"""A `FileSpan`'s flags, made once (each `TraceFlags` is an object the collector tracks)."""
_FLUSH_INTERVAL_S = 0.5
_FLUSH_SPANS = 1000
_OTLP_QUEUE = 1_000_000
_current_run: ContextVar[RunTrace | None] = ContextVar("swarm_run_trace", default=None)


def _encode(span: ReadableSpan) -> str | None:
    ctx = span.get_span_context()
    if ctx is None:
        return None
    parent = span.parent
    status = span.status
    return encode_span(
        OtlpSpan(
            trace_id=f"{ctx.trace_id:032x}",
            span_id=f"{ctx.span_id:016x}",
            parent_span_id=f"{parent.span_id:016x}" if parent is not None else None,
            name=span.name,
            kind=span.kind.value + 1,  # the SDK counts from INTERNAL=0, OTLP from UNSPECIFIED=0
            start_ns=span.start_time or 0,
            end_ns=span.end_time or 0,
            attributes=span.attributes,
            events=[(e.name, e.timestamp, e.attributes) for e in span.events],
            links=[
                (f"{ln.context.trace_id:032x}", f"{ln.context.span_id:016x}", ln.attributes)
                for ln in span.links
            ],
            status_code=status.status_code.value,
            status_message=status.description or "",
            dropped_attributes=span.dropped_attributes,
            dropped_events=span.dropped_events,
            dropped_links=span.dropped_links,
        )
    )


@dataclass(frozen=True, slots=True)
class _Group:
    """Where a span's JSON text goes in the file: the resource and scope of its line."""

    resource: Mapping[str, Any]
    scope: str
    version: str


class JsonlSpanProcessor(SpanProcessor):
    """Appends every finished span to an OTLP JSON Lines file; never drops one.

    `on_end` encodes the span to its JSON text at once and queues only that text: a queued
    SDK span would keep a dozen objects alive (its attributes, events, context, lock) until
    the writer ran, and at hundreds of calls in flight those survivors made the collector's
    older generations several times costlier than the spans themselves (measured: 0.1 ms of
    GC per model call). A writer thread owned by the processor writes whole lines every
    `flush_interval_s` or `flush_spans` spans, and flushes the file each time, so a crashed
    run keeps all but its last instant. `shutdown` stops and joins the thread and writes
    whatever is left.
    """

    def __init__(
        self,
        path: Path,
        *,
        flush_interval_s: float = _FLUSH_INTERVAL_S,
        flush_spans: int = _FLUSH_SPANS,
    ) -> None:
        self.path = path
        self.spans_written = 0
        self._interval = flush_interval_s
        self._batch = flush_spans
        self._pending: deque[tuple[_Group, str]] = deque()
        self._groups: dict[tuple[int, str, str], _Group] = {}
        self._wake = threading.Event()
        self._stop = False
        self._write_lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")
        self._thread = threading.Thread(target=self._run, name="swarm-trace-writer", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        encoded = _encode(span)
        if encoded is not None:
            self.append(self._group(span), encoded)

    def _group(self, span: ReadableSpan) -> _Group:
        scope = span.instrumentation_scope
        name, version = (scope.name, scope.version or "") if scope else ("", "")
        return self._group_of(span.resource, name, version)

    def _group_of(self, resource: Resource, scope: str, version: str) -> _Group:
        """The (resource, scope) line a span of this origin is written on."""
        key = (id(resource), scope, version)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(resource.attributes, scope, version)
        return group

    def writer(self, resource: Resource, scope: str, version: str) -> Callable[[str], None]:
        """What writes one span's JSON text on the line of `resource` and `scope`."""
        return partial(self.append, self._group_of(resource, scope, version))

    def append(self, group: _Group, encoded: str) -> None:
        """Queue one span's JSON text for the line of `group`."""
        self._pending.append((group, encoded))
        if len(self._pending) >= self._batch:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self._interval)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        with self._write_lock:
            if self._fh.closed:
                return
            pending = self._pending
            while pending:
                n = min(len(pending), self._batch)
                self._write([pending.popleft() for _ in range(n)])
            self._fh.flush()

    def _write(self, batch: list[tuple[_Group, str]]) -> None:
        lines: dict[int, tuple[_Group, list[str]]] = {}
        for group, encoded in batch:
            lines.setdefault(id(group), (group, []))[1].append(encoded)
        for group, spans in lines.values():
            line = traces_data_line(group.resource, group.scope, spans, group.version)
            self._fh.write(line + "\n")
            self.spans_written += len(spans)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._drain()
        return True

    def shutdown(self) -> None:
        if self._stop:
            return
        self._stop = True
        self._wake.set()
        self._thread.join()
        self._drain()
        with self._write_lock:
            self._fh.close()


class _CountingExporter(SpanExporter):
    """Wraps an exporter and counts the spans it failed to deliver."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter bug must not take the run down; count the loss
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _CountingBatchProcessor(BatchSpanProcessor):
    """A BatchSpanProcessor sized for swarm bursts that counts the spans it drops."""

    def __init__(self, exporter: _CountingExporter, max_queue_size: int) -> None:
        super().__init__(
            exporter,
            max_queue_size=max_queue_size,
            schedule_delay_millis=500,
            max_export_batch_size=512,
        )
        self.counting = exporter
        self.queue_dropped = 0
        self._max_queue = max_queue_size

    def on_end(self, span: ReadableSpan) -> None:
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
        if queue is not None and len(queue) >= self._max_queue:
            self.queue_dropped += 1
        super().on_end(span)

    @property
    def dropped(self) -> int:
        return self.queue_dropped + self.counting.failed


def _otlp_traces_url(endpoint: str | None) -> str | None:
    """The OTLP/HTTP traces URL from an argument or the standard environment variables."""
    if endpoint:
        base = endpoint
    elif os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    elif os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        base = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    else:
        return None
    base = base.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


@dataclass
class RunTrace:
    """The tracing of one run: where its spans go and how many arrived."""

    run_id: str
    path: Path
    """The run's OTLP JSON Lines file, `traces/<run-id>.jsonl`."""
    provider: TracerProvider
    capture_content: bool
    """Whether prompt and completion text may be recorded (opt-in)."""
    otlp_url: str | None = None
    _jsonl: JsonlSpanProcessor | None = field(default=None, repr=False)
    _otlp: _CountingBatchProcessor | None = field(default=None, repr=False)
    meter_provider: MeterProvider | None = None
    """Set when GenAI client metrics are exported (a metric reader was configured)."""

    _tracer: trace.Tracer | None = field(default=None, repr=False)
    _write: Callable[[str], None] | None = field(default=None, repr=False)

    def _file_only(self) -> bool:
        """Is this run's tracer the active one, and its trace file the only place its
        spans go (so a `FileSpan` records exactly what the SDK's span would)? Read off the
        SDK's private fields each time (a user may add a processor to `provider`); if the
        SDK changes them, the answer is no and spans are the SDK's."""
        provider = self.provider
        processors = getattr(
            getattr(provider, "_active_span_processor", None), "_span_processors", None
        )
        config = getattr(self._tracer, "_tracer_config", None)
        return (
            _current.get() is self._tracer
            and self._jsonl is not None
            and processors == (self._jsonl,)
            and provider.sampler is sampling.DEFAULT_ON
            and getattr(config, "is_enabled", False) is True
        )

    def _file_span(
        self,
        name: str,
        parent: trace.SpanContext,
        kind: SpanKind,
        attributes: dict[str, AttributeValue],
        shared: SharedAttributes | None,
    ) -> FileSpan:
        ids = self.provider.id_generator
        if parent.is_valid:
            trace_id, random_id, state = (
                parent.trace_id,
                parent.trace_flags.random_trace_id,
                parent.trace_state,
            )
            up: trace.SpanContext | None = parent
        else:
            trace_id, random_id, state = ids.generate_trace_id(), ids.is_trace_id_random(), None
            up = None
        context = trace.SpanContext(
            trace_id,
            ids.generate_span_id(),
            is_remote=False,
            trace_flags=_SAMPLED_RANDOM if random_id else _SAMPLED,
            trace_state=state,
        )
        assert self._write is not None  # set with _jsonl
        return FileSpan(name, context, up, kind, attributes, self._write, shared)

    @property
    def spans_written(self) -> int:
        """Spans written to the file so far."""
        return self._jsonl.spans_written if self._jsonl else 0

    @property
    def dropped(self) -> int:
        """Spans the OTLP exporter lost (queue full or export failed); the file loses none."""
        return self._otlp.dropped if self._otlp else 0

    def flush(self) -> None:
        """Write everything finished so far (file and OTLP)."""
        self.provider.force_flush()


@contextmanager
def span_clock(now_ns: Callable[[], int]) -> Iterator[None]:
    """While inside, every span's start, end and event timestamps come from `now_ns`.

    OpenTelemetry's SDK reads `time.time_ns` for these through its own module global and
    offers no clock hook, so this swaps that global (restored on exit). Process-wide: for a
    process that runs one simulation at a time (`swarm simulate --virtual`)."""
    import opentelemetry.sdk.trace as sdk_trace

    saved = getattr(sdk_trace, "time_ns")  # noqa: B009 - not an exported name
    setattr(sdk_trace, "time_ns", now_ns)  # noqa: B010
    try:
        yield
    finally:
        setattr(sdk_trace, "time_ns", saved)  # noqa: B010


def current_run() -> RunTrace | None:
    """The `RunTrace` of the run active in this context, if any."""
    return _current_run.get()


@contextmanager
def run_tracing(
    run_id: str,
    *,
    traces_dir: Path = Path("traces"),
    otlp_endpoint: str | None = None,
    capture_content: bool | None = None,
    metric_reader: MetricReader | None = None,
    resume: bool = False,
) -> Iterator[RunTrace]:
    """Record the spans of one run to `traces_dir/<run_id>.jsonl` (and OTLP if configured).

    A trace file already there means the run id was used before: `UsageError`, rather
    than two runs merged into one summary, unless `resume` (the same run, continued).

    Installs a TracerProvider for the run via `use_tracer`; on exit flushes and shuts it
    down, so the file is complete. The OTLP endpoint comes from the argument or from
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`. GenAI client
    metrics are derived from chat spans when `metric_reader` is given or
    `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is set."""
    if capture_content is None:
        capture_content = content_capture_on()
    resource = Resource.create({"service.name": "swarm", sc.RUN_ID: run_id})
    provider = TracerProvider(resource=resource)
    path = traces_dir / f"{run_id}.jsonl"
    if not resume and path.exists() and path.stat().st_size:
        raise UsageError(
            f"{path}: a trace of run {run_id!r} is already there; give this run another id "
            "(or resume=True to continue that run)"
        )
    jsonl = JsonlSpanProcessor(path)
    provider.add_span_processor(jsonl)
    url = _otlp_traces_url(otlp_endpoint)
    otlp = None
    if url:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        otlp = _CountingBatchProcessor(
            _CountingExporter(OTLPSpanExporter(endpoint=url)), _OTLP_QUEUE
        )
        provider.add_span_processor(otlp)
    meters = meter_provider(resource, metric_reader)
    if meters is not None:
        provider.add_span_processor(GenAIMetricsProcessor(meters))
    run = RunTrace(run_id, path, provider, capture_content, url, jsonl, otlp, meters)
    run._tracer = provider.get_tracer("swarm")
    run._write = jsonl.writer(provider.resource, "swarm", "")  # the tracer's scope
    token = _current_run.set(run)
    try:
        with _using(run._tracer):
            yield run
    finally:
        _current_run.reset(token)
        provider.shutdown()
        if meters is not None:
            meters.shutdown()
