"""The latency ledger adds up to the wall-clock and attributes time to the right causes."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm._analysis import critical_path, ledger, load_trace
from swarm._analysis.known import SpanSpec, build_chain, build_fanout, write_spans
from swarm._analysis.ledger import CATEGORIES
from swarm._analysis.synthetic import write_synthetic_trace


def _nonzero(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in d.items() if abs(v) > 1e-9}


def test_chain_ledger_is_exact(tmp_path: Path) -> None:
    known = build_chain(tmp_path / "c.jsonl", steps=3, chat_s=2.0, ttft_s=0.5, tool_s=1.0)
    tr = load_trace(known.path)
    assert _nonzero(ledger(tr)) == known.ledger
    assert _nonzero(ledger(tr, critical_path(tr))) == known.ledger
    assert sum(ledger(tr).values()) == pytest.approx(tr.wall_s)


def test_fanout_ledger_shares_parallel_time(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "f.jsonl")
    tr = load_trace(known.path)
    assert _nonzero(ledger(tr)) == known.ledger
    on_path = ledger(tr, critical_path(tr))
    assert sum(on_path.values()) == pytest.approx(known.wall_s)
    # planner 2 s + coder 0 (4 s) + fixer 3 s are steps; the rest is orchestration
    assert on_path["orchestration"] == pytest.approx(known.wall_s - 9.0)


def test_waits_tools_and_gaps(tmp_path: Path) -> None:
    specs = [
        SpanSpec("invoke_workflow swarm", 0, 10),
        SpanSpec("invoke_agent coder", 0, 10, parent=0),
        SpanSpec("swarm.wait queue", 0, 1, parent=1, attrs={"swarm.wait.kind": "queue"}),
        SpanSpec("swarm.wait rate_limit", 1, 2, parent=1, attrs={"swarm.wait.kind": "rate_limit"}),
        SpanSpec("chat m", 2, 5, parent=1, ttft=1.0, attrs={"gen_ai.operation.name": "chat"}),
        SpanSpec(
            "execute_tool read_file",
            5,
            6,
            parent=1,
            attrs={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file"},
        ),
        SpanSpec(
            "execute_tool run_tests",
            7,
            9,
            parent=1,
            attrs={"gen_ai.tool.name": "run_tests", "swarm.tests.failed": 0},
        ),
        SpanSpec("swarm.wait merge", 9, 9.5, parent=1, attrs={"swarm.wait.kind": "merge"}),
    ]
    write_spans(tmp_path / "t.jsonl", specs)
    tr = load_trace(tmp_path / "t.jsonl")
    assert _nonzero(ledger(tr)) == {
        "queue": 1,
        "rate_limit": 1,
        "ttft": 1,
        "decode": 2,
        "tools": 1,
        "tests": 2,
        "merge": 0.5,
        "orchestration": 1.5,
    }
    assert set(ledger(tr)) == set(CATEGORIES)


def test_work_outranks_waits_when_parallel(tmp_path: Path) -> None:
    specs = [
        SpanSpec("invoke_workflow swarm", 0, 4),
        SpanSpec("swarm.wait queue", 0, 4, parent=0, attrs={"swarm.wait.kind": "queue"}),
        SpanSpec("execute_tool a", 0, 2, parent=0),
        SpanSpec("execute_tool b", 1, 3, parent=0),
    ]
    write_spans(tmp_path / "t.jsonl", specs)
    assert _nonzero(ledger(load_trace(tmp_path / "t.jsonl"))) == {"tools": 3, "queue": 1}


def test_synthetic_ledgers_sum_to_wall_clock(tmp_path: Path) -> None:
    write_synthetic_trace(tmp_path / "s.jsonl", agents=60, calls_per_agent=5, seed=7)
    tr = load_trace(tmp_path / "s.jsonl")
    for led in (ledger(tr), ledger(tr, critical_path(tr))):
        assert sum(led.values()) == pytest.approx(tr.wall_s, rel=1e-9)
        assert all(v >= 0 for v in led.values())


def test_a_call_whose_first_token_never_came_is_all_first_token_wait(tmp_path: Path) -> None:
    """A slow local server's prompt read that timed out: 360 s of waiting, 0 of decode."""
    specs = [
        SpanSpec("invoke_workflow swarm", 0, 400),
        SpanSpec("invoke_agent planner", 0, 400, parent=0),
        SpanSpec("chat m", 0, 360, parent=1, attrs={"gen_ai.operation.name": "chat"}),
        SpanSpec("chat m", 360, 400, parent=1, ttft=30.0, attrs={"gen_ai.operation.name": "chat"}),
    ]
    write_spans(tmp_path / "t.jsonl", specs)
    assert _nonzero(ledger(load_trace(tmp_path / "t.jsonl"))) == {"ttft": 390, "decode": 10}
