"""The run's finish estimate is recorded as it goes (the pulse file) and judged against
the real end at 25/50/75 % of the run (`trace summary`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swarm._analysis import load_trace, summarize
from swarm._analysis.estimate import estimate_accuracy
from swarm._analysis.known import build_chain
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm._tracing.pulse import PulseRecord, append_pulse, pulse_path, read_pulses
from swarm.run._pulse import every_s


def test_a_run_records_its_estimates_and_the_summary_judges_them(tmp_path: Path) -> None:
    out = run_simulation(SimSpec(agents=20, steps=120, virtual=True, traces_dir=tmp_path))
    trace = Path(out["trace"])
    pulses, _ = read_pulses(trace)
    assert len(pulses) >= 5
    assert [p.at_ns for p in pulses] == sorted(p.at_ns for p in pulses)
    estimated = [p for p in pulses if p.left_s is not None]
    assert estimated and all(p.low_s <= p.left_s <= p.high_s for p in estimated)  # type: ignore[operator]
    assert pulses[-1].subtasks["merged"] == pulses[-1].subtasks["total"]
    est = summarize(load_trace(trace))["estimate"]
    assert est["estimates"] == len(estimated) == out["estimates"]  # the report has them too
    for q in (50, 75):
        e = est[f"at_{q}"]
        assert e["error_s"] == pytest.approx(e["estimated_end_s"] - e["real_end_s"], abs=1e-3)
        assert e["made_at_s"] <= e["real_end_s"] * q / 100


def test_the_quarters_take_the_last_estimate_made_by_then(tmp_path: Path) -> None:
    known = build_chain(tmp_path / "chain.jsonl")
    tr = load_trace(known.path)
    start, wall = tr.start_ns, tr.wall_s

    def at(s: float) -> int:
        return start + int(s * 1e9)

    for rec in (
        PulseRecord(at_ns=at(0.1 * wall), elapsed_s=0.0),  # nothing measured yet
        PulseRecord(at_ns=at(0.2 * wall), elapsed_s=1, left_s=0.5 * wall, low_s=0, high_s=wall),
        PulseRecord(at_ns=at(0.6 * wall), elapsed_s=2, left_s=0.4 * wall),
    ):
        append_pulse(known.path, rec)
    est = estimate_accuracy(tr)
    assert est is not None and est["estimates"] == 2
    q25, q50, q75 = est["at_25"], est["at_50"], est["at_75"]
    assert q25["estimated_end_s"] == pytest.approx(0.7 * wall, abs=1e-3)
    assert q25["error_s"] == pytest.approx(-0.3 * wall, abs=1e-3) and q25["in_range"]
    assert q50 == q25  # no newer estimate by half-way
    assert q75["error_s"] == pytest.approx(0.0, abs=1e-3)


def test_a_trace_without_its_pulse_file_reads_the_estimates_from_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()
    known = build_chain(tmp_path / "traces" / "chain.jsonl")
    tr = load_trace(known.path)
    made = PulseRecord(
        at_ns=tr.start_ns + int(0.2e9 * tr.wall_s), elapsed_s=1.0, left_s=0.5, low_s=0.2, high_s=1
    )
    append_pulse(known.path, made)
    from_pulse = estimate_accuracy(tr)
    pulse_path(known.path).unlink()  # the trace travels alone; the report stays
    assert tr.run_id and estimate_accuracy(tr) is None
    report = tmp_path / ".swarm" / "runs" / tr.run_id / "report.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"run_id": tr.run_id, "estimates": [made.model_dump()]}))
    from_report = estimate_accuracy(tr)
    assert from_pulse is not None and from_report is not None
    assert from_report.pop("source") == str(report) and from_pulse.pop("source") == "pulse"
    assert from_report == from_pulse
    code, out, err = _cli("trace", "summary", str(known.path), "--report", str(report))
    assert code == 0 and f"1 estimates, from {report}" in out
    code, out, err = _cli("trace", "summary", str(known.path), "--report", "nope.json")
    assert code != 0 and "nope.json" in err and "Traceback" not in err


def _cli(*args: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def test_no_pulse_file_means_no_estimate(tmp_path: Path) -> None:
    known = build_chain(tmp_path / "chain.jsonl")
    assert estimate_accuracy(load_trace(known.path)) is None


def test_estimates_come_a_tenth_of_the_run_apart_within_a_second_and_a_minute() -> None:
    assert [every_s(s) for s in (0, 5, 100, 3600)] == [1.0, 1.0, 10.0, 60.0]
