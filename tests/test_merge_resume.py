"""A run killed (`kill -9`) while the merge queue checks a batch, then resumed: every
subtask merges exactly once, none is lost, no worktree or lock is left behind. Real
processes, a real signal, real git; the model is a function of the request."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from swarm.messages import ChatRequest
from swarm.model import Model
from swarm.run._solve import SolveRequest, solve
from swarm.run.journal import Journal
from swarm.testing import FunctionModel, Scripted, call

N = 6
DRIVER = """\
import sys, anyio
from swarm.run._solve import SolveRequest, solve
from swarm.testing import FunctionModel, call


def play(request):
    sub = request.metadata.get("subtask", "s0")
    if not any(m.role == "tool" for m in request.messages):
        path = f"m{sub[1:]}.py"
        return call("edit_file", path=path, old="VALUE = 0", new="VALUE = 1")
    return call("finish", summary="bumped")


class Source:
    def model(self, role, *, agent_id, escalate=False):
        return FunctionModel(play, name=agent_id)


async def main(root, run_id):
    request = SolveRequest(
        task_path=f"{root}/task.md", repo=f"{root}/repo", plan_path=f"{root}/plan.json",
        state_dir=f"{root}/state", traces_dir=f"{root}/traces", quiet=True, max_agents=6,
        config_path=f"{root}/swarm.toml",
        run_id=run_id or None,
    )
    report = await solve(request, source=Source())
    print(report.status)

anyio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
"""
# the merge queue's first check (in a check tree) stops there: the kill comes then; the
# gate is outside the worktree, writable in the sandbox because the config says so
CHECK = """\
import os, pathlib, sys, time
gate = pathlib.Path(sys.argv[1])
if os.path.basename(os.getcwd()).startswith("_check-") and not (gate / "checking").exists():
    (gate / "checking").write_text("yes")
    deadline = time.monotonic() + 30
    while not (gate / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
"""


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(
        command, cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def setup(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for i in range(N):
        (repo / f"m{i}.py").write_text("VALUE = 0\n")
    (repo / "check.py").write_text(CHECK)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    gate = root / "gate"
    gate.mkdir()
    (root / "swarm.toml").write_text(f'[sandbox]\nwritable = ["{gate}"]\n')
    (root / "task.md").write_text(
        f"---\ncheck: python check.py {gate}\npython: {sys.executable}\n"
        "merge: {max_parallel_checks: 1}\n---\n# Bump\n\nBump all.\n"
    )
    subtasks = [
        f'{{"id": "s{i}", "title": "bump {i}", "instructions": "bump", "files": ["m{i}.py"]}}'
        for i in range(N)
    ]
    (root / "plan.json").write_text('{"subtasks": [' + ", ".join(subtasks) + "]}")
    (root / "driver.py").write_text(DRIVER)
    return gate


def resume_request(root: Path, run_id: str) -> SolveRequest:
    """`swarm resume RUN_ID`: the rest comes from the journal."""
    return SolveRequest(
        task_path=str(root / "task.md"),
        state_dir=str(root / "state"),
        traces_dir=str(root / "traces"),
        quiet=True,
        run_id=run_id,
    )


def kill_9_while_a_batch_checks(root: Path, gate: Path) -> None:
    """Start the run in its own process; kill -9 it once the queue checks a batch."""
    with (root / "driver.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(root / "driver.py"), str(root)], stdout=log, stderr=log
        )
        deadline = time.monotonic() + 60
        while not (gate / "checking").exists():
            output = (root / "driver.log").read_text()
            assert process.poll() is None, output
            assert time.monotonic() < deadline, "the merge queue never checked a batch"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
    (gate / "release").touch()  # a check the kill left behind (no sandbox) ends now


async def test_kill_9_during_a_batch_check_then_resume_merges_each_once(tmp_path: Path) -> None:
    gate = setup(tmp_path)
    repo = tmp_path / "repo"
    kill_9_while_a_batch_checks(tmp_path, gate)

    with Journal.open(tmp_path / "state" / "journal.db") as journal:
        run_id = journal.list_runs()[-1].run_id
    report = await solve(resume_request(tmp_path, run_id), source=_source())

    assert report.status == "done", report
    assert {s.id: s.status for s in report.subtasks} == {f"s{i}": "merged" for i in range(N)}
    subjects = git(repo, "log", "--format=%s", f"main..swarm/{run_id}").splitlines()
    assert sorted(subjects) == sorted(f"swarm: s{i}: bump {i}" for i in range(N))  # once each
    for i in range(N):
        assert git(repo, "show", f"swarm/{run_id}:m{i}.py") == "VALUE = 1"
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    common = repo / ".git"
    assert not list(common.rglob("*.lock"))
    assert not list((common / "swarm-worktrees").rglob("_check-*"))


async def test_a_landing_the_journal_missed_is_not_merged_again(tmp_path: Path) -> None:
    """The kill came after the branch moved and before the journal heard: the branch wins."""
    gate = setup(tmp_path)
    (gate / "checking").write_text("")  # no slow check this time
    first = SolveRequest(
        task_path=str(tmp_path / "task.md"),
        repo=str(tmp_path / "repo"),
        plan_path=str(tmp_path / "plan.json"),
        config_path=str(tmp_path / "swarm.toml"),
        state_dir=str(tmp_path / "state"),
        traces_dir=str(tmp_path / "traces"),
        quiet=True,
        max_agents=N,
    )
    report = await solve(first, source=_source())
    assert report.status == "done"
    assert report.merge is not None and report.merge.merged == N
    assert report.merge.batches <= N and report.merge.checks_run <= N
    assert "## Merge queue" in Path(str(report.report)).read_text()
    with Journal.open(tmp_path / "state" / "journal.db") as journal:
        for i in (1, 4):
            journal.set_subtask(report.run_id, f"s{i}", "running")
        journal.set_run_status(report.run_id, "interrupted")
    source = _source()
    resumed = await solve(resume_request(tmp_path, report.run_id), source=source)
    assert resumed.status == "done", resumed
    assert source.made == []  # no agent was needed: nothing coded or merged twice
    subjects = git(tmp_path / "repo", "log", "--format=%s", f"main..swarm/{report.run_id}")
    assert len(subjects.splitlines()) == N


class _Source:
    """The driver's model, in this process: edits the subtask's module, then finishes."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        self.made.append(agent_id)
        return FunctionModel(_play, name=agent_id)


def _play(request: ChatRequest) -> Scripted:
    sub = str(request.metadata.get("subtask", "s0"))
    if not any(m.role == "tool" for m in request.messages):
        return call("edit_file", path=f"m{sub[1:]}.py", old="VALUE = 0", new="VALUE = 1")
    return call("finish", summary="bumped")


def _source() -> _Source:
    return _Source()
