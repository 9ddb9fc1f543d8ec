"""The provider fault matrix, through `swarm simulate`: completion and makespan ÷ fault-free.

Each fault kind of the simulator (500s, random 429s, 429s with `Retry-After: 0`, dropped
connections, stalled streams, garbage chunks, hangs before the first token, refused
connections) at 5 % and 30 % of calls on the only provider, plus a first provider that
hangs on every call (hang-first) or refuses every connection (dead-first) ahead of a
healthy one. Each cell is one `swarm simulate --virtual --json` command (printed with
its figures, so any cell is reproducible alone); the fault-free run is measured in the
same invocation with the same workload and seed. Virtual clock: the makespans are
simulated seconds, the same every time for one seed (`swarm._simulate.vclock`).

With `--seeds 0,1,2` every simulate cell runs once per seed (each against the fault-free
run of its seed), since which calls draw the faults moves the figures by a few %.

With `--solve`, the same faults (each kind at 5 % and 30 %, hang-first, dead-first) also
run a real `swarm solve` of `--subtasks` subtasks (real git, checks and merge queue, the
simulator in-process: `benchmarks._fault_solve`), reporting completion and makespan ÷
the fault-free solve (wall clock: noisy on a shared machine); with `--kills N`, each cell
(the fault-free one too) is also run N more times, each killed with SIGKILL at a random
moment (seeded by `--seed`) and resumed (`bench_resume`'s machinery), reporting completed
calls repeated, whether the resumed run finished, and whether it ended on the same tree
as the uninterrupted run.

    python -m benchmarks.bench_faults [--agents 100] [--steps 1000] [--seeds 0] [--json]
        [--solve [--subtasks 100] [--kills 20]]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks._fault_solve import prepare
from benchmarks.bench_resume import kill_then_resume

KINDS = ("error", "rate-limit", "drop", "stall", "malformed", "hang", "refuse")

SOLVE_CELLS: list[tuple[str, dict[str, float], dict[str, float] | None]] = [
    *(
        (f"{kind} {int(rate * 100)}%", {f"{kind.replace('-', '_')}_rate": rate}, None)
        for kind in KINDS
        for rate in (0.05, 0.3)
    ),
    ("hang-first", {}, {"hang_rate": 1.0}),
    ("dead-first", {}, {"refuse_rate": 1.0}),
]
"""The solve matrix: name, the provider's faults, the first provider's (None: no first)."""

ROOT = Path(__file__).resolve().parent.parent

CELLS: list[tuple[str, list[str]]] = [
    *(
        (f"{kind} {int(rate * 100)}%", [f"--{kind}-rate", str(rate)])
        for kind in KINDS
        for rate in (0.05, 0.3)
    ),
    *(
        (
            f"rate-limit {int(rate * 100)}% Retry-After 0",
            ["--rate-limit-rate", str(rate), "--retry-after", "0"],
        )
        for rate in (0.05, 0.3)
    ),
    ("hang-first", ["--first", "hang"]),
    ("dead-first", ["--first", "refuse"]),
]


def simulate(args: list[str]) -> dict[str, Any]:
    """One `swarm simulate --json` run, in its own process (as a user would run it)."""
    out = subprocess.run(
        [sys.executable, "-m", "swarm", "simulate", "--virtual", "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    figures: dict[str, Any] = json.loads(out.stdout)
    return figures


def simulate_matrix(opts: argparse.Namespace, seed: int) -> list[dict[str, Any]]:
    """Every simulate cell for one seed, against that seed's fault-free run."""
    base = ["--agents", str(opts.agents), "--steps", str(opts.steps), "--seed", str(seed)]
    base += ["--traces-dir", str(Path("/tmp") / "bench-faults-traces")]
    clean = simulate(base)
    rows = []
    for name, extra in [("fault-free", []), *CELLS]:
        out = clean if not extra else simulate(base + extra)
        subtasks = out["merged"] + out["failed"]
        rows.append(
            {
                "cell": name,
                "seed": seed,
                "command": " ".join(["swarm simulate --virtual", *base, *extra]),
                "completed": f"{out['merged']}/{subtasks}",
                "completion": round(out["merged"] / subtasks, 4) if subtasks else None,
                "makespan_s": out["wall_s"],
                "vs_fault_free": round(out["wall_s"] / clean["wall_s"], 3),
                "attempts": out["attempts"] + out["first_attempts"],
                "calls": out["calls"],
            }
        )
        if not opts.json:
            r = rows[-1]
            print(
                f"seed {seed} {name:34} {r['completed']:>8}  {r['makespan_s']:9.2f} s  "
                f"x{r['vs_fault_free']:<7} attempts {r['attempts']}",
                flush=True,
            )
    return rows


