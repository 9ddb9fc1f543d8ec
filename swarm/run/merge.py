"""The merge queue: green patches land on the integration branch one at a time.

The integration branch `swarm/<run-id>` lives in its own worktree, so the user's checkout
and current branch are never touched. Each merge applies a patch with a three-way merge,
re-runs the check, and commits; a conflict or a red check is reported back so the
coordinator can send a fixer to rebase on the new head. `Merger` is the protocol the
coordinator needs, so a simulated queue can stand in for this one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import anyio

from swarm.agent.tool import WriteLog
from swarm.errors import WorkspaceError
from swarm.run.check import Checker, CheckFn, CheckResult, tree_key
from swarm.run.environment import CheckEnvironment
from swarm.run.workspace import git, hook_env, repo_lock, worktree_diff

__all__ = ["MergeQueue", "MergeResult", "Merger"]

MergeKind = Literal["merged", "empty", "conflict", "red"]


@dataclass(frozen=True)
class MergeResult:
    kind: MergeKind
    commit: str | None = None
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.kind in ("merged", "empty")


class Merger(Protocol):
    """What the coordinator needs of a merge queue."""

    @property
    def head(self) -> str:
        """Commit at the tip of the integration branch."""
        ...

    @property
    def worktree(self) -> Path:
        """Where the final verification's fixers work."""
        ...

    async def merge(
        self, name: str, title: str, patch: str, *, check: str | None
    ) -> MergeResult: ...

    async def run_check(self, command: str) -> CheckResult: ...

    async def reset(self) -> None:
        """Drop uncommitted changes in the integration worktree."""
        ...

    async def commit(self, message: str, *, stage_edits: bool = False) -> str: ...


@dataclass(frozen=True)
class QueueSettings:
    """How the merge queue checks and commits."""

    checker: CheckFn
    """Runs a check command in the integration worktree."""
    environment: CheckEnvironment | None = None
    """Prepares the integration worktree (`include:`, `setup:`); None: nothing to do."""
    hooks: bool = False
    """Run the repository's commit hooks (`hooks: run`); they never run otherwise."""
    batch_check: str | None = None
    """The check a batch of several patches gets (the whole check); None: one at a time."""


@dataclass
class _Request:
    """One patch waiting to be merged, and, once it is, how that went."""

    name: str
    title: str
    patch: str
    check: str | None
    result: MergeResult | None = None


