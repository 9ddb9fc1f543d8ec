"""`benchmarks.bench_inference`: its summary and the baseline guard, on given numbers."""

from __future__ import annotations

from typing import Any

from benchmarks.bench_inference import baseline_of, check_baseline, summarize


def _row(
    variant: str, cpu_ms: float, *, stream: bool = False, ratio: float = 1.0
) -> dict[str, Any]:
    return {
        "variant": variant,
        "mode": "zero",
        "start": "lockstep",
        "agents": 300,
        "stream": stream,
        "cpu_ms_per_call": cpu_ms,
        "ratio": ratio,
    }


def test_the_summary_compares_each_variant_with_the_floor_of_its_own_shape() -> None:
    rows = [
        _row("aiohttp", 0.2),
        _row("aiohttp", 0.25),
        _row("aiohttp", 0.3),
        _row("router", 0.5, ratio=1.2),
        _row("router", 0.4, ratio=1.1),
        _row("router", 0.6, ratio=1.3),
        _row("aiohttp", 0.1, stream=True),
        _row("router@old", 0.4, stream=True),
    ]
    summary = summarize(rows)
    whole = summary["zero/lockstep/300/whole"]
    assert whole["floor_cpu_ms"] == 0.25 and whole["floor_cpu_ms_min"] == 0.2
    assert whole["router"]["cpu_ms"] == 0.5 and whole["router"]["cpu_ratio"] == 2.0
    assert whole["router"]["cpu_ratio_min"] == 2.0  # 0.4 / 0.2
    assert whole["router"]["makespan_ratio"] == 1.2
    assert summary["zero/lockstep/300/stream"]["router@old"]["cpu_ratio"] == 4.0


def test_the_baseline_fails_a_ratio_grown_more_than_its_tolerance() -> None:
    was = summarize([_row("aiohttp", 0.2), _row("router", 0.4)])
    baseline = baseline_of(was)
    assert baseline == {"tolerance": 0.2, "router_cpu_ratio": {"zero/lockstep/300/whole": 2.0}}
    # 2.0 -> 2.3: +15 %, within the tolerance
    assert check_baseline(baseline, summarize([_row("aiohttp", 0.2), _row("router", 0.46)])) == []
    # 2.0 -> 2.5: +25 %
    failures = check_baseline(baseline, summarize([_row("aiohttp", 0.2), _row("router", 0.5)]))
    assert len(failures) == 1 and "2.50x the floor, was 2.00x (+25%" in failures[0]
    # the floor moving with the router is no regression: the ratio is what is guarded
    assert check_baseline(baseline, summarize([_row("aiohttp", 0.3), _row("router", 0.6)])) == []


def test_a_run_that_shares_no_shape_with_the_baseline_fails() -> None:
    baseline = {"tolerance": 0.2, "router_cpu_ratio": {"zero/lockstep/1000/stream": 2.0}}
    failures = check_baseline(baseline, summarize([_row("aiohttp", 0.2), _row("router", 0.4)]))
    assert failures and "no run shape in common" in failures[0]
