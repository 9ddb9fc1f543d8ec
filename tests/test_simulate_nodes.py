"""`swarm simulate --nodes`: workspaces on simulated cluster nodes, and capacity planning."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from swarm._commands import simulate as command
from swarm._simulate.capacity import plan_capacity, scaling
from swarm._simulate.nodes import Nodes
from swarm._simulate.simulation import run_simulation
from swarm.errors import ConfigError
from tests.test_simulate import FAST as SIM
from tests.test_simulate import _cli
from tests.trace_spans import attr, spans

FAST = replace(SIM, agents=24, steps=96, tool_s=0.5, check_s=4.0, virtual=True)


def test_workspaces_wait_for_room_on_the_nodes_and_spread(tmp_path: Path) -> None:
    out = run_simulation(replace(FAST, cluster=Nodes(2, 4.0), traces_dir=tmp_path))
    c = out["cluster"]
    assert out["merged"] == 24 and out["failed"] == 0
    assert c["slots"] == 8 and c["peak_workspaces"] == 8
    assert c["waited"] > 0
    # the planner's workspace and 24 coders' (fixers open none of their own here)
    assert sum(c["placed"]) >= 25 and abs(c["placed"][0] - c["placed"][1]) <= 1
    assert 0 < c["busy"] < c["reserved"] <= 1
    # eight places: the bound counts them, and the run never beats it
    assert out["wall_s"] >= out["bound_actual_s"] - 1e-6
    assert out["bound_s"] > out["floor_s"]
    found = spans(Path(out["trace"]))
    assert any(s["name"] == "swarm.wait cluster" for s in found)
    checks = [s for s in found if s["name"] == "execute_tool run_tests"]
    hosts = [attr(s, "host.name") for s in checks]
    assert set(hosts) == {"sim-node-0", "sim-node-1", None}
    assert hosts.count(None) == 1  # the merge queue's final check, in the driver


def test_more_nodes_shorten_the_run_until_the_floor() -> None:
    spec = replace(FAST, cluster=Nodes(1, 2.0))
    plan = plan_capacity(spec, [16, 1, 4], run_simulation)
    runs = plan["runs"]
    assert [r["cluster"]["nodes"] for r in runs] == [1, 4, 16]
    assert [r["cluster"]["slots"] for r in runs] == [2, 8, 32]
    assert runs[0]["wall_s"] > runs[1]["wall_s"] > runs[2]["wall_s"] >= runs[2]["floor_s"]
    assert all(r["merged"] == 24 for r in runs)
    assert runs[2]["cluster"]["waited"] == 0  # 32 places for 25 workspaces
    steps, stops = plan["scaling"]["steps"], plan["scaling"]["stops"]
    assert steps[0]["speedup"] == 1.0 and steps[0]["efficiency"] is None
    assert steps[2]["efficiency"] < 0.7
    assert stops["after_nodes"] == 4 and "floor" in stops["reason"]


def _run(nodes: int, wall: float, *, peak: int, slots: int, floor: float = 10.0) -> dict[str, Any]:
    cluster = {"nodes": nodes, "slots": slots, "peak_workspaces": peak, "waited": 5}
    return {"cluster": cluster, "wall_s": wall, "floor_s": floor, "max_agents": 40}


def test_scaling_names_why_it_stops() -> None:
    idle = scaling([_run(1, 400, peak=8, slots=8), _run(4, 300, peak=20, slots=32)])
    assert idle["stops"]["after_nodes"] == 1
    assert "no longer fills: at most 20 workspaces" in idle["stops"]["reason"]
    waves = scaling([_run(16, 120, peak=128, slots=128), _run(64, 54, peak=512, slots=512)])
    assert waves["stops"]["after_nodes"] == 16
    assert "40 agents take only 1 waves of 512" in waves["stops"]["reason"]
    assert "at most the 44 s above it" in waves["stops"]["reason"]
    going = scaling([_run(1, 400, peak=8, slots=8), _run(2, 210, peak=16, slots=16)])
    assert going["steps"][1]["efficiency"] == pytest.approx(0.952, abs=1e-3)
    assert going["stops"]["after_nodes"] is None
    assert going["stops"]["reason"].startswith("still scaling at 2 nodes")
    assert "until about 5 hold max_agents=40" in going["stops"]["reason"]


def test_cli_compares_node_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--agents", "6", "--steps", "12", "--check-s", "4", "--virtual"]
    argv += ["--traces-dir", str(tmp_path), "--nodes", "1,2", "--cores-per-node", "2"]
    args = _cli([*argv, "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["cluster"]["slots"] for r in out["runs"]] == [2, 4]
    assert {"steps", "stops"} <= set(out["scaling"])
    args = _cli(argv)
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "makespan" in text and "floor" in text


def test_cli_refuses_clusters_that_hold_nothing() -> None:
    with pytest.raises(SystemExit):
        _cli(["--nodes", "0"])
    with pytest.raises(ConfigError, match=r"--cores-per-node 0\.5 holds no workspace"):
        command.spec_from_args(_cli(["--nodes", "2", "--cores-per-node", "0.5"]))
