"""The merge queue on a real git repository: batches, attribution, a red batch split."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from swarm.run.check import CheckResult, run_check
from swarm.run.merge import MergeQueue, MergeResult, QueueSettings
from swarm.run.workspace import worktree_diff

CHECK = f"{sys.executable} check.py"


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(
        command, cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in "abc":
        (repo / f"{name}.py").write_text("X = 1\n")
    # each module's X may change; together a and b must stay within 3
    (repo / "check.py").write_text("import a, b, c\nassert a.X + b.X <= 3, 'a + b too big'\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    return repo


async def patch_setting(repo: Path, name: str, value: int) -> str:
    """The patch that sets `name.X = value`, made the way a workspace makes one."""
    (repo / f"{name}.py").write_text(f"X = {value}\n")
    try:
        return await worktree_diff(repo, "HEAD", untracked=())
    finally:
        git(repo, "checkout", "--", f"{name}.py")


class SlowFirstChecker:
    """Runs the real check; the first run is slow, so other merges queue up behind it."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    async def __call__(
        self, path: Path, command: str, *, key: str | None = None, priority: bool = False
    ) -> CheckResult:
        self.commands.append(command)
        if len(self.commands) == 1:
            await anyio.sleep(0.5)
        return await run_check(command, path, timeout_s=30)


async def merge_three(
    repo: Path, values: dict[str, int]
) -> tuple[dict[str, MergeResult], list[str]]:
    checker = SlowFirstChecker()
    settings = QueueSettings(checker, batch_check=CHECK)
    patches = {n: await patch_setting(repo, n, v) for n, v in values.items()}
    results: dict[str, MergeResult] = {}
    async with MergeQueue.open(repo, run_id="r1", base="main", settings=settings) as queue:

        async def merge(name: str) -> None:
            results[name] = await queue.merge(name, f"set {name}", patches[name], check=CHECK)

        async with anyio.create_task_group() as tg:
            first, *rest = patches
            tg.start_soon(merge, first)
            await anyio.sleep(0.1)  # the first merge is checking: the rest arrive meanwhile
            for name in rest:
                tg.start_soon(merge, name)
    return results, checker.commands


async def test_patches_that_wait_are_merged_as_one_batch_with_one_check(repo: Path) -> None:
    results, commands = await merge_three(repo, {"a": 2, "c": 5, "b": 0})
    assert {n: r.kind for n, r in results.items()} == {"a": "merged", "c": "merged", "b": "merged"}
    assert len(commands) == 2  # `a` alone, then `c` and `b` together
    log = git(repo, "log", "--format=%s", "swarm/r1").splitlines()
    assert log[:3] == ["swarm: b: set b", "swarm: c: set c", "swarm: a: set a"]  # one each
    assert git(repo, "show", "swarm/r1:c.py") == "X = 5"


async def test_a_red_batch_is_merged_one_at_a_time_to_find_the_culprit(repo: Path) -> None:
    # c and b are each fine on top of a; together with a, b breaks the check
    results, commands = await merge_three(repo, {"a": 2, "c": 5, "b": 2})
    assert {n: r.kind for n, r in results.items()} == {"a": "merged", "c": "merged", "b": "red"}
    assert "a + b too big" in results["b"].output
    assert len(commands) == 4  # a; the batch (red); then c alone; then b alone
    assert git(repo, "show", "swarm/r1:b.py") == "X = 1"
    assert git(repo, "status", "--porcelain") == ""  # the user's checkout untouched
