"""The run's finish estimate is recorded as it goes (the pulse file) and judged against
the real end at 25/50/75 % of the run (`trace summary`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm.analysis import load_trace, summarize
from swarm.analysis.estimate import estimate_accuracy
from swarm.analysis.known import build_chain
from swarm.run.pulse import every_s
from swarm.simulate.simulation import SimSpec, run_simulation
from swarm.tracing.pulse import PulseRecord, append_pulse, read_pulses


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
    assert est["estimates"] == len(estimated)
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


def test_no_pulse_file_means_no_estimate(tmp_path: Path) -> None:
    known = build_chain(tmp_path / "chain.jsonl")
    assert estimate_accuracy(load_trace(known.path)) is None


def test_estimates_come_a_tenth_of_the_run_apart_within_a_second_and_a_minute() -> None:
    assert [every_s(s) for s in (0, 5, 100, 3600)] == [1.0, 1.0, 10.0, 60.0]
