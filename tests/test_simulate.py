"""`swarm simulate`: synthetic swarms through the real coordinator, on real and virtual clocks."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from swarm._analysis.loader import load_trace
from swarm._commands import simulate as command
from swarm._simulate.simulation import PRESETS, SimSpec, run_simulation
from swarm._simulate.world import make_plan, step_shares

FAST = SimSpec(
    agents=10,
    steps=60,
    speed="cerebras/llama-3.3-70b",
    reasoning="cerebras/llama-3.3-70b",
    tool_s=0.05,
    check_s=0.1,
    traces_dir=None,
)


def test_real_and_virtual_clocks_agree_on_the_makespan() -> None:
    real = run_simulation(FAST)
    virtual = run_simulation(replace(FAST, virtual=True))
    assert real["calls"] == virtual["calls"] == 60 + 1 + 2 * real["fix_rounds"]
    assert real["merged"] == virtual["merged"] == 10
    assert abs(real["wall_s"] - virtual["wall_s"]) <= 0.1 * virtual["wall_s"] + 0.5
    assert virtual["real_s"] < real["real_s"]


def test_requests_per_minute_hold_on_the_virtual_clock() -> None:
    out = run_simulation(replace(FAST, rpm=30, virtual=True))
    # a full bucket of 30 goes at once; every further call waits its 2 s share
    assert out["wall_s"] >= (out["attempts"] - 30) * 2.0 * 0.95
    assert out["real_s"] < 20


def test_virtual_scheduling_meets_the_critical_path(tmp_path: Path) -> None:
    out = run_simulation(
        replace(
            FAST,
            shape="dag",
            agents=16,
            steps=80,
            max_agents=4,
            fail_rate=0.5,
            virtual=True,
            traces_dir=tmp_path,
        )
    )
    assert out["merged"] == 16 and out["failed"] == 0
    assert out["fix_rounds"] > 0
    # a lower bound: never beaten; with four slots for sixteen subtasks, approached
    assert out["wall_s"] >= out["bound_actual_s"] - 1e-6
    assert out["ratio_actual"] < 1.5
    lines = [json.loads(line) for line in Path(out["trace"]).read_text().splitlines()]
    names = {
        span["name"]
        for line in lines
        for rs in line["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    }
    assert any(n.startswith("chat ") for n in names)
    assert any(n.startswith("invoke_agent") for n in names)
    assert out["trace_note"] == "span timestamps are on the virtual clock"
    # spans carry virtual time: the trace's wall-clock is the one simulate reports, and no
    # model call's first token comes after its end
    trace = load_trace(Path(out["trace"]))
    assert trace.wall_s == pytest.approx(out["wall_s"], rel=0.01, abs=0.05)
    chats = [i for i in range(len(trace)) if trace.op[i] == "chat" and trace.ttft[i] >= 0]
    assert chats and all(trace.ttft[i] <= trace.duration_s(i) + 1e-6 for i in chats)


def test_devin_loop_is_hours_on_moonshot_and_minutes_on_cerebras() -> None:
    preset = {**PRESETS["devin-loop"], "steps": 40}  # 40 sequential calls keep it quick
    slow = run_simulation(
        replace(SimSpec(**preset), speed="moonshot/kimi-k2.6", virtual=True, traces_dir=None)
    )
    fast = run_simulation(replace(SimSpec(**preset), virtual=True, traces_dir=None))
    assert slow["calls"] == fast["calls"] == 41
    # 3,000 tokens per call: ~88 s at 34 tok/s, ~3 s at 981 tok/s
    assert slow["wall_s"] > 40 * 80 and fast["wall_s"] < 40 * 5
    assert 0.98 < slow["ratio"] < 1.1 and 0.98 < fast["ratio"] < 1.1


def test_plans_and_shares() -> None:
    assert step_shares(3, 10) == [4, 3, 3] and sum(step_shares(300, 4000)) == 4000
    assert step_shares(5, 2) == [1] * 5
    chain = make_plan(4, "chain", 0)
    assert [s.depends_on for s in chain.subtasks] == [(), ("s0000",), ("s0001",), ("s0002",)]
    assert all(not s.depends_on for s in make_plan(5, "fanout", 0).subtasks)
    dag = make_plan(16, "dag", 0)
    assert max(dag.chain_length(s.id) for s in dag.subtasks) == 4  # four layers of four


def _cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="swarm")
    command.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["simulate", *argv])


def test_cli_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _cli(
        [
            "--agents",
            "4",
            "--steps",
            "12",
            "--set",
            "speed=cerebras/gpt-oss-120b",
            "--virtual",
            "--json",
            "--traces-dir",
            str(tmp_path),
        ]
    )
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "agents",
        "steps",
        "wall_s",
        "bound_s",
        "ratio",
        "calls",
        "cost_usd",
        "peak_rss_mb",
        "trace",
    ):
        assert key in out
    assert out["agents"] == 4 and out["speed"] == "cerebras/gpt-oss-120b"
    assert out["cost_usd"] > 0 and Path(out["trace"]).is_file()


def test_cli_presets_and_bad_refs() -> None:
    from swarm.errors import ConfigError

    spec = command.spec_from_args(_cli(["--preset", "kimi-swarm", "--max-agents", "50"]))
    assert (spec.agents, spec.steps, spec.max_agents) == (300, 4000, 50)
    assert spec.speed == "cerebras/kimi-k2.6"
    with pytest.raises(ConfigError):
        command.spec_from_args(_cli(["--set", "speed=nowhere/nothing"]))
    with pytest.raises(ConfigError):
        command.spec_from_args(_cli(["--set", "fast=cerebras/kimi-k2.6"]))


def test_devin_loop_fails_without_compaction_as_a_real_run_would() -> None:
    loop = replace(SimSpec(**PRESETS["devin-loop"]), steps=100, virtual=True, traces_dir=None)
    naive = run_simulation(replace(loop, compaction=False))
    assert naive["failed"] == 1 and naive["over_window"] == 1  # 3,000 words a step: > 262k
    assert naive["peak_input_tokens"] <= 262_144
    kept = run_simulation(loop)
    assert kept["merged"] == 1 and kept["over_window"] == 0
    assert kept["peak_input_tokens"] <= 0.6 * 262_144
    args = _cli(["--preset", "devin-loop", "--no-compaction", "--virtual"])
    assert command.spec_from_args(args).compaction is False
    assert command.spec_from_args(_cli(["--preset", "devin-loop"])).compaction is True
