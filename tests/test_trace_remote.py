"""`swarm trace summary` on a cluster run's trace: each remote round trip split into the
command's own time on the node and the overhead of going remote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm._analysis import summarize
from swarm._analysis.loader import load_trace
from swarm.cli import main

T0 = 1_700_000_000_000_000_000


def _span(sid: str, name: str, start_s: float, end_s: float, **attrs: object) -> dict[str, object]:
    values = [
        {"key": k.replace("__", "."), "value": {"doubleValue": v}}
        if isinstance(v, float)
        else {"key": k.replace("__", "."), "value": {"stringValue": str(v)}}
        for k, v in attrs.items()
    ]
    return {
        "traceId": "ab" * 16,
        "spanId": sid * 8,
        "parentSpanId": "01" * 8,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + int(start_s * 1e9)),
        "endTimeUnixNano": str(T0 + int(end_s * 1e9)),
        "attributes": values,
    }


def write_trace(path: Path) -> Path:
    root = {
        "traceId": "ab" * 16,
        "spanId": "01" * 8,
        "name": "invoke_workflow swarm",
        "kind": 1,
        "startTimeUnixNano": str(T0),
        "endTimeUnixNano": str(T0 + 10 * 10**9),
        "attributes": [],
    }
    spans = [
        root,
        _span("02", "swarm.remote edit_file", 1.0, 1.010, swarm__remote__duration_s=0.004),
        _span("03", "swarm.remote edit_file", 2.0, 2.012, swarm__remote__duration_s=0.006),
        _span("04", "swarm.remote check", 3.0, 7.0, swarm__remote__duration_s=3.9),
        _span("05", "swarm.remote patch", 8.0, 8.02),
    ]
    doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    path.write_text(json.dumps(doc) + "\n")
    return path


def test_summary_splits_remote_overhead_from_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path / "run.jsonl")
    remote = summarize(load_trace(path))["remote"]
    edit = remote["by_call"]["edit_file"]
    assert edit["calls"] == 2 and edit["timed"] == 2
    assert edit["round_trip_s"] == pytest.approx(0.022)
    assert edit["command_s"] == pytest.approx(0.010)
    assert edit["overhead_s"] == pytest.approx(0.012)
    assert edit["overhead_ms_per_call"] == pytest.approx(6.0)
    assert remote["by_call"]["check"]["overhead_s"] == pytest.approx(0.1)
    patch = remote["by_call"]["patch"]  # no node time: counted, not split
    assert (patch["calls"], patch["timed"], patch["command_s"]) == (1, 0, 0.0)
    total = remote["total"]
    assert total["calls"] == 4 and total["overhead_s"] == pytest.approx(0.112)
    assert main(["trace", "summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "round trip = command on the node + overhead" in out
    assert "edit_file" in out and "(all)" in out


def test_a_local_run_has_no_remote_block(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "run.jsonl")
    lines = json.loads(path.read_text())
    spans = lines["resourceSpans"][0]["scopeSpans"][0]["spans"]
    lines["resourceSpans"][0]["scopeSpans"][0]["spans"] = spans[:1]
    path.write_text(json.dumps(lines) + "\n")
    assert summarize(load_trace(path))["remote"] is None
