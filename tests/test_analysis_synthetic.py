"""The synthetic trace writer produces valid, realistic, reproducible runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm._analysis import load_trace
from swarm._analysis.synthetic import SyntheticRun, write_synthetic_trace
from swarm._tracing import semconv as sc


def test_synthetic_run_is_valid_and_complete(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    n = write_synthetic_trace(path, agents=120, calls_per_agent=6, seed=5)
    tr = load_trace(path)
    assert len(tr) == n and tr.run_id == "synthetic-5" and len(tr.trace_ids) == 1
    assert tr.name[tr.root] == "invoke_workflow swarm" and tr.roots == [tr.root]
    assert all(tr.parent[i] >= 0 for i in range(n) if i != tr.root)
    assert len(set(tr.span_id)) == n
    kinds = {tr.wait_kind[i] for i in range(n) if tr.op[i] == "wait"}
    assert kinds == {
        sc.WAIT_QUEUE,
        sc.WAIT_RATE_LIMIT,
        sc.WAIT_BACKOFF,
        sc.WAIT_HEDGE,
        sc.WAIT_DEPENDENCY,
        sc.WAIT_MERGE,
    }
    roles = {tr.agent[i] for i in range(n) if tr.op[i] == sc.OP_AGENT}
    assert roles == {"planner", "coder", "fixer"}
    fixers = [i for i in range(n) if tr.agent[i] == "fixer"]
    assert fixers and all(tr.agent[tr.links[f][0]] == "coder" for f in fixers)
    chats = [i for i in range(n) if tr.op[i] == sc.OP_CHAT]
    assert all(0 < tr.ttft[i] < tr.duration_s(i) and tr.cost[i] > 0 for i in chats)
    assert {tr.tier[i] for i in chats} == {"speed", "reasoning"}
    raw = tr.span_json(chats[0])
    assert raw["events"][0]["name"] == sc.FIRST_TOKEN_EVENT
    # children lie within their parents
    assert all(
        tr.start[tr.parent[i]] <= tr.start[i] and tr.end[i] <= tr.end[tr.parent[i]]
        for i in range(n)
        if i != tr.root
    )


def test_synthetic_is_reproducible_and_batched(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_synthetic_trace(a, agents=100, seed=1)
    write_synthetic_trace(b, SyntheticRun(agents=100, seed=1))
    assert a.read_bytes() == b.read_bytes()
    lines = a.read_text().splitlines()
    sizes = [len(json.loads(x)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for x in lines]
    assert sizes[:-1] == [1000] * (len(sizes) - 1)


def test_synthetic_keyword_options_override_the_run(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_synthetic_trace(a, SyntheticRun(agents=5, seed=2, max_agents=2), agents=3)
    write_synthetic_trace(b, SyntheticRun(agents=3, seed=2, max_agents=2))
    assert a.read_bytes() == b.read_bytes()
    with pytest.raises(TypeError):
        write_synthetic_trace(a, agent=3)  # a typo is an error, not a default
