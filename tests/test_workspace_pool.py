"""The workspace pool on real git repositories: reuse resets a worktree completely, leases
at once get worktrees of their own, and closing the pool leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from swarm.run._workspace._pool import WARM_AT_ONCE, WorkspacePool
from tests.test_workspace import assert_clean, repo, sh

__all__ = ["repo"]  # the fixture, used by name


@pytest.fixture
def second(repo: Path, tmp_path: Path) -> str:
    """A second commit on a side branch: calc.py fixed, old.txt deleted, new.txt added."""
    side = tmp_path / "side"
    sh(repo, "worktree", "add", "-q", "-b", "side", str(side))
    (side / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (side / "old.txt").unlink()
    (side / "new.txt").write_text("new\n")
    sh(side, "add", "-A")
    sh(side, "commit", "-qm", "second")
    sha = sh(side, "rev-parse", "HEAD").strip()
    sh(repo, "worktree", "remove", "--force", str(side))
    sh(repo, "branch", "-D", "side")
    sh(repo, "update-ref", "refs/swarm-test/second", sha)  # keep the commit reachable
    return sha


async def test_a_finished_worktree_is_reset_for_the_next_subtask(repo: Path, second: str) -> None:
    base = sh(repo, "rev-parse", "HEAD").strip()
    pool = WorkspacePool(repo, "r1", keep=["venv"])
    try:
        async with pool.lease(base, "s1") as ws:
            first_path = ws.path
            (ws.path / "calc.py").write_text("broken\n")
            (ws.path / "scratch.py").write_text("agent's file\n")
            (ws.path / "build" / "out").mkdir(parents=True)
            (ws.path / "venv").mkdir()
            (ws.path / "venv" / "marker").write_text("brought by include\n")
            sh(ws.path, "add", "scratch.py")  # staged, too
            ws.written.note("scratch.py")
        async with pool.lease(second, "s2") as ws:
            assert ws.path == first_path and ws.base == second
            assert (ws.path / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
            assert not (ws.path / "old.txt").exists() and (ws.path / "new.txt").exists()
            assert not (ws.path / "scratch.py").exists() and not (ws.path / "build").exists()
            assert (ws.path / "venv" / "marker").exists()  # kept: `include:` brought it
            assert sh(ws.path, "status", "--porcelain", "--untracked-files=no") == ""
            assert sh(ws.path, "rev-parse", "HEAD").strip() == second
            assert ws.written.paths() == frozenset()
            assert await ws.patch() == ""
        assert (pool.made, pool.reused) == (1, 1)
    finally:
        await pool.aclose()
    sh(repo, "update-ref", "-d", "refs/swarm-test/second")
    assert_clean(repo)


async def test_leases_at_once_get_worktrees_of_their_own_and_close_removes_all(
    repo: Path,
) -> None:
    base = sh(repo, "rev-parse", "HEAD").strip()
    pool = WorkspacePool(repo, "r2")
    paths: list[Path] = []

    all_in, hold = anyio.Event(), anyio.Event()

    async def work(name: str) -> None:
        async with pool.lease(base, name) as ws:
            paths.append(ws.path)
            (ws.path / f"{name}.txt").write_text(name)
            if len(paths) == 5:
                all_in.set()
            await hold.wait()  # every lease is held at once

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(work, f"s{i}")
        await all_in.wait()
        hold.set()
    assert len(set(paths)) == 5 and pool.made == 5
    async with pool.lease(base, "later") as ws:  # any of them, reset
        assert ws.path in paths and not list(ws.path.glob("s*.txt"))
    await pool.aclose()
    assert_clean(repo)


async def test_a_worktree_git_cannot_reset_is_replaced(repo: Path) -> None:
    base = sh(repo, "rev-parse", "HEAD").strip()
    pool = WorkspacePool(repo, "r3")
    async with pool.lease(base, "s1") as ws:
        (ws.path / ".git").unlink()  # an agent without a sandbox broke it
    async with pool.lease(base, "s2") as ws:
        assert (ws.path / "calc.py").exists() and (ws.path / ".git").exists()
    assert (pool.made, pool.reused) == (2, 0)
    await pool.aclose()
    assert_clean(repo)


async def test_warming_makes_worktrees_that_leases_then_take(repo: Path, second: str) -> None:
    base = sh(repo, "rev-parse", "HEAD").strip()
    pool = WorkspacePool(repo, "r5")
    await pool.warm(base, 2)
    assert pool.made == 2
    async with pool.lease(base, "s1") as ws:  # made at its base: taken as it is
        assert (ws.path / "calc.py").exists() and ws.base == base
    assert (pool.made, pool.reused) == (2, 0)
    async with pool.lease(second, "s2") as a, pool.lease(second, "s3") as b:
        for ws in (a, b):  # made at another base, or used: reset to this one
            assert ws.base == second and (ws.path / "new.txt").exists()
            assert sh(ws.path, "rev-parse", "HEAD").strip() == second
    assert (pool.made, pool.reused) == (2, 2)
    await pool.aclose()
    assert_clean(repo)
    sh(repo, "update-ref", "-d", "refs/swarm-test/second")


async def test_a_cancelled_warming_finishes_the_worktrees_it_was_making(repo: Path) -> None:
    base = sh(repo, "rev-parse", "HEAD").strip()
    pool = WorkspacePool(repo, "r6")
    with anyio.CancelScope() as scope:
        scope.cancel()  # the plan is ready at once: the warming stops as it starts
        await pool.warm(base, 8)
    assert pool.made == WARM_AT_ONCE  # each worker's worktree, finished, not thrown away
    async with pool.lease(base, "s1") as ws:
        assert (ws.path / "calc.py").exists()
    assert (pool.made, pool.reused) == (WARM_AT_ONCE, 0)
    await pool.aclose()
    assert_clean(repo)


async def test_a_lease_cancelled_while_resetting_goes_back_and_is_removed(repo: Path) -> None:
    base = sh(repo, "rev-parse", "HEAD").strip()
    pool = WorkspacePool(repo, "r4")
    async with pool.lease(base, "s1"):
        pass
    with anyio.CancelScope() as scope:
        scope.cancel()  # cancelled before its reset can finish
        async with pool.lease(base, "s2"):
            pytest.fail("the lease should not have started")
    await pool.aclose()
    assert_clean(repo)
