"""A span written straight to the run's trace file, without the OpenTelemetry SDK's span.

Every model call makes a `chat` span, and the SDK's costs tens of µs and a dozen objects
per call (a lock, bounded attribute and event containers that check every value, a
readable copy made on `end`), objects that at hundreds of calls in flight also make the
garbage collector's older generations costlier. When the run's trace file is the only
place spans go (no OTLP exporter, no metrics, no processor added by the user, the default
sampler: `setup.start_span` checks), a `FileSpan` records the same thing in a few plain
fields and hands its OTLP JSON text to the file's writer when it ends: the same span, ids,
timestamps (the SDK's clock, so `span_clock` applies), attributes, events and status.

It is a real `opentelemetry.trace.Span`: made current, its context goes out as the
`traceparent` header, and spans started under it by the SDK are its children.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from typing import Any

import opentelemetry.sdk.trace as sdk_trace
from opentelemetry import trace
from opentelemetry.trace import SpanContext, Status, StatusCode
from opentelemetry.util.types import Attributes, AttributeValue

from swarm._tracing.otlp_json import OtlpSpan, encode_pairs, encode_span

__all__ = ["FileSpan", "SharedAttributes"]


class SharedAttributes:
    """Attributes every span of one kind carries (a chat span's operation, provider, model,
    tier, server): a `FileSpan` writes their JSON text, encoded once here, instead of
    encoding them again on every span."""

    __slots__ = ("attributes", "encoded")

    def __init__(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.attributes: Mapping[str, AttributeValue] = dict(attributes)
        self.encoded = encode_pairs(self.attributes)


def _now() -> int:
    """The SDK's clock, read as its spans read it (`setup.span_clock` swaps it)."""
    now: int = sdk_trace.time_ns()  # type: ignore[attr-defined]
    return now


class FileSpan(trace.Span):
    """A recording span whose end writes its JSON text through `write` (once)."""

    __slots__ = (
        "_attributes",
        "_context",
        "_end",
        "_events",
        "_kind",
        "_links",
        "_name",
        "_parent",
        "_shared",
        "_start",
        "_status",
        "_write",
    )

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: trace.SpanKind,
        attributes: dict[str, AttributeValue],
        write: Callable[[str], None],
        shared: SharedAttributes | None = None,
    ) -> None:
        """`attributes` are the span's own (the dict is the span's from here), `shared`
        those it has in common with others of its kind (`attributes` may override one)."""
        self._name = name
        self._shared = shared
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attributes = attributes  # the caller's dict, owned by the span from here
        self._events: list[tuple[str, int, Mapping[str, Any] | None]] = []
        self._links: list[tuple[str, str, Mapping[str, Any] | None]] = []
        self._status: Status | None = None
        self._write = write
        self._start = _now()
        self._end: int | None = None

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end is None

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if self._end is None:
            for key, value in attributes.items():
                if value is not None:  # what the SDK drops (with a warning)
                    self._attributes[key] = value

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if self._end is None and value is not None:
            self._attributes[key] = value

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        if self._end is None:
            at = _now() if timestamp is None else timestamp
            self._events.append((name, at, dict(attributes) if attributes else None))

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        if self._end is None and context.is_valid:
            trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
            self._links.append((trace_id, span_id, dict(attributes) if attributes else None))

    def update_name(self, name: str) -> None:
        if self._end is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """As the SDK: an OK status is final, UNSET changes nothing, a description goes
        with ERROR only."""
        if self._end is not None or (
            self._status is not None and self._status.status_code is StatusCode.OK
        ):
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self._status = status

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """As the SDK records one: an `exception` event with its type, message, stack trace."""
        module, name = type(exception).__module__, type(exception).__qualname__
        event: dict[str, AttributeValue] = {
            "exception.type": f"{module}.{name}" if module and module != "builtins" else name,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        event.update(attributes or {})
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        self._end = end = _now() if end_time is None else end_time
        ctx, parent, status = self._context, self._parent, self._status
        own, shared = self._attributes, self._shared
        if shared is None:
            raw = None
        elif own.keys().isdisjoint(shared.attributes):
            raw = f"[{shared.encoded},{encode_pairs(own)}]" if own else f"[{shared.encoded}]"
        else:  # a shared attribute set again on this span: written once, with its new value
            own = {**shared.attributes, **own}
            raw = None
        self._write(
            encode_span(
                OtlpSpan(
                    trace_id=f"{ctx.trace_id:032x}",
                    span_id=f"{ctx.span_id:016x}",
                    parent_span_id=f"{parent.span_id:016x}" if parent is not None else None,
                    name=self._name,
                    kind=self._kind.value + 1,  # the SDK counts from INTERNAL=0, OTLP from 1
                    start_ns=self._start,
                    end_ns=end,
                    attributes=own,
                    events=self._events,
                    links=self._links,
                    status_code=status.status_code.value if status is not None else 0,
                    status_message=(status.description or "") if status is not None else "",
                    raw_attributes=raw,
                )
            )
        )
        # an ended span may be kept a while (a cancelled timer keeps the context it was made
        # in, this span current in it): keep it small
        self._attributes.clear()
        self._events.clear()
        self._links.clear()

    def __repr__(self) -> str:
        return f"FileSpan(name={self._name!r}, context={self._context!r})"
