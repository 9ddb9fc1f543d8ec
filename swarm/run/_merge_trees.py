"""Check trees: the worktrees where the merge queue builds and checks its batches.

A batch is built as a chain of commits, one per subtask (so attribution is kept), on top of
the commit it sits on: the integration head, or the tip of the batch ahead of it when it is
checked speculatively. The chain is built and its tip checked in a tree of its own, so
several batches (and the prefixes of a red batch being split) check at once without
touching the integration branch, which only ever fast-forwards to a green tip.

`TreePool` keeps up to `size` detached worktrees under
`<git-common-dir>/swarm-worktrees/<run-id>/_check-<n>`, each prepared once for the checks
(`include:`, `setup:`) and reused: one is held by one batch (or one prefix check) at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio

from swarm.errors import WorkspaceError
from swarm.run._git import admin_dir, git, hook_env, repo_lock
from swarm.run.environment import CheckEnvironment

__all__ = ["IDENTITY", "CheckTree", "Patch", "Step", "TreePool"]

ADD_TIMEOUT_S = 60.0
IDENTITY = ("-c", "user.name=swarm", "-c", "user.email=swarm@localhost")
"""Who swarm's commits are by, whatever the machine's git config says."""


@dataclass(frozen=True)
class Patch:
    """One subtask's change, as the merge queue commits it."""

    name: str
    title: str
    patch: str

    @property
    def message(self) -> str:
        return f"swarm: {self.name}: {self.title}"


StepKind = Literal["committed", "empty", "conflict", "refused"]


@dataclass(frozen=True)
class Step:
    """What building one patch into a chain gave: a commit, or why not."""

    kind: StepKind
    commit: str | None = None
    output: str = ""
    """git's message for a conflict; the hook's output when a commit hook refused."""


class CheckTree:
    """One detached worktree of the pool."""

    def __init__(self, path: Path, hooks: bool) -> None:
        self.path, self.hooks = path, hooks

    async def goto(self, commit: str) -> None:
        """Check `commit` out here (what an earlier check left untracked stays)."""
        await self._unlock()
        await git("reset", "--hard", "--quiet", commit, cwd=self.path)

    async def build(self, base: str, patches: Sequence[Patch]) -> list[Step]:
        """Commit each patch on `base`, in order, one commit each; the tree ends at the
        chain's tip. A patch that does not apply (or that a hook refuses) is left out."""
        await self.goto(base)
        steps: list[Step] = []
        for p in patches:
            step = await self._add(p)
            if step.kind not in ("committed", "empty"):
                await git("reset", "--hard", "--quiet", "HEAD", cwd=self.path)
            steps.append(step)
        committed = [i for i, s in enumerate(steps) if s.kind == "committed"]
        if committed:  # one process names every commit of the chain
            shas = (await git("rev-list", "--reverse", f"{base}..HEAD", cwd=self.path)).split()
            for i, sha in zip(committed, shas, strict=True):
                steps[i] = Step("committed", sha)
        return steps

    async def _add(self, p: Patch) -> Step:
        text = p.patch if p.patch.endswith("\n") else p.patch + "\n"
        try:
            await git(
                "apply",
                "--3way",
                "--index",
                "--whitespace=nowarn",
                cwd=self.path,
                input=text.encode("utf-8", "surrogateescape"),
            )
        except WorkspaceError as exc:
            return Step("conflict", output=str(exc))
        verify = () if self.hooks else ("--no-verify",)
        try:
            await git(
                *IDENTITY,
                "commit",
                "--quiet",
                *verify,
                "-m",
                p.message,
                cwd=self.path,
                env=hook_env() if self.hooks else None,
            )
        except WorkspaceError as exc:
            if "nothing to commit" in str(exc) or "nothing added to commit" in str(exc):
                return Step("empty")  # its change is already on the base
            return Step("refused", output=str(exc))
        return Step("committed")

    async def _unlock(self) -> None:
        """Drop an `index.lock` a cancelled git command left: the tree is ours alone."""
        admin = admin_dir(self.path)
        if admin is not None:
            with contextlib.suppress(FileNotFoundError):
                await anyio.Path(admin / "index.lock").unlink()


class TreePool:
    """Up to `size` check trees, made on first use and removed when the pool closes."""

    def __init__(
        self,
        repo: Path,
        root: Path,
        *,
        size: int,
        environment: CheckEnvironment | None = None,
        hooks: bool = False,
    ) -> None:
        self.repo, self.root = repo, root
        self.environment, self.hooks = environment, hooks
        self._limit = anyio.CapacityLimiter(size)
        self._idle: list[CheckTree] = []
        self._made: list[Path] = []

    @asynccontextmanager
    async def tree(self) -> AsyncIterator[CheckTree]:
        """A tree held for the block (waiting for one when all are held)."""
        async with self._limit:
            tree = self._idle.pop() if self._idle else await self._make()
            try:
                yield tree
            finally:
                self._idle.append(tree)

    async def _make(self) -> CheckTree:
        path = self.root / f"_check-{len(self._made)}"
        self._made.append(path)
        # never half made (git leaves a cancelled add locked): shielded, and bounded
        with anyio.fail_after(ADD_TIMEOUT_S, shield=True):
            async with await repo_lock(self.repo):
                await git("worktree", "add", "--quiet", "--detach", str(path), cwd=self.repo)
        if self.environment is not None:
            await self.environment.prepare(path)
        return CheckTree(path, self.hooks)

    async def close(self) -> None:
        """Remove every tree the pool made (bounded: callers shield it)."""
        await remove_trees(self.repo, self._made)
        self._made.clear()
        self._idle.clear()


async def remove_trees(repo: Path, paths: Sequence[Path]) -> None:
    """Remove check trees (this run's, or a killed run's found on resume)."""
    if not paths:
        return
    async with await repo_lock(repo):
        for path in paths:
            with contextlib.suppress(WorkspaceError):
                # twice: a locked worktree (an add cut short by a kill) goes too
                await git("worktree", "remove", "--force", "--force", str(path), cwd=repo)
        await git("worktree", "prune", cwd=repo)
