"""The provider fault matrix, through `swarm simulate`: completion and makespan ÷ fault-free.

Each fault kind of the simulator (500s, random 429s, 429s with `Retry-After: 0`, dropped
connections, stalled streams, garbage chunks, hangs before the first token, refused
connections) at 5 % and 30 % of calls on the only provider, plus a first provider that
hangs on every call (hang-first) or refuses every connection (dead-first) ahead of a
healthy one. Each cell is one `swarm simulate --virtual --json` command (printed with
its figures, so any cell is reproducible alone); the fault-free run is measured in the
same invocation with the same workload and seed. Virtual clock: the makespans are
simulated seconds, deterministic but for retry jitter.

Not here: the kill -9 / resume part of issue 14's matrix (completed calls repeated after
a kill), which belongs with resume.

    python benchmarks/bench_faults.py [--agents 100] [--steps 1000] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

CELLS: list[tuple[str, list[str]]] = [
    *(
        (f"{kind} {int(rate * 100)}%", [f"--{kind}-rate", str(rate)])
        for kind in ("error", "rate-limit", "drop", "stall", "malformed", "hang", "refuse")
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()
    base = ["--agents", str(opts.agents), "--steps", str(opts.steps), "--seed", str(opts.seed)]
    base += ["--traces-dir", str(Path("/tmp") / "bench-faults-traces")]
    started = time.perf_counter()
    clean = simulate(base)
    rows = []
    for name, extra in [("fault-free", []), *CELLS]:
        out = clean if not extra else simulate(base + extra)
        subtasks = out["merged"] + out["failed"]
        rows.append(
            {
                "cell": name,
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
                f"{name:34} {r['completed']:>8}  {r['makespan_s']:9.2f} s  "
                f"x{r['vs_fault_free']:<7} attempts {r['attempts']}",
                flush=True,
            )
    result = {
        "agents": opts.agents,
        "steps": opts.steps,
        "seed": opts.seed,
        "fault_free_s": clean["wall_s"],
        "cells": rows,
        "all_complete": all(r["completion"] == 1.0 for r in rows),
        "real_s": round(time.perf_counter() - started, 1),
    }
    if opts.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
