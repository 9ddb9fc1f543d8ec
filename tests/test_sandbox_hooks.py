"""`hooks: run` on a read-only view of the repository (issue 34): a hook's git command
writes its objects to a directory of its own, checked before they enter the user's store,
and a HEAD a hook moved is put back."""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

import pytest

from swarm._sandbox import BwrapSandbox, sandboxed_git
from swarm._sandbox._objects import adopt
from swarm.errors import WorkspaceError
from swarm.run._merge._trees import IDENTITY
from swarm.run._workspace import Workspace, git, hook_env
from tests.sandboxing import needs_bwrap
from tests.test_sandbox import _plant, repo

__all__ = ["repo"]


def _loose(repo: Path, store: Path, data: bytes) -> str:
    """Write `data` as a blob of `repo` into the object directory `store`; its name."""
    env = {"GIT_OBJECT_DIRECTORY": str(store), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        input=data,
        capture_output=True,
        env=env,
        check=True,
        cwd=repo,
    )
    return done.stdout.decode().strip()


def test_adopt_takes_in_checked_objects_and_refuses_a_forged_one(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path / "r")], check=True)
    store = tmp_path / "r" / ".git" / "objects"
    private = tmp_path / "private"
    private.mkdir()
    good = _loose(tmp_path / "r", private, b"fine\n")
    assert adopt(private, store) == 1
    assert (store / good[:2] / good[2:]).is_file()
    assert adopt(private, store) == 0  # the store has it already
    forged = "ab" + "0" * 38  # a name that is not the hash of what it holds
    (private / "ab").mkdir()
    (private / "ab" / forged[2:]).write_bytes(zlib.compress(b"blob 4\0evil"))
    with pytest.raises(WorkspaceError, match=f"object {forged}"):
        adopt(private, store)
    assert not (store / "ab" / forged[2:]).exists()


@needs_bwrap
async def test_a_hook_that_points_head_at_a_branch_is_refused_and_put_back(repo: Path) -> None:
    _plant(repo, "pre-commit", "git symbolic-ref HEAD refs/heads/elsewhere; exit 0")
    async with Workspace.open(repo, name="w") as ws:
        branch = await git("symbolic-ref", "HEAD", cwd=ws.path)
        before = await git("rev-parse", "HEAD", cwd=ws.path)
        (ws.path / "app.py").write_text("x = 4\n")
        await git("add", "app.py", cwd=ws.path)
        with pytest.raises(WorkspaceError, match="a hook pointed HEAD elsewhere"):
            await sandboxed_git(
                BwrapSandbox(), *IDENTITY, "commit", "-qm", "m", cwd=ws.path, env=hook_env()
            )
        assert await git("symbolic-ref", "HEAD", cwd=ws.path) == branch
        assert await git("rev-parse", "HEAD", cwd=ws.path) == before


@needs_bwrap
async def test_a_hooked_commit_moves_only_its_own_branch(repo: Path) -> None:
    _plant(repo, "pre-commit", "echo formatted >> app.py; git add app.py; exit 0")
    main = await git("symbolic-ref", "HEAD", cwd=repo)
    main_sha = await git("rev-parse", "HEAD", cwd=repo)
    async with Workspace.open(repo, name="w") as ws:
        branch = await git("symbolic-ref", "HEAD", cwd=ws.path)
        (ws.path / "app.py").write_text("x = 5\n")
        await git("add", "app.py", cwd=ws.path)
        await sandboxed_git(
            BwrapSandbox(), *IDENTITY, "commit", "-qm", "m", cwd=ws.path, env=hook_env()
        )
        assert await git("symbolic-ref", "HEAD", cwd=ws.path) == branch
        shown = await git("show", "HEAD:app.py", cwd=ws.path)  # the hook's object, taken in
        assert shown == "x = 5\nformatted"
        assert await git("fsck", "--no-dangling", cwd=repo) == ""
    assert await git("symbolic-ref", "HEAD", cwd=repo) == main
    assert await git("rev-parse", "HEAD", cwd=repo) == main_sha
