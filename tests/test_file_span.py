"""`FileSpan`: when the run's trace file is the only place spans go, the hot path's spans
skip the SDK and are written straight to it, exactly as the SDK's span would be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.types import AttributeValue

from swarm._routing.router import Router
from swarm._tracing import semconv as sc
from swarm._tracing.file_span import FileSpan, SharedAttributes
from swarm._tracing.setup import run_tracing, span_clock, start_span, tracer
from swarm.config import load_config
from swarm.messages import ChatRequest, ChatResult, Message, Timing, Usage
from swarm.model import FirstTokenCallback, PieceSink


def _spans(path: Path) -> list[dict[str, Any]]:
    return [
        span
        for line in path.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]


def _same_parts(span: dict[str, Any]) -> dict[str, Any]:
    """A span's JSON without what differs between two spans made alike (ids, times)."""
    drop = {"spanId", "startTimeUnixNano", "endTimeUnixNano"}
    out = {k: v for k, v in span.items() if k not in drop}
    out["events"] = [{k: v for k, v in e.items() if k != "timeUnixNano"} for e in out["events"]]
    return out


def _use(span: otel.Span, link_to: otel.SpanContext) -> None:
    """What the router does to a chat span, and the rest of the API."""
    span.add_event(sc.FIRST_TOKEN_EVENT)
    span.add_event("retry", {"attempt": 2})
    span.set_attribute(sc.ERROR_TYPE, "500")
    span.set_attributes({sc.OUTPUT_TOKENS: 7, sc.FINISH_REASONS: ("stop",), sc.COST_USD: 0.5})
    span.add_link(link_to, {sc.LINK_TYPE: sc.LINK_DEPENDS_ON})
    span.update_name("chat renamed")
    try:
        raise ValueError("bad reply")
    except ValueError as exc:
        span.record_exception(exc, {"where": "here"})
    span.set_status(otel.Status(otel.StatusCode.ERROR, "HTTP 500: down"))
    span.end()
    span.set_attribute(sc.INPUT_TOKENS, 1)  # after the end: ignored, as by the SDK


def _attrs() -> dict[str, AttributeValue]:
    return {sc.OPERATION: sc.OP_CHAT, sc.REQUEST_MODEL: "m", sc.ATTEMPTS: 1, sc.SIMULATED: False}


def test_a_file_span_is_written_as_the_sdk_writes_its_span(tmp_path: Path) -> None:
    with run_tracing("r", traces_dir=tmp_path) as run:
        with tracer().start_as_current_span("invoke_agent coder") as parent:
            fast = start_span("chat m", _attrs(), otel.SpanKind.CLIENT)
            assert isinstance(fast, FileSpan)
            _use(fast, parent.get_span_context())
            sdk = tracer().start_span("chat m", kind=otel.SpanKind.CLIENT, attributes=_attrs())
            assert not isinstance(sdk, FileSpan)
            _use(sdk, parent.get_span_context())
    spans = {s["spanId"]: s for s in _spans(run.path)}
    ours = spans[f"{fast.get_span_context().span_id:016x}"]
    theirs = spans[f"{sdk.get_span_context().span_id:016x}"]
    assert _same_parts(ours) == _same_parts(theirs)
    assert ours["parentSpanId"] == f"{parent.get_span_context().span_id:016x}"
    assert fast.get_span_context().trace_flags == sdk.get_span_context().trace_flags
    assert run.spans_written == 3


def test_shared_attributes_are_written_once_and_a_span_may_set_one_again(
    tmp_path: Path,
) -> None:
    shared = SharedAttributes({sc.OPERATION: sc.OP_CHAT, sc.TIER: "speed", sc.SIMULATED: True})
    with run_tracing("r", traces_dir=tmp_path) as run:
        plain = start_span("chat a", {sc.ATTEMPTS: 1}, otel.SpanKind.CLIENT, shared)
        plain.end()
        again = start_span("chat b", {sc.ATTEMPTS: 2}, otel.SpanKind.CLIENT, shared)
        again.set_attribute(sc.TIER, "reasoning")
        again.end()
        run.provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        sdk = start_span("chat c", {sc.ATTEMPTS: 3}, otel.SpanKind.CLIENT, shared)
        sdk.set_attribute(sc.TIER, "reasoning")
        sdk.end()
    assert isinstance(plain, FileSpan) and isinstance(again, FileSpan)
    assert not isinstance(sdk, FileSpan)
    attrs = {s["name"]: {a["key"]: a["value"] for a in s["attributes"]} for s in _spans(run.path)}
    assert attrs["chat a"] == {
        sc.OPERATION: {"stringValue": sc.OP_CHAT},
        sc.TIER: {"stringValue": "speed"},
        sc.SIMULATED: {"boolValue": True},
        sc.ATTEMPTS: {"intValue": "1"},
    }
    assert attrs["chat b"][sc.TIER] == attrs["chat c"][sc.TIER] == {"stringValue": "reasoning"}
    assert len(_spans(run.path)[1]["attributes"]) == 4  # the tier once, with its new value