def _solve(cell: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks._fault_solve", str(cell)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        figures: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    except (ValueError, IndexError):
        return {"status": "crashed", "merged": 0, "wall_s": 0.0, "error": out.stderr[-300:]}
    return figures


def _resume(cell: Path, run_id: str | None) -> dict[str, Any]:
    return _solve(cell)  # the cell's journal names the run


def solve_cell(
    tmp: Path, name: str, faults: dict[str, float], first: dict[str, float] | None, opts: Any
) -> dict[str, Any]:
    """One solve cell: a whole run, then `opts.kills` runs killed and resumed."""
    slug = name.replace(" ", "_").replace("%", "")
    prepare(tmp / slug, opts.subtasks, faults, first)
    began = time.perf_counter()
    whole = _solve(tmp / slug)
    duration = time.perf_counter() - began  # with the interpreter's start: kills land in it
    rng = random.Random(f"{opts.seed}-{name}")
    kills = []
    for k in range(opts.kills):
        cell = tmp / f"{slug}-kill{k}"
        prepare(cell, opts.subtasks, faults, first)
        start = [sys.executable, "-m", "benchmarks._fault_solve", str(cell)]
        at_s = rng.uniform(0.05, 0.9) * duration
        kills.append(kill_then_resume(cell, start, at_s, partial(_resume, cell)))
        shutil.rmtree(cell, ignore_errors=True)  # 100 worktrees' worth of disk each
    return {
        "cell": name,
        "completed": f"{whole['merged']}/{opts.subtasks}",
        "completion": round(whole["merged"] / opts.subtasks, 4),
        "makespan_s": whole["wall_s"],
        "status": whole["status"],
        "kills": len(kills),
        "calls_repeated": sum(k["calls_repeated"] for k in kills),
        "resumed_complete": sum(k["report"].get("merged") == opts.subtasks for k in kills),
        "same_tree": sum(
            whole.get("tree") is not None and k["report"].get("tree") == whole["tree"]
            for k in kills
        ),
        "repeated": [k["repeated"] for k in kills if k["repeated"]],
        "killed_at_s": [k["killed_at_s"] for k in kills],
    }


def solve_matrix(opts: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-faults-solve-") as tmp:
        for name, faults, first in [("fault-free", {}, None), *SOLVE_CELLS]:
            if opts.cells and name != "fault-free" and name not in opts.cells.split(","):
                continue
            row = solve_cell(Path(tmp), name, faults, first, opts)
            row["vs_fault_free"] = (
                round(row["makespan_s"] / rows[0]["makespan_s"], 3) if rows else 1.0
            )
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)  # each cell as it ends
            if not opts.json:
                print(
                    f"solve {name:20} {row['completed']:>8}  {row['makespan_s']:8.1f} s  "
                    f"x{row['vs_fault_free']:<6} kills {row['kills']}: "
                    f"{row['calls_repeated']} calls repeated, "
                    f"{row['resumed_complete']}/{row['kills']} resumed to completion, "
                    f"{row['same_tree']}/{row['kills']} to the same tree",
                    flush=True,
                )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds for the simulate cells")
    ap.add_argument("--seed", type=int, default=0, help="the kill moments' seed")
    ap.add_argument("--no-simulate", action="store_true", help="only the solve matrix")
    ap.add_argument("--solve", action="store_true", help="also the solve matrix")
    ap.add_argument("--subtasks", type=int, default=100)
    ap.add_argument("--kills", type=int, default=0, help="kill -9 moments per solve cell")
    ap.add_argument("--cells", default="", help="only these solve cells: 'hang 5%%,dead-first'")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()
    started = time.perf_counter()
    rows = []
    if not opts.no_simulate:
        for seed in (int(s) for s in opts.seeds.split(",")):
            rows += simulate_matrix(opts, seed)
    solved = solve_matrix(opts) if opts.solve else []
    result = {
        "agents": opts.agents,
        "steps": opts.steps,
        "seeds": opts.seeds,
        "cells": rows,
        "all_complete": all(r["completion"] == 1.0 for r in rows),
        "solve": {"subtasks": opts.subtasks, "kills_per_cell": opts.kills, "cells": solved},
        "real_s": round(time.perf_counter() - started, 1),
    }
    if opts.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
