"""Critical path on generated traces whose answer is known."""

from __future__ import annotations

from pathlib import Path

from swarm._analysis import critical_path, load_trace
from swarm._analysis.known import SpanSpec, build_chain, build_fanout, write_spans
from swarm._analysis.synthetic import write_synthetic_trace


def test_chain_every_step_is_critical(tmp_path: Path) -> None:
    known = build_chain(tmp_path / "chain.jsonl", steps=4)
    path = critical_path(load_trace(known.path))
    assert [s.span_id for s in path] == known.critical
    assert [s.op for s in path] == ["chat", "execute_tool"] * 4


def test_fanout_follows_depends_on_link_over_timing(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "fan.jsonl", durations=(4.0, 6.0, 5.0), links=True)
    path = critical_path(load_trace(known.path))
    assert [s.span_id for s in path] == known.critical
    assert [s.role for s in path] == ["planner", "coder", "fixer"]


def test_fanout_without_links_uses_last_finisher(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "fan.jsonl", durations=(4.0, 6.0, 5.0), links=False)
    tr = load_trace(known.path)
    path = critical_path(tr)
    assert [s.span_id for s in path] == known.critical
    assert path[1].duration_s == 6.0  # the longest coder


def test_back_to_back_steps_are_kept(tmp_path: Path) -> None:
    """A step that starts exactly when the previous ends (Jaeger's strict `<` drops it)."""
    specs = [
        SpanSpec("invoke_workflow swarm", 0, 3),
        SpanSpec("execute_tool a", 0, 1, parent=0),
        SpanSpec("execute_tool b", 1, 2, parent=0),
        SpanSpec("execute_tool c", 2, 3, parent=0),
    ]
    write_spans(tmp_path / "t.jsonl", specs)
    path = critical_path(load_trace(tmp_path / "t.jsonl"))
    assert [s.name for s in path] == ["execute_tool a", "execute_tool b", "execute_tool c"]


def test_skew_tolerance_and_overlapping_sibling(tmp_path: Path) -> None:
    specs = [
        SpanSpec("invoke_workflow swarm", 0, 10),
        SpanSpec("execute_tool first", 0, 5.0005, parent=0),  # ends 0.5 ms after next starts
        SpanSpec("execute_tool overlap", 1, 7, parent=0),  # overlaps `last`: not a predecessor
        SpanSpec("execute_tool last", 5, 10, parent=0),
    ]
    write_spans(tmp_path / "t.jsonl", specs)
    path = critical_path(load_trace(tmp_path / "t.jsonl"))
    assert [s.name for s in path] == ["execute_tool first", "execute_tool last"]


def test_linked_wait_is_replaced_by_the_awaited_span(tmp_path: Path) -> None:
    specs = [
        SpanSpec("invoke_workflow swarm", 0, 10),
        SpanSpec("invoke_agent coder", 0, 6, parent=0, attrs={"gen_ai.agent.name": "coder"}),
        SpanSpec("execute_tool build", 0, 6, parent=1),
        SpanSpec("invoke_agent tester", 0, 10, parent=0),
        SpanSpec(
            "swarm.wait dependency",
            0,
            6,
            parent=3,
            attrs={"swarm.wait.kind": "dependency"},
            links=[1],
        ),
        SpanSpec("execute_tool run_tests", 6, 10, parent=3),
    ]
    write_spans(tmp_path / "t.jsonl", specs)
    path = critical_path(load_trace(tmp_path / "t.jsonl"))
    assert [s.name for s in path] == ["execute_tool build", "execute_tool run_tests"]


def test_long_chain_and_wide_fanout_do_not_recurse(tmp_path: Path) -> None:
    n = 20_000
    specs = [SpanSpec("invoke_workflow swarm", 0, n)]
    specs += [SpanSpec(f"execute_tool s{k}", k, k + 1, parent=0) for k in range(n)]
    write_spans(tmp_path / "wide.jsonl", specs)
    assert len(critical_path(load_trace(tmp_path / "wide.jsonl"))) == n
    # nested 2,000 deep: each span's only child starts when it does
    deep = [SpanSpec("invoke_workflow swarm", 0, 1)]
    deep += [SpanSpec(f"s{k}", 0, 1, parent=k) for k in range(2_000)]
    write_spans(tmp_path / "deep.jsonl", deep)
    assert [s.name for s in critical_path(load_trace(tmp_path / "deep.jsonl"))] == ["s1999"]


def test_synthetic_run_path_is_ordered_and_within_the_run(tmp_path: Path) -> None:
    write_synthetic_trace(tmp_path / "s.jsonl", agents=40, calls_per_agent=4, seed=3)
    tr = load_trace(tmp_path / "s.jsonl")
    path = critical_path(tr)
    assert path
    ends = [s.end_ns for s in path]
    assert ends == sorted(ends)
    assert all(tr.start_ns <= s.start_ns <= s.end_ns <= tr.end_ns for s in path)
    assert all(s.op in ("chat", "execute_tool", "wait") for s in path)
