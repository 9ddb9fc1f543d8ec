"""Recording: spans made through `run_tracing` come back whole from the JSONL file, a
burst loses nothing, a crashed run keeps its trace, and OTLP/HTTP export delivers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import web
from opentelemetry import trace as otel
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from swarm._analysis import load_trace
from swarm._serve import serve_app
from swarm._tracing import semconv as sc
from swarm._tracing.setup import current_run, run_tracing, tracer


def _record_run(traces: Path, run_id: str = "r1", **kwargs: object) -> Path:
    with run_tracing(run_id, traces_dir=traces, **kwargs) as run:  # type: ignore[arg-type]
        assert current_run() is run
        t = tracer()
        with t.start_as_current_span(
            "invoke_workflow swarm", attributes={sc.OPERATION: sc.OP_WORKFLOW}
        ):
            with t.start_as_current_span(
                "invoke_agent coder",
                attributes={sc.OPERATION: sc.OP_AGENT, sc.AGENT_NAME: "coder"},
            ) as coder:
                with t.start_as_current_span(
                    "chat llama",
                    kind=otel.SpanKind.CLIENT,
                    attributes={
                        sc.OPERATION: sc.OP_CHAT,
                        sc.PROVIDER: "groq",
                        sc.REQUEST_MODEL: "llama",
                        sc.INPUT_TOKENS: 1200,
                        sc.OUTPUT_TOKENS: 80,
                        sc.TIER: "speed",
                        sc.FINISH_REASONS: ("stop",),
                        sc.COST_USD: 0.25,
                    },
                ) as chat:
                    chat.add_event(sc.FIRST_TOKEN_EVENT)
                with t.start_as_current_span(
                    "execute_tool run_tests", attributes={sc.TOOL_NAME: "run_tests"}
                ):
                    pass
            link = otel.Link(coder.get_span_context(), {sc.LINK_TYPE: sc.LINK_DEPENDS_ON})
            with t.start_as_current_span(
                "invoke_agent fixer", links=[link], attributes={sc.AGENT_NAME: "fixer"}
            ) as fixer:
                fixer.set_status(otel.Status(otel.StatusCode.ERROR, "tests still fail"))
    assert current_run() is None
    assert run.spans_written == 5 and run.dropped == 0
    return run.path


def test_round_trip_keeps_parents_links_events_and_attributes(tmp_path: Path) -> None:
    path = _record_run(tmp_path)
    assert path == tmp_path / "r1.jsonl"
    tr = load_trace(path)
    assert len(tr) == 5 and tr.run_id == "r1"
    by_name = {tr.name[i]: i for i in range(len(tr))}
    root, coder = by_name["invoke_workflow swarm"], by_name["invoke_agent coder"]
    chat, fixer = by_name["chat llama"], by_name["invoke_agent fixer"]
    assert tr.root == root and tr.parent[root] == -1
    assert tr.parent[coder] == root and tr.parent[chat] == coder
    assert tr.links == {fixer: [coder]}
    assert tr.role[chat] == "coder" and tr.role[fixer] == "fixer"
    assert tr.input_tokens[chat] == 1200 and tr.tier[chat] == "speed"
    assert 0 <= tr.ttft[chat] <= tr.duration_s(chat)  # from the First Token event
    assert tr.error[fixer] == "tests still fail"
    raw = tr.span_json(chat)
    assert raw["kind"] == 3  # CLIENT in OTLP numbering
    assert raw["attributes"][sc.FINISH_REASONS] == ["stop"]
    assert raw["attributes"][sc.COST_USD] == 0.25
    assert raw["events"][0]["name"] == sc.FIRST_TOKEN_EVENT


def test_file_follows_the_otlp_file_exporter_format(tmp_path: Path) -> None:
    lines = _record_run(tmp_path).read_text().splitlines()
    spans = [
        sp
        for line in lines
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for sp in ss["spans"]
    ]
    resource = json.loads(lines[0])["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "swarm"}} in resource
    for sp in spans:
        assert len(sp["traceId"]) == 32 and len(sp["spanId"]) == 16
        int(sp["traceId"], 16)
        assert isinstance(sp["startTimeUnixNano"], str) and isinstance(sp["kind"], int)
        assert "droppedAttributesCount" not in sp
    roots = [sp for sp in spans if sp["name"] == "invoke_workflow swarm"]
    assert "parentSpanId" not in roots[0]
    chat = next(sp for sp in spans if sp["name"] == "chat llama")
    tokens = next(a for a in chat["attributes"] if a["key"] == sc.INPUT_TOKENS)
    assert tokens["value"] == {"intValue": "1200"}


def test_burst_of_30k_spans_arrives_whole(tmp_path: Path) -> None:
    """Faster than the writer can keep up with (many times its batch): none dropped."""
    with run_tracing("burst", traces_dir=tmp_path) as run:
        t = tracer()
        for _ in range(30_000):
            t.start_span("execute_tool read_file").end()
    assert run.spans_written == 30_000 and run.dropped == 0
    count = sum(
        len(ss["spans"])
        for line in run.path.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
    )
    assert count == 30_000


def test_crashed_run_keeps_its_trace(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        from swarm._tracing.setup import run_tracing, tracer
        with run_tracing("crash", traces_dir=Path({str(tmp_path)!r})):
            t = tracer()
            root = t.start_span("invoke_workflow swarm")  # never ends: the run dies
            for i in range(500):
                t.start_span(f"execute_tool s{{i}}").end()
            time.sleep(1.5)
            os._exit(3)
    """)
    proc = subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
    assert proc.returncode == 3
    tr = load_trace(tmp_path / "crash.jsonl")
    assert len(tr) == 500


