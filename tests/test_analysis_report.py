"""Summary, diff, pytest assertions, Chrome export and OTLP replay of saved traces."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from swarm._analysis import diff, export_chrome, load_trace, send_otlp, summarize
from swarm._analysis.assertions import (
    assert_critical_path_under,
    assert_p95_call_latency_under,
    assert_rate_limit_waits_under,
)
from swarm._analysis.known import build_chain, build_fanout
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._serve import serve_app
from swarm.catalog import find_profile


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tr") / "s.jsonl"
    write_synthetic_trace(path, agents=40, calls_per_agent=5, seed=11)
    return path


def test_summary_groups_and_critical_path(synthetic: Path) -> None:
    tr = load_trace(synthetic)
    s = summarize(tr)
    json.dumps(s)  # plain data
    chats = sum(1 for op in tr.op if op == "chat")
    assert s["spans"] == len(tr) and s["totals"]["calls"] == chats
    assert sum(g["calls"] for g in s["by_tier"].values()) == chats
    assert set(s["by_tier"]) == {"speed", "reasoning"}
    assert {"planner", "coder"} <= set(s["by_role"])
    speed = s["by_tier"]["speed"]
    assert 0 < speed["ttft_p50_s"] <= speed["ttft_p95_s"] <= speed["ttft_p99_s"]
    assert speed["tokens_per_s"] > 0
    model = s["by_model"]["groq/llama-3.3-70b"]
    assert model["profile_tokens_per_s"] == 840  # from the catalog
    assert sum(s["ledger"].values()) == pytest.approx(s["wall_s"])
    cp = s["critical_path"]
    assert cp["steps"] == len(cp["span_ids"]) > 0
    assert sum(cp["ledger"].values()) == pytest.approx(s["wall_s"])
    savings = [r["saving_s"] for r in cp["top_savings"]]
    assert savings == sorted(savings, reverse=True)


def test_summary_suggests_the_faster_provider(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "f.jsonl")
    s = summarize(load_trace(known.path))
    top = s["critical_path"]["top_savings"]
    # coder 0's 4 s call on groq (100 tokens out) is the one to move; the planner's 2 s
    # kimi-k2.6 call would think for 5,000 tokens anywhere, so it saves nothing
    assert [r["span_id"] for r in top] == [known.critical[1], known.critical[2]]
    assert top[0]["faster"] == "cerebras/llama-3.3-70b"
    expected = find_profile("cerebras/llama-3.3-70b").expected_s(1000, 100)
    assert top[0]["saving_s"] == pytest.approx(4.0 - expected)


def test_diff_puts_biggest_changes_first(tmp_path: Path) -> None:
    a = load_trace(build_chain(tmp_path / "a.jsonl", steps=3, chat_s=2.0).path)
    b = load_trace(build_chain(tmp_path / "b.jsonl", steps=3, chat_s=5.0).path)
    d = diff(a, b)
    assert d["wall_s"]["a"] == 9.0 and d["wall_s"]["b"] == 18.0 and d["wall_s"]["delta"] == 9.0
    assert d["critical_path_ledger"][0]["category"] == "decode"
    assert d["critical_path_ledger"][0]["delta"] == pytest.approx(9.0)
    deltas = [abs(c["delta_s"]) for c in d["biggest_changes"]]
    assert deltas == sorted(deltas, reverse=True) and deltas[0] == pytest.approx(9.0)
    json.dumps(d)


def test_assertions_pass_and_explain_failures(tmp_path: Path) -> None:
    known = build_chain(tmp_path / "c.jsonl", steps=3, chat_s=2.0, tool_s=1.0)
    assert_critical_path_under(known.path, 10)
    assert_p95_call_latency_under(known.path, 2.5, tier="speed")
    assert_rate_limit_waits_under(known.path, 0.1)
    with pytest.raises(AssertionError, match=r"critical path took 9.00 s, budget 5.00 s"):
        assert_critical_path_under(known.path, 5)
    with pytest.raises(AssertionError, match=r"p95 call latency \(tier 'speed', 3 calls\)"):
        assert_p95_call_latency_under(load_trace(known.path), 1.0, tier="speed")


def test_rate_limit_assertion_names_the_roles(synthetic: Path) -> None:
    with pytest.raises(AssertionError, match=r"rate-limit/backoff waits .* By role: coder"):
        assert_rate_limit_waits_under(synthetic, 0.001)


def test_chrome_export(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "f.jsonl")
    out = export_chrome(load_trace(known.path))
    complete = [e for e in out["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(known.specs)
    root = next(e for e in complete if e["name"] == "invoke_workflow swarm")
    assert root["ts"] == 0 and root["dur"] == pytest.approx(known.wall_s * 1e6)
    lanes = {e["args"]["name"] for e in out["traceEvents"] if e["name"] == "thread_name"}
    assert len(lanes) == 6  # run + planner + 3 coders + fixer
    assert any(e["ph"] == "i" for e in out["traceEvents"])  # first-token marks


@pytest.fixture
async def busy_collector() -> AsyncIterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """An OTLP/HTTP endpoint that answers 429 to every other request (back-pressure)."""
    received: list[ExportTraceServiceRequest] = []
    calls = [0]

    async def handle(request: web.Request) -> web.Response:
        calls[0] += 1
        if calls[0] % 2:
            return web.Response(status=429, headers={"Retry-After": "0"})
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(await request.read())
        received.append(msg)
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", handle)
    async with serve_app(app) as url:
        yield url, received


async def test_send_otlp_replays_the_file_through_back_pressure(
    synthetic: Path,
    busy_collector: tuple[str, list[ExportTraceServiceRequest]],
) -> None:
    url, received = busy_collector
    tr = load_trace(synthetic)
    sent = await send_otlp(synthetic, url, backoff_s=0.01)
    spans = [
        sp for m in received for rs in m.resource_spans for ss in rs.scope_spans for sp in ss.spans
    ]
    assert sent == len(spans) == len(tr)
    assert {sp.span_id.hex() for sp in spans} == set(tr.span_id)
    linked = [sp for sp in spans if sp.links]
    assert len(linked) == len(tr.links)
