"""Chrome/Perfetto export: every thread's slices nest as a stack, threads are named.

`nesting_errors` is the check Perfetto and speedscope make when they read the file: on one
thread, each slice either contains the next or ends before it starts (a partial overlap
is what Perfetto cannot draw and what speedscope reports as a stack error), and a span
drawn on its parent's thread lies inside its parent.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from swarm._analysis.export import export_chrome
from swarm._analysis.known import SpanSpec, write_spans
from swarm._analysis.loader import load_trace
from swarm._analysis.model import Trace
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm._tracing import semconv as sc

DEMO = Path(__file__).parent.parent / "traces" / "examples" / "demo.jsonl"
EPS_US = 1e-3  # a nanosecond: what float microseconds can round away


def nesting_errors(doc: dict[str, Any], trace: Trace | None = None) -> list[str]:
    """What a strict reader would complain about in an exported trace (empty: none)."""
    events = doc["traceEvents"]
    names = {(e["pid"], e.get("tid")) for e in events if e["name"] == "thread_name"}
    errors = [] if any(e["name"] == "process_name" for e in events) else ["no process name"]
    threads: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            threads[(e["pid"], e["tid"])].append(e)
        elif e["ph"] != "M" and (e["pid"], e["tid"]) not in names:
            errors.append(f"{e['name']} on a thread with no name")
    parent_of = _parents(trace) if trace is not None else {}
    for key, slices in threads.items():
        if key not in names:
            errors.append(f"thread {key} has no name")
        errors += _stack_errors(key, slices, parent_of)
    return errors


def _parents(tr: Trace) -> dict[str, str]:
    return {tr.span_id[i]: tr.span_id[tr.parent[i]] for i in range(len(tr)) if tr.parent[i] >= 0}


def _stack_errors(
    key: tuple[int, int], slices: list[dict[str, Any]], parent_of: dict[str, str]
) -> list[str]:
    """Slices of one thread as a stack: each contains the next or ends before it."""
    errors: list[str] = []
    where = {s["id"]: s for s in slices}
    stack: list[dict[str, Any]] = []
    for s in sorted(slices, key=lambda s: (s["ts"], -s["dur"])):
        end = s["ts"] + s["dur"]
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= s["ts"] + EPS_US:
            stack.pop()
        if stack and end > stack[-1]["ts"] + stack[-1]["dur"] + EPS_US:
            errors.append(f"thread {key}: {s['name']} overlaps {stack[-1]['name']} partly")
        parent = where.get(parent_of.get(s["id"], ""))
        if parent is not None and not (
            parent["ts"] <= s["ts"] + EPS_US and end <= parent["ts"] + parent["dur"] + EPS_US
        ):
            errors.append(f"thread {key}: {s['name']} is outside its parent {parent['name']}")
        if stack and stack[-1] is not parent:
            errors.append(f"thread {key}: {s['name']} is drawn inside {stack[-1]['name']}")
        stack.append(s)
    return errors


def test_the_validator_catches_a_partial_overlap() -> None:
    slice_ = {"ph": "X", "pid": 1, "tid": 1, "id": "a"}
    doc = {
        "traceEvents": [
            {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "p"}},
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "t"}},
            {**slice_, "name": "one", "ts": 0.0, "dur": 10.0},
            {**slice_, "name": "two", "ts": 5.0, "dur": 10.0, "id": "b"},
        ]
    }
    assert nesting_errors(doc)[0] == "thread (1, 1): two overlaps one partly"


def test_the_demo_trace_nests_on_every_thread() -> None:
    tr = load_trace(DEMO)
    doc = export_chrome(tr)
    assert nesting_errors(doc, tr) == []
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(tr)
    agents = [e for e in slices if e["cat"] == sc.OP_AGENT]
    assert len({e["tid"] for e in agents}) == len(agents)  # one thread per agent


def _speedscope_frame(event: dict[str, Any]) -> str:
    """The frame a trace event becomes in speedscope: its name and its whole `args`."""
    args = event.get("args")
    return str(event["name"]) + (f" {json.dumps(args)}" if args is not None else "")


def test_frames_aggregate_by_name_and_ids_ride_outside_args() -> None:
    tr = load_trace(DEMO)
    events = export_chrome(tr)["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert {_speedscope_frame(e) for e in slices} == set(tr.name)  # 101 spans, 15 frames
    assert sorted(e["id"] for e in slices) == sorted(tr.span_id)
    marks = [e for e in events if e["ph"] == "i"]
    chats = {tr.span_id[i] for i in range(len(tr)) if tr.op[i] == sc.OP_CHAT}
    assert marks and {m["args"]["span_id"] for m in marks} <= chats
    assert all(m["args"]["provider"] and m["args"]["model"] for m in marks)


def test_a_300_agent_run_nests_on_every_thread(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    write_synthetic_trace(path, agents=300, calls_per_agent=3, tools_per_call=2)
    tr = load_trace(path)
    doc = export_chrome(tr)
    assert nesting_errors(doc, tr) == []
    labels = [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"]
    assert labels[0] == "swarm" and len(labels) > 300
    assert any(" · t17 " in label for label in labels)  # an agent's thread names its subtask


def test_parallel_tool_calls_get_threads_of_their_own(tmp_path: Path) -> None:
    specs = [
        SpanSpec("invoke_workflow Tidy up", 0, 10, attrs={sc.OPERATION: sc.OP_WORKFLOW}),
        SpanSpec("invoke_agent coder", 1, 9, parent=0, attrs={sc.OPERATION: sc.OP_AGENT}),
        SpanSpec("chat m", 1, 2, parent=1, attrs={sc.OPERATION: sc.OP_CHAT}),
        SpanSpec("execute_tool read", 2, 5, parent=1, attrs={sc.OPERATION: sc.OP_TOOL}),
        SpanSpec("execute_tool grep", 3, 6, parent=1, attrs={sc.OPERATION: sc.OP_TOOL}),
        SpanSpec("invoke_agent helper", 4, 8, parent=1, attrs={sc.OPERATION: sc.OP_AGENT}),
    ]
    path = tmp_path / "p.jsonl"
    write_spans(path, specs)
    tr = load_trace(path)
    doc = export_chrome(tr)
    assert nesting_errors(doc, tr) == []
    tid = {e["name"]: e["tid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert tid["chat m"] == tid["execute_tool read"] == tid["invoke_agent coder"]
    assert tid["execute_tool grep"] != tid["execute_tool read"]
    assert len(set(tid.values())) == 4  # swarm, coder, coder's second branch, helper


def test_a_300_agent_simulation_nests_on_every_thread(tmp_path: Path) -> None:
    """The coordinator's real shapes: hedged calls, checks and waits running side by side."""
    spec = SimSpec(agents=300, steps=900, virtual=True, traces_dir=tmp_path)
    out = run_simulation(spec)
    tr = load_trace(Path(out["trace"]))
    doc = export_chrome(tr)
    assert nesting_errors(doc, tr) == []
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    coders = {e["tid"] for e in slices if e["name"] == "invoke_agent coder"}
    assert len(coders) == sum(e["name"] == "invoke_agent coder" for e in slices) >= 300
