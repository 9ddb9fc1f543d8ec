"""kill -9 a real `swarm solve` of the demo at random moments, resume it: no completed
model call is sent again (the journal knows which completed), and the final tree is the
uninterrupted run's."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "refactor.md"
SIM = '[providers.sim]\nkind = "sim"\ntime_scale = 0.02\n'
KILLS = 3


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SWARM_CONFIG", None)
    return env


def swarm(cwd: Path, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "swarm", *args, "--quiet", "--json"],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def final_tree(cwd: Path, run_id: str) -> str:
    (repo,) = (cwd / ".swarm" / "demo").glob("*")
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", f"swarm/{run_id}^{{tree}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def journaled_calls(cwd: Path) -> dict[str, float]:
    """Each journaled call key and when it was last written."""
    db = sqlite3.connect(cwd / ".swarm" / "journal.db")
    try:
        return dict(db.execute("SELECT key, MAX(created_at) FROM calls GROUP BY key"))
    finally:
        db.close()


def test_kill_9_then_resume_repeats_no_completed_call(tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "swarm.toml").write_text(SIM)
    started = time.monotonic()
    whole = swarm(ref, "solve", str(TASK))
    duration = time.monotonic() - started
    assert whole["status"] == "done"
    expected = final_tree(ref, str(whole["run_id"]))
    rng = random.Random(14)
    for i in range(KILLS):
        cwd = tmp_path / f"kill{i}"
        cwd.mkdir()
        (cwd / "swarm.toml").write_text(SIM)
        proc = subprocess.Popen(
            [sys.executable, "-m", "swarm", "solve", str(TASK), "--quiet"],
            cwd=cwd,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.2, 0.9) * duration)
        proc.kill()
        proc.wait()
        before = journaled_calls(cwd)
        db = sqlite3.connect(cwd / ".swarm" / "journal.db")
        (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()
        db.close()
        resumed_at = time.time()
        report = swarm(cwd, "resume", run_id)
        after = journaled_calls(cwd)
        repeated = [k for k in before if after[k] >= resumed_at]
        assert repeated == [], f"kill {i}: completed calls sent again: {repeated}"
        assert report["status"] == "done", report
        assert final_tree(cwd, run_id) == expected, f"kill {i}: a different final tree"
