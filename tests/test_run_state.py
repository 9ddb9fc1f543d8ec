"""`swarm runs` tells the truth: a run whose process is gone is `interrupted`, one that
never started is `failed` with its reason. Real processes, real kill -9."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from swarm.cli import main
from swarm.run._lock import owner, run_lock
from swarm.run._workspace import cleanup_stale
from swarm.run.journal import Journal
from tests.mounts import mounted_under

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "refactor.md"
SLOW_SIM = '[providers.sim]\nkind = "sim"\ntime_scale = 1.0\n'  # the demo takes minutes


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SWARM_CONFIG", None)
    return env


def _runs(state: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert main(["runs", "--state-dir", str(state), "--json"]) == 0
    rows: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return rows


def _running_run(state: Path) -> str | None:
    """The id of a run the journal has and whose lock is held, once there is one."""
    if not (state / "journal.db").exists():
        return None
    try:
        with Journal.open(state / "journal.db") as journal:
            runs = journal.list_runs()
    except Exception:  # the journal is being made
        return None
    for r in runs:
        if owner(state, r.run_id) is not None:
            return r.run_id
    return None


def test_a_run_killed_with_sigkill_is_shown_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "swarm.toml").write_text(SLOW_SIM)
    state = tmp_path / ".swarm"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm", "solve", str(TASK), "--quiet"],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run_id = None
        deadline = time.monotonic() + 120
        while run_id is None and time.monotonic() < deadline and proc.poll() is None:
            run_id = _running_run(state)
            time.sleep(0.1)
        assert run_id is not None, "the run never started"
        (row,) = _runs(state, capsys)
        assert (row["run_id"], row["status"]) == (run_id, "running")
        # killed once it has a worktree, so the next start has one to clean up
        worktrees = state / "demo" / run_id / ".git" / "swarm-worktrees" / run_id
        while not any(worktrees.glob("*.owner")) and time.monotonic() < deadline:
            assert proc.poll() is None, "the run ended before it made a worktree"
            time.sleep(0.1)
        assert any(worktrees.glob("*.owner")), "the run never made a worktree"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (row,) = _runs(state, capsys)
    assert row["status"] == "interrupted"
    assert f"swarm resume {run_id}" in str(row["detail"])
    assert main(["runs", "--state-dir", str(state)]) == 0
    assert "interrupted" in capsys.readouterr().out
    # what the next start does first: the killed run's worktrees removed, filesystems and all
    demo = state / "demo" / run_id
    assert anyio.run(cleanup_stale, demo)
    assert mounted_under(tmp_path) == []


def test_the_lock_names_a_live_owner_only(tmp_path: Path) -> None:
    assert owner(tmp_path, "r1") is None  # no lock file at all
    with run_lock(tmp_path, "r1"):
        assert owner(tmp_path, "r1") == os.getpid()
    assert owner(tmp_path, "r1") is None  # released
    # held by a leftover process whose recorded holder is gone (a pid that started later)
    lock = tmp_path / "runs" / "r1" / "lock"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,sys,time; f=open(sys.argv[1]); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        lock.write_text(f"{child.pid} 1\n")  # its start time is not 1 tick after boot
        assert owner(tmp_path, "r1") is None
        lock.write_text(f"{child.pid}\n")  # no start time recorded: the pid alone
        assert owner(tmp_path, "r1") == child.pid
    finally:
        child.kill()
        child.communicate()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_run_that_cannot_reach_its_cluster_is_failed_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWARM_CONFIG", raising=False)
    (tmp_path / "swarm.toml").write_text(SLOW_SIM)
    address = f"127.0.0.1:{_closed_port()}"
    code = main(["solve", str(TASK), "--cluster", address, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 == out["exit_code"]  # a service that cannot be reached: 1, not 2
    assert f"cannot reach the Ray cluster at '{address}'" in out["error"]
    (row,) = _runs(tmp_path / ".swarm", capsys)
    assert row["status"] == "failed"
    assert "cannot reach the Ray cluster" in str(row["detail"])


def test_a_run_being_resumed_is_running_and_a_dead_one_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = {"title": "T", "instructions": "do"}
    with Journal.open(tmp_path / "journal.db") as journal:
        journal.create_run("resumed", task=task, repo="r", config={}, status="interrupted")
        journal.create_run("killed", task=task, repo="r", config={})
        journal.create_run("finished", task=task, repo="r", config={}, status="done")
    with run_lock(tmp_path, "resumed"):
        states = {r["run_id"]: r["status"] for r in _runs(tmp_path, capsys)}
    assert states == {"resumed": "running", "killed": "interrupted", "finished": "done"}