@pytest.fixture
async def otlp_server() -> AsyncIterator[tuple[str, list[ExportTraceServiceRequest]]]:
    received: list[ExportTraceServiceRequest] = []

    async def handle(request: web.Request) -> web.Response:
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(await request.read())
        received.append(msg)
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", handle)
    async with serve_app(app) as url:
        yield url, received


async def test_otlp_export_reaches_an_http_endpoint(
    tmp_path: Path,
    otlp_server: tuple[str, list[ExportTraceServiceRequest]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, received = otlp_server
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    # the exporter is synchronous: record in a worker thread so the server can answer
    await anyio.to_thread.run_sync(lambda: _record_run(tmp_path, "otlp"))
    spans = [
        sp
        for msg in received
        for rs in msg.resource_spans
        for ss in rs.scope_spans
        for sp in ss.spans
    ]
    assert sorted(sp.name for sp in spans) == sorted(
        [
            "invoke_workflow swarm",
            "invoke_agent coder",
            "chat llama",
            "execute_tool run_tests",
            "invoke_agent fixer",
        ]
    )
    fixer = next(sp for sp in spans if sp.name == "invoke_agent fixer")
    coder = next(sp for sp in spans if sp.name == "invoke_agent coder")
    assert fixer.links[0].span_id == coder.span_id
    assert (tmp_path / "otlp.jsonl").is_file()  # the file is written as well


def test_genai_client_metrics_are_derived_from_chat_spans(tmp_path: Path) -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    with run_tracing("m", traces_dir=tmp_path, metric_reader=reader) as run:
        assert run.meter_provider is not None
        with tracer().start_as_current_span(
            "chat llama",
            attributes={
                sc.OPERATION: sc.OP_CHAT,
                sc.PROVIDER: "groq",
                sc.INPUT_TOKENS: 100,
                sc.OUTPUT_TOKENS: 7,
                sc.TIME_TO_FIRST_CHUNK: 0.05,
            },
        ):
            pass
        with tracer().start_as_current_span("execute_tool x"):
            pass
        data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {
        m.name: list(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert points["gen_ai.client.operation.duration"][0].count == 1
    usage = {p.attributes["gen_ai.token.type"]: p.sum for p in points["gen_ai.client.token.usage"]}
    assert usage == {"input": 100, "output": 7}
    assert points["gen_ai.client.operation.time_to_first_chunk"][0].sum == pytest.approx(0.05)


def test_a_partial_last_line_is_skipped(tmp_path: Path) -> None:
    path = _record_run(tmp_path)
    whole = path.read_text()
    path.write_text(whole + whole[: len(whole) // 2])  # a second copy cut mid-line
    tr = load_trace(path)
    assert tr.truncated and len(tr) == 5
