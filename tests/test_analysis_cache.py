"""load_trace: the column cache beside a trace, and the loader's columns against the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from swarm._analysis import Trace, load_trace
from swarm._analysis._colcache import cache_path
from swarm._analysis.known import build_fanout, span_id
from swarm._analysis.synthetic import write_synthetic_trace

_COLUMNS = (
    "span_id",
    "name",
    "op",
    "role",
    "agent",
    "tier",
    "provider",
    "model",
    "wait_kind",
    "tool",
    "error",
    "parent",
    "kind",
    "start",
    "end",
    "status",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "ttft",
    "cost",
    "attempts",
    "tests_failed",
    "cached_input_tokens",
    "route_reason",
    "children",
    "links",
    "roots",
    "root",
    "run_id",
    "trace_ids",
    "truncated",
)


def _same(a: Trace, b: Trace) -> None:
    for col in _COLUMNS:
        assert getattr(a, col) == getattr(b, col), col


def test_second_load_comes_from_the_cache_and_matches(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_synthetic_trace(path, agents=40, calls_per_agent=3, seed=4)
    parsed = load_trace(path, cache=False)
    assert not cache_path(path).exists()
    first = load_trace(path)
    assert cache_path(path).exists()
    cached = load_trace(path)
    _same(parsed, first)
    _same(parsed, cached)
    # span_json still reaches the file through the cached line offsets
    last = len(cached) - 1
    assert cached.span_json(last) == parsed.span_json(last)
    assert cached.span(last) == parsed.span(last)


def test_cache_follows_the_trace_file(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "f.jsonl")
    before = load_trace(known.path)
    assert len(before) == len(known.specs)
    # the run goes on: another line of spans is appended, so size and mtime change
    lines = known.path.read_text().splitlines()
    doc = json.loads(lines[0])
    extra = dict(doc["resourceSpans"][0]["scopeSpans"][0]["spans"][-1])
    extra["spanId"] = "00000000000000ff"
    extra["parentSpanId"] = span_id(0)
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"] = [extra]
    with known.path.open("a") as fh:
        fh.write(json.dumps(doc) + "\n")
    after = load_trace(known.path)
    assert len(after) == len(before) + 1
    assert after.span_id[-1] == "00000000000000ff"
    assert after.parent[-1] == 0


def test_a_damaged_or_stale_cache_is_ignored_and_rewritten(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "f.jsonl")
    good = load_trace(known.path, cache=False)
    cols = cache_path(known.path)
    for damage in (b"", b"SWARMCOLS 3\n\x05", b"not a cache at all"):
        cols.write_bytes(damage)
        _same(good, load_trace(known.path))
        assert cols.read_bytes().startswith(b"SWARMCOLS 3\n")
    # a cache cut short is refused too
    data = cols.read_bytes()
    cols.write_bytes(data[:-9])
    _same(good, load_trace(known.path))
    # a cache for another version of the file (same size, other mtime) is not used
    st = known.path.stat()
    os.utime(known.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    _same(good, load_trace(known.path))


def test_a_truncated_trace_is_not_cached(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_synthetic_trace(path, agents=3, calls_per_agent=2)
    text = path.read_bytes()
    path.write_bytes(text + text[: len(text) // 3])  # a run killed mid-write
    tr = load_trace(path)
    assert tr.truncated
    assert not cache_path(path).exists()


def test_ids_that_are_not_plain_hex_survive_the_cache(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "f.jsonl")
    doc = json.loads(known.path.read_text())
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "odd-id"
    known.path.write_text(json.dumps(doc) + "\n")
    parsed = load_trace(known.path, cache=False)
    load_trace(known.path)
    cached = load_trace(known.path)
    assert "odd-id" in cached.span_id
    _same(parsed, cached)


def test_a_span_reads_the_same_twice_events_and_links_too(tmp_path: Path) -> None:
    from swarm._tracing.setup import run_tracing, tracer

    with run_tracing("twice", traces_dir=tmp_path) as run:
        with tracer().start_as_current_span("chat m") as span:
            span.add_event("retry", {"attempt": 2})
    trace = load_trace(run.path)
    first, second = trace.span_json(0), trace.span_json(0)  # the line is cached in between
    assert first == second
    assert first["events"][0]["attributes"] == {"attempt": 2}


def test_scorecard_columns_match_the_spans_attributes(tmp_path: Path) -> None:
    """The scorecard reads prompt-cache hits and route reasons from columns, not the file."""
    from swarm._tracing import semconv as sc

    path = tmp_path / "s.jsonl"
    write_synthetic_trace(path, agents=20, calls_per_agent=3, seed=2)
    first, *rest = path.read_text().splitlines(keepends=True)
    doc = json.loads(first)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    chat = next(s for s in spans if s["name"].startswith("chat "))
    chat["attributes"] += [
        {"key": sc.CACHED_INPUT_TOKENS, "value": {"intValue": "321"}},
        {"key": sc.ROUTE_REASON, "value": {"stringValue": "fastest; 2 candidates"}},
    ]
    path.write_text(json.dumps(doc) + "\n" + "".join(rest))
    load_trace(path)
    tr = load_trace(path)  # from the cache
    chats = [i for i in range(len(tr)) if tr.op[i] == sc.OP_CHAT]
    for i in chats:
        attrs = tr.attributes(i)
        assert tr.cached_input_tokens[i] == int(attrs.get(sc.CACHED_INPUT_TOKENS) or 0)
        assert tr.route_reason[i] == str(attrs.get(sc.ROUTE_REASON) or "")
    assert sum(tr.cached_input_tokens) == 321
    assert [r for r in tr.route_reason if r] == ["fastest; 2 candidates"]