def test_a_file_span_is_the_parent_of_spans_started_under_it(tmp_path: Path) -> None:
    with run_tracing("r", traces_dir=tmp_path) as run:
        span = start_span("chat m", _attrs(), otel.SpanKind.CLIENT)
        token = otel_context.attach(otel.set_span_in_context(span))
        try:
            with tracer().start_as_current_span("execute_tool read_file") as child:
                pass
        finally:
            otel_context.detach(token)
        span.end()
    ctx = span.get_span_context()
    assert isinstance(span, FileSpan) and ctx.trace_flags.sampled
    assert child.get_span_context().trace_id == ctx.trace_id
    by_name = {s["name"]: s for s in _spans(run.path)}
    assert "parentSpanId" not in by_name["chat m"]  # a root: no parent was current
    assert by_name["execute_tool read_file"]["parentSpanId"] == f"{ctx.span_id:016x}"


def test_a_file_span_reads_the_span_clock(tmp_path: Path) -> None:
    with run_tracing("r", traces_dir=tmp_path) as run, span_clock(lambda: 5_000):
        span = start_span("chat m", _attrs(), otel.SpanKind.CLIENT)
        span.add_event(sc.FIRST_TOKEN_EVENT)
        span.end()
    (written,) = _spans(run.path)
    assert written["startTimeUnixNano"] == written["endTimeUnixNano"] == "5000"
    assert written["events"][0]["timeUnixNano"] == "5000"


def test_spans_are_the_sdks_when_the_file_is_not_the_only_reader(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    with run_tracing("r", traces_dir=tmp_path) as run:
        run.provider.add_span_processor(SimpleSpanProcessor(exporter))
        span = start_span("chat m", _attrs(), otel.SpanKind.CLIENT)
        span.end()
    assert not isinstance(span, FileSpan)
    assert [s.name for s in exporter.get_finished_spans()] == ["chat m"]
    assert [s["name"] for s in _spans(run.path)] == ["chat m"]


class _Answers:
    """A provider answering every call at once, as a server would."""

    kind = "openai"
    name = "p"
    address = "127.0.0.1:8000"

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
        on_delta: PieceSink | None = None,
    ) -> ChatResult:
        if on_first_token is not None:
            on_first_token()
        return ChatResult(
            message=Message.assistant("ok"),
            usage=Usage(input_tokens=12, output_tokens=3),
            timing=Timing(ttft_s=0.01, duration_s=0.02),
            model=model,
        )

    async def aclose(self) -> None:
        return None


async def test_the_routers_chat_span_is_the_same_either_way(tmp_path: Path) -> None:
    path = tmp_path / "swarm.toml"
    path.write_text(
        '[providers.p]\nkind = "openai"\nbase_url = "http://127.0.0.1:8000/v1"\n'
        '[tiers.speed]\nmodels = ["p/m"]\n'
    )
    config = load_config(path, env={})
    request = ChatRequest(messages=[Message.user("hi")], max_tokens=10)
    written = []
    for run_id, extra in (("file", False), ("sdk", True)):
        with run_tracing(run_id, traces_dir=tmp_path) as run:
            if extra:
                run.provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
            async with Router(config, providers={"p": _Answers()}, env={}) as router:
                await router.chat(request, tier="speed", role="coder")
        (span,) = _spans(run.path)
        del span["traceId"]  # each a root: a trace of its own
        written.append(_same_parts(span))
    assert written[0] == written[1]
    assert {a["key"] for a in written[0]["attributes"]} >= {
        sc.OPERATION,
        sc.PROVIDER,
        sc.REQUEST_MODEL,
        sc.RESPONSE_MODEL,
        sc.INPUT_TOKENS,
        sc.OUTPUT_TOKENS,
        sc.FINISH_REASONS,
        sc.TIME_TO_FIRST_CHUNK,
        sc.SERVER_ADDRESS,
        sc.TIER,
        sc.COST_USD,
    }
    assert [e["name"] for e in written[0]["events"]] == [sc.FIRST_TOKEN_EVENT]
