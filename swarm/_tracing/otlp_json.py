"""OTLP JSON encoding of spans: the OpenTelemetry file-exporter format, one line per batch.

Rules of the format (OTLP/JSON): trace and span ids as lowercase hex, enums as integers,
lowerCamelCase keys, 64-bit integers as decimal strings, `parentSpanId` omitted on roots,
zero dropped-counts omitted. Each line is one `TracesData` object:
`{"resourceSpans": [{"resource": ..., "scopeSpans": [{"scope": ..., "spans": [...]}]}]}`.

Everything here builds strings directly (no intermediate dicts) because the recorder and the
synthetic-trace writer encode up to millions of spans.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "KIND_CLIENT",
    "KIND_INTERNAL",
    "KIND_SERVER",
    "STATUS_ERROR",
    "STATUS_OK",
    "STATUS_UNSET",
    "OtlpSpan",
    "encode_attributes",
    "encode_pairs",
    "encode_span",
    "encode_value",
    "traces_data_line",
]

KIND_INTERNAL = 1
KIND_SERVER = 2
KIND_CLIENT = 3
STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2

_dumps = json.dumps
_string: Callable[[str], str] = getattr(json.encoder, "c_encode_basestring_ascii", None) or _dumps
"""A str as JSON text: what `json.dumps(text)` writes, without its two Python layers."""


def encode_value(value: Any) -> str:
    """One OTLP `AnyValue` as JSON text."""
    if isinstance(value, bool):  # before int: bool is an int subclass
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if isinstance(value, int):
        return f'{{"intValue":"{value}"}}'
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return f'{{"stringValue":"{value}"}}'
        return f'{{"doubleValue":{value!r}}}'
    if isinstance(value, str):
        return f'{{"stringValue":{_string(value)}}}'
    if isinstance(value, (list, tuple)):
        inner = ",".join(encode_value(v) for v in value)
        return f'{{"arrayValue":{{"values":[{inner}]}}}}'
    if isinstance(value, bytes):
        return f'{{"stringValue":{_string(value.hex())}}}'
    return f'{{"stringValue":{_string(str(value))}}}'


_KEYS: dict[str, str] = {}
"""Each attribute key's `{"key":...,"value":` prefix: a run has a few dozen keys, and every
span writes most of them."""
_PAIRS: dict[tuple[str, str | bool], str] = {}
"""Whole encoded `KeyValue`s of string and boolean attributes: most repeat on every span
of their kind (operation, provider, model, tier, route reason), so each is encoded once."""
_MOST_CACHED = 4096  # keys and pairs come from code and config, but stay bounded anyway


def _key(k: str) -> str:
    head = _KEYS.get(k)
    if head is None:
        head = f'{{"key":{_string(k)},"value":'
        if len(_KEYS) < _MOST_CACHED:
            _KEYS[k] = head
    return head


def _pair(k: str, v: Any) -> str:
    """One `KeyValue` as JSON text (the numbers inline: they seldom repeat)."""
    kind = type(v)
    if kind is int:
        return f'{_key(k)}{{"intValue":"{v}"}}}}'
    if kind is float and v - v == 0.0:  # finite
        return f'{_key(k)}{{"doubleValue":{v!r}}}}}'
    if kind is str or kind is bool:
        pair = _PAIRS.get((k, v))
        if pair is None:
            pair = f"{_key(k)}{encode_value(v)}}}"
            if len(_PAIRS) < _MOST_CACHED and (kind is bool or len(v) <= 256):
                _PAIRS[(k, v)] = pair
        return pair
    return f"{_key(k)}{encode_value(v)}}}"


def encode_attributes(attrs: Mapping[str, Any] | None) -> str:
    """A JSON array of OTLP `KeyValue`s (without the surrounding key)."""
    if not attrs:
        return "[]"
    return "[" + ",".join([_pair(k, v) for k, v in attrs.items()]) + "]"


def encode_pairs(attrs: Mapping[str, Any]) -> str:
    """The OTLP `KeyValue`s of `attrs` as JSON text without the array's brackets ("" for
    none): a piece of an attribute array, to join with others."""
    return ",".join([_pair(k, v) for k, v in attrs.items()])


class OtlpSpan(NamedTuple):
    """One span to encode, ids in hex, times in nanoseconds since the epoch.

    A NamedTuple, not a dataclass: writers build one per span (up to millions), and a
    NamedTuple builds in about a third of a frozen dataclass's time (measured, 100k spans).
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any] | None = None
    events: Sequence[tuple[str, int, Mapping[str, Any] | None]] = ()
    """(name, time_ns, attrs) each."""
    links: Sequence[tuple[str, str, Mapping[str, Any] | None]] = ()
    """(trace_id, span_id, attrs) each."""
    status_code: int = STATUS_UNSET
    status_message: str = ""
    dropped_attributes: int = 0
    dropped_events: int = 0
    dropped_links: int = 0
    raw_attributes: str | None = None
    """An already-encoded attribute array used instead of `attributes` (hot writers)."""


def encode_span(span: OtlpSpan) -> str:
    """One OTLP `Span` as JSON text."""
    (
        trace_id,
        span_id,
        parent_span_id,
        name,
        kind,
        start_ns,
        end_ns,
        attributes,
        events,
        links,
        status_code,
        status_message,
        dropped_attributes,
        dropped_events,
        dropped_links,
        raw_attributes,
    ) = span
    out = [f'{{"traceId":"{trace_id}","spanId":"{span_id}"']
    if parent_span_id:
        out.append(f',"parentSpanId":"{parent_span_id}"')
    out.append(
        f',"name":{_string(name)},"kind":{kind},'
        f'"startTimeUnixNano":"{start_ns}","endTimeUnixNano":"{end_ns}",'
        f'"attributes":{raw_attributes or encode_attributes(attributes)}'
    )
    if dropped_attributes:
        out.append(f',"droppedAttributesCount":{dropped_attributes}')
    if events:
        evs = ",".join(
            f'{{"timeUnixNano":"{t}","name":{_string(n)},"attributes":{encode_attributes(a)}}}'
            for n, t, a in events
        )
        out.append(f',"events":[{evs}]')
    if dropped_events:
        out.append(f',"droppedEventsCount":{dropped_events}')
    if links:
        lks = ",".join(
            f'{{"traceId":"{t}","spanId":"{s}","attributes":{encode_attributes(a)}}}'
            for t, s, a in links
        )
        out.append(f',"links":[{lks}]')
    if dropped_links:
        out.append(f',"droppedLinksCount":{dropped_links}')
    if status_code:
        msg = f',"message":{_string(status_message)}' if status_message else ""
        out.append(f',"status":{{"code":{status_code}{msg}}}')
    else:
        out.append(',"status":{}')
    out.append("}")
    return "".join(out)


def traces_data_line(
    resource_attrs: Mapping[str, Any],
    scope_name: str,
    spans_json: Iterable[str],
    scope_version: str = "",
) -> str:
    """One JSON Lines record (no trailing newline) holding already-encoded spans."""
    version = f',"version":{_string(scope_version)}' if scope_version else ""
    return (
        f'{{"resourceSpans":[{{"resource":{{"attributes":{encode_attributes(resource_attrs)}}},'
        f'"scopeSpans":[{{"scope":{{"name":{_string(scope_name)}{version}}},'
        f'"spans":[{",".join(spans_json)}]}}]}}]}}'
    )