class MergeQueue:
    """Serialises merges onto the integration branch, checking after each one."""

    def __init__(self, worktree: Path, branch: str, settings: QueueSettings) -> None:
        self.worktree = worktree
        """The integration branch's own worktree."""
        self.branch = branch
        self.settings = settings
        self.written = WriteLog.at(worktree)
        """Files the final verification's fixers wrote here (held for the queue's life)."""
        self.head = ""
        """Commit at the tip of the integration branch."""
        self._lock = anyio.Lock()
        self._pending: list[_Request] = []

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        repo: Path,
        *,
        run_id: str,
        base: str,
        settings: QueueSettings | None = None,
    ) -> AsyncIterator[MergeQueue]:
        """Create (or, on resume, reuse) `swarm/<run-id>` at `base` and check it out apart."""
        branch = f"swarm/{run_id}"
        common = await git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=repo)
        # "_integration": subtask ids are plain names, so none can collide with it
        path = Path(common) / "swarm-worktrees" / run_id / "_integration"
        lock = await repo_lock(repo)  # git worktree commands on one repo race otherwise
        async with lock:
            if not await _branch_exists(repo, branch):
                await git("branch", branch, base, cwd=repo)
            if await anyio.Path(path).exists():
                await git("worktree", "remove", "--force", str(path), cwd=repo)
            await git("worktree", "prune", cwd=repo)
            await anyio.Path(path.parent).mkdir(parents=True, exist_ok=True)
            await git("worktree", "add", "--quiet", str(path), branch, cwd=repo)
        settings = settings or QueueSettings(Checker(CheckEnvironment.resolve(repo)))
        queue = cls(path, branch, settings)
        try:
            queue.head = await git("rev-parse", "HEAD", cwd=path)
            if settings.environment is not None:
                await settings.environment.prepare(path)
            yield queue
        finally:
            with anyio.move_on_after(30, shield=True):
                async with lock:
                    await git("worktree", "remove", "--force", str(path), cwd=repo)

    async def merge(self, name: str, title: str, patch: str, *, check: str | None) -> MergeResult:
        """Apply `patch`, run `check`, commit; or undo and say why not.

        Patches that arrive while a merge is in progress are merged together as one batch
        (see `_merge_batch`): the check runs once for all of them."""
        request = _Request(name, title, patch, check)
        self._pending.append(request)
        while request.result is None:
            async with self._lock:
                if request.result is None:
                    batch, self._pending = self._pending, []
                    try:
                        await self._merge_batch(batch)
                    finally:  # a cancelled batch: its waiters take their requests back
                        self._pending[:0] = [r for r in batch if r.result is None]
        return request.result

    async def _merge_batch(self, batch: list[_Request]) -> None:
        """Commit every patch of the batch that applies, in order and one commit each
        (attribution kept), then check the result once. Red: back to where the batch
        started, and merge the patches one at a time, which finds the culprit."""
        whole = self.settings.batch_check
        if len(batch) == 1 or whole is None:
            for r in batch:
                r.result = await self._merge(r.name, r.title, r.patch, r.check)
            return
        start = self.head
        fitting: list[_Request] = []
        try:
            for r in batch:
                if not r.patch.strip():
                    r.result = MergeResult("empty", self.head)
                elif (conflict := await self._apply(r.patch)) is not None:
                    await self.reset()  # back to the last commit: the others stay
                    r.result = MergeResult("conflict", output=conflict)
                else:
                    fitting.append(r)
                    r.result = MergeResult(
                        "merged", await self.commit(f"swarm: {r.name}: {r.title}")
                    )
            green = (
                len(fitting) < 2
                or (await self.settings.checker(self.worktree, whole, priority=True)).passed
            )
        except BaseException:
            with anyio.move_on_after(30, shield=True):
                await self._rewind(start)
            for r in fitting:
                r.result = None
            raise
        if len(fitting) == 1 or not green:  # a lone patch gets its own (reusable) check
            await self._rewind(start)
            for r in fitting:
                r.result = await self._merge(r.name, r.title, r.patch, r.check)

    async def _rewind(self, commit: str) -> None:
        """Move the integration branch back to `commit` (undoing a batch's commits)."""
        await git("reset", "--hard", "--quiet", commit, cwd=self.worktree)
        self.head = commit

    async def _apply(self, patch: str) -> str | None:
        """Apply `patch` to the integration worktree and index; git's message on conflict."""
        with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as f:
            f.write(patch if patch.endswith("\n") else patch + "\n")
        try:
            await git(
                "apply", "--3way", "--index", "--whitespace=nowarn", f.name, cwd=self.worktree
            )
        except WorkspaceError as exc:
            return str(exc)
        finally:
            os.unlink(f.name)
        return None

    async def _merge(self, name: str, title: str, patch: str, check: str | None) -> MergeResult:
        key = tree_key(self.head, patch)  # the tree a subtask checked at this head: reused
        if not patch.strip():
            return MergeResult("empty", self.head)
        if (conflict := await self._apply(patch)) is not None:
            await self.reset()
            return MergeResult("conflict", output=conflict)
        if check:
            result = await self.settings.checker(self.worktree, check, key=key, priority=True)
            if not result.passed:
                await self.reset()
                return MergeResult("red", output=result.output)
        return MergeResult("merged", await self.commit(f"swarm: {name}: {title}"))

    async def run_check(self, command: str) -> CheckResult:
        return await self.settings.checker(self.worktree, command)

    async def commit(self, message: str, *, stage_edits: bool = False) -> str:
        """Commit what is staged (a merged patch), a no-op when nothing is.

        `stage_edits` first stages the final verification's fixes: edits to tracked files and
        the files the fixers' tools wrote; other untracked files (a check's artifacts, the
        `include:` files) are never committed.
        """
        if stage_edits:  # what a patch would hold: never artifacts, never .swarmignore
            fixes = await worktree_diff(self.worktree, "HEAD", untracked=self.written.paths())
            if fixes.strip():
                await git(
                    "apply",
                    "--cached",
                    "--binary",
                    "-",
                    cwd=self.worktree,
                    input=fixes.encode("utf-8", "surrogateescape"),
                )
        staged = await git("diff", "--cached", "--name-only", cwd=self.worktree)
        if staged.strip():
            hooks = ("--no-verify",) if not self.settings.hooks else ()
            await git(
                *_IDENTITY,
                "commit",
                "--quiet",
                *hooks,
                "-m",
                message,
                cwd=self.worktree,
                env=hook_env() if self.settings.hooks else None,
            )
        self.head = await git("rev-parse", "HEAD", cwd=self.worktree)
        return self.head

    async def reset(self) -> None:
        """Back to the head: the patch's files go; untracked files (`include:`) stay."""
        await git("reset", "--hard", "--quiet", "HEAD", cwd=self.worktree)


_IDENTITY = ("-c", "user.name=swarm", "-c", "user.email=swarm@localhost")


async def _branch_exists(repo: Path, branch: str) -> bool:
    try:
        await git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", cwd=repo)
    except WorkspaceError:
        return False
    return True
