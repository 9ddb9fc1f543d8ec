"""The solve part of the fault matrix: one `swarm solve` of N subtasks under one fault.

`prepare(cell_dir, ...)` writes a real git repository of N modules (`bench_solve`'s), a
plan of one subtask per module, the task and the cell's faults; then

    python -m benchmarks._fault_solve CELL_DIR

runs the real `solve()` there (worktrees, checks, merge queue, journal, router) with the
simulator in-process as the provider (`bench_solve`'s scripted coder, with the cell's
faults on it, or on a first provider ahead of a healthy one), and prints its figures as
JSON, with the tree the run's branch ends on. Run again in a directory whose journal
holds a run, it resumes that run (what `swarm resume` does), so
`bench_resume.kill_then_resume` can kill -9 it at any moment.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from benchmarks.bench_resume import tree_of
from benchmarks.bench_solve import Player, Source, make_repo, plan
from swarm import Router, load_config
from swarm.config import Faults
from swarm.providers.sim import SimProvider
from swarm.run._solve import SolveRequest, solve

PROFILE = "cerebras/llama-3.3-70b"


def prepare(
    cell: Path, subtasks: int, faults: dict[str, Any], first: dict[str, Any] | None
) -> None:
    """A fresh cell directory: repository, plan, task, config and the cell's faults."""
    cell.mkdir(parents=True)
    make_repo(cell / "repo", subtasks)
    (cell / "plan.json").write_text(json.dumps(plan(subtasks)))
    (cell / "task.md").write_text(
        f"---\ncheck: python check.py 0\npython: {sys.executable}\n---\n# Bump\n\nBump all.\n"
    )
    models = [f"sim/{PROFILE}"] if first is None else [f"first/{PROFILE}", f"sim/{PROFILE}"]
    names = ["sim"] if first is None else ["first", "sim"]
    (cell / "swarm.toml").write_text(
        "".join(f'[providers.{n}]\nkind = "sim"\n' for n in names)
        + f"[tiers.speed]\nmodels = {json.dumps(models)}\n"
        + f"[merge]\ncheck_slots = {subtasks}\n"
    )
    (cell / "cell.json").write_text(json.dumps({"faults": faults, "first": first}))


def _run_id(cell: Path) -> str | None:
    journal = cell / ".swarm" / "journal.db"
    if not journal.exists():
        return None
    db = sqlite3.connect(journal)
    try:
        row = db.execute("SELECT run_id FROM runs").fetchone()
    except sqlite3.OperationalError:  # killed before the journal had its tables
        row = None
    finally:
        db.close()
    return str(row[0]) if row else None


async def run_cell(cell: Path) -> dict[str, Any]:
    """Solve (or resume) the cell's run; its figures."""
    spec = json.loads((cell / "cell.json").read_text())
    config = load_config(cell / "swarm.toml", env={})
    providers = {"sim": SimProvider("sim", script=Player(0), faults=Faults(**spec["faults"]))}
    if spec["first"] is not None:
        providers["first"] = SimProvider("first", script=Player(0), faults=Faults(**spec["first"]))
    request = SolveRequest(
        task_path=str(cell / "task.md"),
        repo=str(cell / "repo"),
        plan_path=str(cell / "plan.json"),
        config_path=str(cell / "swarm.toml"),
        max_agents=100,
        state_dir=str(cell / ".swarm"),
        traces_dir=str(cell / "traces"),
        quiet=True,
        run_id=_run_id(cell),
    )
    started = time.perf_counter()
    async with Router(config, providers=providers) as router:
        report = await solve(request, source=Source(router))
    return {
        "status": report.status,
        "merged": report.count("merged"),
        "subtasks": len(report.subtasks),
        "wall_s": round(time.perf_counter() - started, 2),
        "calls": report.calls,
        "tree": tree_of(cell / "repo", report.branch) if report.branch else None,
    }


def main() -> None:
    print(json.dumps(anyio.run(run_cell, Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
