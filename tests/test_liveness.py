"""Signals and liveness, with real signals on a real `swarm solve` of the demo on the
simulator: SIGTERM cleans up as Ctrl-C does, a run lock keeps a second process off a live
run, and every start clears what killed runs left (no process outliving its command is
tested with `run_command` in test_tools_shell)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "refactor.md"
SIM = '[providers.sim]\nkind = "sim"\ntime_scale = 0.02\n'
pytestmark = pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="needs /proc")


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SWARM_CONFIG", None)
    return env


def _as_a_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell does for `cmd &`


def start(cwd: Path, *args: str, background: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "swarm", *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_a_background_job if background else None,
    )


def swarm(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarm", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def wait_for(what: str, ready: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def demo_repo(state: Path) -> Path:
    repos = list((state / "demo").glob("*"))
    assert len(repos) == 1, repos
    return repos[0]


def coder_worktrees(cwd: Path) -> list[Path]:
    """Owner files of the coders' worktrees (not the planner's, nor the integration's)."""
    demo = cwd / ".swarm" / "demo"
    return [
        p
        for p in demo.glob("*/.git/swarm-worktrees/*/*.owner")
        if p.stem not in ("planner",) and not p.stem.startswith("_")
    ]


def processes_under(path: Path) -> list[int]:
    """Live processes whose working directory is in `path`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == str(path) or cwd.startswith(f"{path}/")):
            out.append(int(entry.name))
    return out


def leftovers(repo: Path) -> dict[str, object]:
    """What a run may leave in the repository: worktrees, branches, owner files, dirs."""
    git = ["git", "-C", str(repo)]
    worktrees = subprocess.run([*git, "worktree", "list"], capture_output=True, text=True)
    branches = subprocess.run(
        [*git, "for-each-ref", "--format=%(refname)", "refs/heads/swarm-ws/"],
        capture_output=True,
        text=True,
    )
    root = repo / ".git" / "swarm-worktrees"
    return {
        "worktrees": worktrees.stdout.strip().count("\n"),
        "branches": branches.stdout.split(),
        "files": sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else [],
        "processes": processes_under(root),
    }


CLEAN = {"worktrees": 0, "branches": [], "files": [], "processes": []}


def run_status(cwd: Path) -> dict[str, str]:
    runs = json.loads(swarm(cwd, "runs", "--json").stdout)
    return {r["run_id"]: r["status"] for r in runs}


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "swarm.toml").write_text(SIM)
    procs: list[int] = []
    yield tmp_path
    for pid in processes_under(tmp_path) + procs:  # never leave a test's processes behind
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_sigterm_cancels_cleanly_like_ctrl_c(workdir: Path, background: bool) -> None:
    """Also for a run a shell started in the background, with SIGINT ignored."""
    proc = start(workdir, "solve", str(TASK), "--quiet", background=background)
    wait_for("a coder's worktree", lambda: coder_worktrees(workdir) or proc.poll() is not None)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    repo = demo_repo(workdir / ".swarm")
    assert leftovers(repo) == CLEAN
    assert list(run_status(workdir).values()) == ["interrupted"]


def test_a_live_run_is_locked_and_resumes_after_it_stops(workdir: Path) -> None:
    proc = start(workdir, "solve", str(TASK), "--quiet")
    wait_for("a coder's worktree", lambda: coder_worktrees(workdir) or proc.poll() is not None)
    (run_id,) = run_status(workdir)
    second = swarm(workdir, "resume", run_id, "--quiet")
    assert second.returncode == 2, second.stderr
    assert f"run {run_id} is running in another process (pid {proc.pid})" in second.stderr
    assert proc.poll() is None, "the second process must not disturb the first"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    resumed = swarm(workdir, "resume", run_id, "--quiet", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["final_check"] == "passed"
    assert leftovers(demo_repo(workdir / ".swarm")) == CLEAN


def test_every_start_clears_what_a_killed_run_left(workdir: Path) -> None:
    """kill -9 while checks run: worktrees, branches, owner files and the orphaned test
    processes stay behind until the next run starts, on any run id."""
    proc = start(workdir, "solve", str(TASK), "--quiet")
    state = workdir / ".swarm"
    wait_for("a coder's worktree", lambda: coder_worktrees(workdir) or proc.poll() is not None)
    repo = demo_repo(state)
    root = repo / ".git" / "swarm-worktrees"
    wait_for("a check running", lambda: processes_under(root) or proc.poll() is not None)
    proc.kill()
    proc.communicate(timeout=30)
    assert leftovers(repo) != CLEAN  # what kill -9 leaves
    later = swarm(
        workdir, "solve", str(TASK), "--repo", str(repo), "--quiet", "--budget", "steps=1"
    )
    assert "Traceback" not in later.stderr
    assert leftovers(repo) == CLEAN
