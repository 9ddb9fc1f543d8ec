"""kill -9 a real `swarm solve` of the demo at random moments, resume it, and count what
the resume paid again.

An uninterrupted run first gives the reference tree and duration; then each round starts
the same solve in a fresh directory, kills it with SIGKILL at a random moment in the
first 90 % of that duration, and runs `swarm resume`. A completed call repeated is a call
the journal held before the resume and wrote again during it (the journal knows every
completed call, keyed by agent and position). Reports, per round and in total, calls
repeated and whether the final tree equals the reference.

    python -m benchmarks.bench_resume [--kills 20] [--seed 1] [--jobs 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "refactor.md"
SIM = '[providers.sim]\nkind = "sim"\ntime_scale = 0.02\n'


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SWARM_CONFIG", None)
    return env


def _swarm(cwd: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "swarm", *args, "--quiet", "--json"],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        return {"status": "crashed", "error": done.stderr[-500:]}
    return report


def _tree(cwd: Path, run_id: str) -> str:
    # the run's own demo copy: one killed before its run was journaled left another
    return tree_of(cwd / ".swarm" / "demo" / run_id, f"swarm/{run_id}") or ""


def tree_of(repo: Path, branch: str) -> str | None:
    """The tree `branch` of `repo` ends on (None: no such branch)."""
    rev = ["git", "-C", str(repo), "rev-parse", f"{branch}^{{tree}}"]
    out = subprocess.run(rev, capture_output=True, text=True, check=False)
    return out.stdout.strip() or None


def journal_calls(cwd: Path) -> dict[str, float]:
    """Every completed call the journal under `cwd/.swarm` holds, with when it was written."""
    path = cwd / ".swarm" / "journal.db"
    if not path.exists():  # killed before the run opened its journal
        return {}
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT key, MAX(created_at) FROM calls GROUP BY key"))
    except sqlite3.OperationalError:  # ... or before it made its tables
        return {}
    finally:
        db.close()


def _run_id(cwd: Path) -> str | None:
    if not (cwd / ".swarm" / "journal.db").exists():
        return None
    db = sqlite3.connect(cwd / ".swarm" / "journal.db")
    try:
        row = db.execute("SELECT run_id FROM runs").fetchone()
    except sqlite3.OperationalError:
        row = None
    finally:
        db.close()
    return str(row[0]) if row else None


def kill_then_resume(
    cwd: Path, start: list[str], at_s: float, resume: Callable[[str | None], dict[str, Any]]
) -> dict[str, Any]:
    """Start `start` in `cwd` (a run journaling under `cwd/.swarm`), SIGKILL it after
    `at_s` seconds, then `resume(run_id)` (None: killed before its run was journaled);
    count the completed calls written again."""
    proc = subprocess.Popen(
        start, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(at_s)
    proc.kill()
    proc.wait()
    before = journal_calls(cwd)
    run_id = _run_id(cwd)
    resumed_at = time.time()
    report = resume(run_id)
    after = journal_calls(cwd)
    repeated = sorted(k for k in before if after.get(k, 0.0) >= resumed_at)
    return {
        "run_id": run_id,
        "killed_at_s": round(at_s, 2),
        "calls_before_kill": len(before),
        "resume_status": report.get("status"),
        "calls_repeated": len(repeated),
        "repeated": repeated,
        "report": report,
    }


def _round(cwd: Path, at_s: float, reference: str) -> dict[str, Any]:
    cwd.mkdir()
    (cwd / "swarm.toml").write_text(SIM)
    start = [sys.executable, "-m", "swarm", "solve", str(TASK), "--quiet"]

    def resume(run_id: str | None) -> dict[str, Any]:
        if run_id is None:  # killed before its run was journaled: a user starts again
            return _swarm(cwd, "solve", str(TASK))
        return _swarm(cwd, "resume", run_id)

    out = kill_then_resume(cwd, start, at_s, resume)
    run_id = out.pop("run_id") or out["report"].get("run_id")
    out["same_tree"] = run_id is not None and _tree(cwd, str(run_id)) == reference
    report = out.pop("report")
    out["resume_error"] = report.get("error")
    out["resume_subtasks"] = {s.get("id"): s.get("status") for s in report.get("subtasks", [])}
    return out


def bench(kills: int, seed: int, jobs: int = 1) -> dict[str, Any]:
    """`jobs` rounds at a time (each is a solve and its resume: subprocesses mostly
    waiting on the simulated provider, so a few at once fit on two cores)."""
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        ref = Path(tmp) / "reference"
        ref.mkdir()
        (ref / "swarm.toml").write_text(SIM)
        started = time.monotonic()
        whole = _swarm(ref, "solve", str(TASK))
        duration = time.monotonic() - started
        reference = _tree(ref, str(whole["run_id"]))
        rng = random.Random(seed)
        moments = [rng.uniform(0.05, 0.9) * duration for _ in range(kills)]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            rounds = list(
                pool.map(
                    lambda i: _round(Path(tmp) / f"kill{i}", moments[i], reference),
                    range(kills),
                )
            )
    return {
        "reference": {"status": whole["status"], "calls": whole["calls"], "wall_s": duration},
        "kills": kills,
        "calls_repeated": sum(r["calls_repeated"] for r in rounds),
        "same_tree": sum(r["same_tree"] for r in rounds),
        "resumed_done": sum(r["resume_status"] == "done" for r in rounds),
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1, help="rounds run at once")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = bench(args.kills, args.seed, args.jobs)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for r in result["rounds"]:
        print(
            f"kill at {r['killed_at_s']:5.1f} s: {r['calls_before_kill']:3} calls journaled, "
            f"resume {r['resume_status']}, {r['calls_repeated']} repeated, "
            f"tree {'same' if r['same_tree'] else 'DIFFERENT'}"
        )
    print(
        f"{result['kills']} kills: {result['calls_repeated']} completed calls repeated, "
        f"{result['same_tree']}/{result['kills']} same final tree"
    )


if __name__ == "__main__":
    main()
