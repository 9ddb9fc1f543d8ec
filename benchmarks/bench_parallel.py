"""How `swarm solve` scales with agents on a real repository with a real pytest suite.

Generates a shop (`benchmarks/_gen_repo.py`: `src/shop/m00.py` ... and a pytest suite of
about 1-2 s), commits it, and runs the real `solve()` on a fresh copy of it at each agent
count (`max_agents`): git worktrees, the suite as the task's check in every workspace and
after every merge, the merge queue, the final verification. No model: a scripted coder per
subtask reads its module, edits it and its test (type hints, a new function and its test),
and finishes, each call after a simulated model latency. Reports, per agent count, wall
time, what merged, model calls, time by phase and the speedup over one agent.

    python -m benchmarks.bench_parallel [--modules 24] [--agents 1,8,24] [--json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from benchmarks._gen_repo import edits, make_repo, module_path, plan
from swarm.messages import ChatRequest
from swarm.model import Model
from swarm.run._solve import SolveRequest, solve
from swarm.testing import FunctionModel, Scripted, call

CHECK = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -x -p no:cacheprovider"
"""The shop's suite, with the interpreter running swarm (the shop has no venv of its own);
swarm's own pytest plugins are not the shop's, and loading them costs 0.6 s a run here."""

_CONFIG = '[providers.sim]\nkind = "sim"\n[tiers.speed]\nmodels = ["sim/cerebras/llama-3.3-70b"]\n'


@dataclass(frozen=True)
class Bench:
    """One benchmark: the shop's size, the agent counts, the simulated model latency."""

    modules: int = 24
    agents: tuple[int, ...] = (1, 8, 24)
    latency_s: float = 0.3
    """Seconds each model call takes, so model time is part of the picture."""


class ScriptedCoders:
    """A model source whose every model plays a deterministic coder for its subtask.

    Turn one reads the subtask's module, turn two makes the planned edits, turn three
    finishes. Any other agent (a fixer, which a green edit never needs) finishes at once,
    so a failure shows in the report instead of being papered over."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        return FunctionModel(self.play, name=agent_id)

    async def play(self, request: ChatRequest) -> Scripted:
        await anyio.sleep(self.latency_s)
        subtask = request.metadata.get("subtask", "")
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if request.metadata.get("role") != "coder" or not subtask.startswith("m") or turn >= 2:
            return call("finish", summary="done")
        i = int(subtask[1:])
        if turn == 0:
            return call("read_file", path=module_path(i))
        return [call("edit_file", path=e.path, old=e.old, new=e.new) for e in edits(i)]


async def run_once(bench: Bench, base: Path, work: Path, agents: int) -> dict[str, Any]:
    """One `solve()` at `agents` agents on a fresh copy of the shop at `base`."""
    work.mkdir(parents=True)
    shutil.copytree(base, work / "repo", symlinks=True)
    (work / "plan.json").write_text(json.dumps(plan(bench.modules)))
    (work / "task.md").write_text(
        f"---\ncheck: {CHECK}\n---\n# Type the shop\n\nType and extend every product line.\n"
    )
    (work / "swarm.toml").write_text(_CONFIG)
    request = SolveRequest(
        task_path=str(work / "task.md"),
        repo=str(work / "repo"),
        plan_path=str(work / "plan.json"),
        config_path=str(work / "swarm.toml"),
        max_agents=agents,
        state_dir=str(work / "state"),
        traces_dir=str(work / "traces"),
        quiet=True,
    )
    report = await solve(request, source=ScriptedCoders(bench.latency_s))
    return {
        "wall_s": report.wall_s,
        "merged": report.count("merged"),
        "status": report.status,
        "final_check": report.final_check,
        "calls": report.calls,
        "time_by_phase": report.time_by_phase,
        "coordinator_cpu_s": report.overhead.cpu_s,
        "merge_checks": report.merge.checks_run if report.merge else 0,
        "worktree_checks": dict(
            Counter((s.check or "none").split(":")[0] for s in report.subtasks)
        ),
    }


def suite_seconds(repo: Path) -> float:
    """The wall time of one run of the shop's suite, as the check runs it."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.perf_counter()
    subprocess.run(CHECK, shell=True, cwd=repo, check=True, capture_output=True, env=env)
    return round(time.perf_counter() - t0, 3)


def cores() -> dict[str, int | None]:
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_count": os.cpu_count(), "usable": len(affinity) if affinity else None}


async def run(bench: Bench, root: Path) -> dict[str, Any]:
    """Every agent count in one process, each on its own copy of one generated shop."""
    base = root / "base"
    make_repo(base, bench.modules)
    suite_s = suite_seconds(base)  # before the runs, which load the machine
    runs: dict[str, dict[str, Any]] = {}
    for agents in bench.agents:
        runs[str(agents)] = await run_once(bench, base, root / f"agents-{agents}", agents)
    one = runs.get("1")
    for result in runs.values():
        result["speedup"] = round(one["wall_s"] / result["wall_s"], 2) if one else None
    return {
        "benchmark": "parallel",
        "modules": bench.modules,
        "subtasks": bench.modules,
        "model_latency_s": bench.latency_s,
        "suite_s": suite_s,
        "check": CHECK,
        "cores": cores(),
        "runs": runs,
    }


def _agents(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--modules", type=int, default=24)
    parser.add_argument("--agents", type=_agents, default=(1, 8, 24), help="e.g. 1,8,24")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per model call")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", metavar="DIR", help="generate and keep the repos in DIR")
    args = parser.parse_args(argv)
    bench = Bench(modules=args.modules, agents=args.agents, latency_s=args.latency)
    if args.keep:
        result = anyio.run(run, bench, Path(args.keep).resolve())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = anyio.run(run, bench, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{bench.modules} modules, suite {result['suite_s']} s, cores {result['cores']}")
    for agents, r in result["runs"].items():
        print(
            f"{agents:>3} agents: {r['wall_s']:7.1f} s  x{r['speedup']}  "
            f"merged {r['merged']}/{bench.modules}  {r['status']}  calls {r['calls']}  "
            f"merge checks {r['merge_checks']}  worktree checks {r['worktree_checks']}"
        )


if __name__ == "__main__":
    main()
