"""The merge queue: green patches land on the integration branch in checked batches.

The integration branch `swarm/<run-id>` lives in its own worktree, so the user's checkout
and current branch are never touched. Patches are built into batches and checked in check
trees of their own, several at once and speculatively one on top of the other
(`swarm.run._merge._pipeline`); the integration branch only ever fast-forwards to a green
tip. A conflict or a red check goes back to the coordinator, which sends a fixer to rebase
on the new head. `[merge] batch_size = {min = 1, max = 1}` with `max_parallel_checks = 1`
is the one-at-a-time queue.

Every landed patch is one commit `swarm: <subtask>: <title>` on the branch, and the branch
is the truth: `landed()` reads it back, so a run killed between a landing and its journal
write resumes without merging anything twice. `Merger` is the protocol the coordinator
needs, so a simulated queue can stand in for this one.

The pipeline, and the words its modules use::

    green patch --> waiting (ordered: what others wait for first)
                      |  batch: the next waiting patches, sized by the backlog
                      v
    line: slot 1 [build on head] -> slot 2 [build on slot 1's tip] -> ...  (_line, _pipeline)
                      |  each build is a chain of commits checked in a check tree (_trees)
                      v
           green at the front --> the integration branch fast-forwards (landed)
           red --> split: prefixes checked at once to find the culprit (_split)
                   probe: unjudged patches checked on the head beside the line (_probe)

- *patch*: one subtask's green change, as a diff; *batch*: patches that land as one.
- *slot*: a place in the line; *build*: a chain of commits for a slot, checked in a tree.
- *speculation*: a slot's build sits on the build ahead, assuming it green; an *alternate*
  leaves out slots ahead, as if they were red.
- *linked* patches may clash (one's added lines name a module the other changes:
  `_links`); they are batched together.
- *culprit*: the patch a red batch's split blames; it goes back to a fixer, the others on.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio

from swarm.agent._tool import WriteLog
from swarm.config import MergeConfig
from swarm.errors import WorkspaceError
from swarm.run._check import Checker, CheckFn, CheckResult
from swarm.run._environment import CheckEnvironment
from swarm.run._git import write_owner
from swarm.run._merge._pipeline import Pipeline, Request, Rules
from swarm.run._merge._trees import Patch, TreePool, commit, remove_trees
from swarm.run._outcome import MergeKind, MergeResult
from swarm.run._report import MergeStats
from swarm.run._workspace import git, repo_lock, worktree_diff

__all__ = ["MergeKind", "MergeQueue", "MergeResult", "MergeStats", "Merger", "QueueSettings"]

CLEANUP_TIMEOUT_S = 30.0


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

    @property
    def written(self) -> WriteLog:
        """The files the final verification's fixers wrote in `worktree`."""
        ...

    @property
    def stats(self) -> MergeStats:
        """What the queue has done so far."""
        ...

    async def merge(
        self,
        name: str,
        title: str,
        patch: str,
        *,
        check: str | None,
        order: int = 0,
        waited_on: bool = False,
    ) -> MergeResult:
        """Land `patch` (checked with `check` when alone); `order`: its place in the line
        (lower first, then arrival; the coordinator's is `Plan.merge_rank`); `waited_on`:
        other subtasks wait for it (it is batched only with such patches)."""
        ...

    async def landed(self) -> Mapping[str, str]:
        """Subtask -> commit for every patch already on the branch (a resumed run's too)."""
        ...

    def expect(self, coming: int) -> None:
        """`coming` patches are still on their way (subtasks coding, rebasing or yet to
        start): the queue may gather them into fewer batches."""
        ...

    async def run_check(self, command: str) -> CheckResult: ...

    async def reset(self) -> None:
        """Drop uncommitted changes in the integration worktree."""
        ...

    async def commit(self, message: str, *, stage_edits: bool = False) -> str: ...


@dataclass(frozen=True)
class QueueSettings:
    """How the merge queue checks and commits."""

    checker: CheckFn
    """Runs a check command in a worktree."""
    environment: CheckEnvironment | None = None
    """Prepares the integration worktree and the check trees (`include:`, `setup:`)."""
    hooks: bool = False
    """Run the repository's commit hooks (`hooks: run`); they never run otherwise."""
    batch_check: str | None = None
    """The check a batch of several patches gets (the whole check)."""
    config: MergeConfig = field(default_factory=MergeConfig)
    """Batch sizes and checks in flight (`[merge]`)."""


_SUBJECT = re.compile(r"^swarm: (?P<name>[^:\s]+): ")


class MergeQueue:
    """Lands green patches on the integration branch; see the module docstring."""

    def __init__(self, worktree: Path, branch: str, settings: QueueSettings) -> None:
        self.worktree = worktree
        """The integration branch's own worktree."""
        self.branch = branch
        self.settings = settings
        self.written = WriteLog()
        """Files the final verification's fixers wrote here (their contexts note here)."""
        self.base = ""
        """The commit the run started from."""
        self.stats = MergeStats()
        self._pipeline: Pipeline | None = None
        self._arrived: dict[str, int] = {}
        """By subtask: when its first patch came (how many subtasks' came before). A
        rebased patch keeps that place: sent to the back of the line, a culprit's fix
        waited behind every patch that came after the first one, 9 s in a 300-subtask run
        with 5 % red patches."""

    @property
    def head(self) -> str:
        """Commit at the tip of the integration branch."""
        return self._pipeline.head if self._pipeline is not None else self.base

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
        """Create (or, on resume, reuse) `swarm/<run-id>` at `base` and check it out apart;
        the queue works until the block ends, then its worktrees are removed."""
        branch = f"swarm/{run_id}"
        common = await git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=repo)
        # "_integration", "_check-<n>": subtask ids are plain names, so none can collide
        root = Path(common) / "swarm-worktrees" / run_id
        path = root / "_integration"
        await remove_trees(repo, [path, *sorted(root.glob("_check-*"))])  # a killed run's
        write_owner(path)  # like every swarm worktree: a later start clears it if we die
        async with await repo_lock(repo):  # git worktree commands on one repo race otherwise
            if not await _branch_exists(repo, branch):
                await git("branch", branch, base, cwd=repo)
            await anyio.Path(root).mkdir(parents=True, exist_ok=True)
            await git("worktree", "add", "--quiet", str(path), branch, cwd=repo)
        settings = settings or QueueSettings(Checker(CheckEnvironment.resolve(repo)))
        queue = cls(path, branch, settings)
        queue.base = base
        trees = TreePool(
            repo,
            root,
            size=_trees_needed(settings.config),
            environment=settings.environment,
            hooks=settings.hooks,
        )
        try:
            head = await git("rev-parse", "HEAD", cwd=path)
            if settings.environment is not None:
                await settings.environment.prepare(path)
            await trees.fill(settings.config.parallel_checks)
            rules = Rules(settings.checker, settings.batch_check, settings.config, queue._land)
            queue._pipeline = Pipeline(rules, trees, head, queue.stats)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(queue._pipeline.run, name="merge queue")
                    tg.start_soon(trees.keep_ready, _spare_trees(settings.config), name="trees")
                    yield queue
                    tg.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                if len(group.exceptions) == 1:  # the run's own error, not a wrapper of it
                    raise group.exceptions[0] from None
                raise
        finally:
            with anyio.move_on_after(CLEANUP_TIMEOUT_S, shield=True):
                await trees.close()
                await remove_trees(repo, [path])

    async def merge(
        self,
        name: str,
        title: str,
        patch: str,
        *,
        check: str | None,
        order: int = 0,
        waited_on: bool = False,
    ) -> MergeResult:
        """Queue `patch` and wait until it has landed or been refused (see the module)."""
        if not patch.strip():
            return MergeResult("empty", self.head)
        if self._pipeline is None:
            raise RuntimeError("the merge queue is not open: `async with MergeQueue.open(...)`")
        # a rebased patch (its fixer's, its own check running or green) is not probed again
        rebased = name in self._arrived
        arrived = self._arrived.setdefault(name, len(self._arrived))
        at = (order, arrived)
        request = Request(Patch(name, title, patch), check, at, waited_on=waited_on, probed=rebased)
        self._pipeline.submit(request)
        try:
            await request.decided.wait()
        finally:
            if request.result is None:
                self._pipeline.withdraw(request)
        assert request.result is not None
        return request.result

    def expect(self, coming: int) -> None:
        if self._pipeline is not None:
            self._pipeline.expect(coming)

    async def _land(self, tip: str) -> None:
        """Fast-forward the integration branch (and its worktree) to a green tip."""
        await git("reset", "--hard", "--quiet", tip, cwd=self.worktree)

    async def landed(self) -> Mapping[str, str]:
        log = await git("log", "--format=%H %s", f"{self.base}..{self.branch}", cwd=self.worktree)
        out: dict[str, str] = {}
        for line in log.splitlines():
            sha, _, subject = line.partition(" ")
            if found := _SUBJECT.match(subject):
                out.setdefault(found["name"], sha)
        return out

    async def run_check(self, command: str) -> CheckResult:
        return await self.settings.checker(self.worktree, command)

    async def commit(self, message: str, *, stage_edits: bool = False) -> str:
        """Commit what is staged in the integration worktree, a no-op when nothing is.

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
            env = self.settings.environment
            sandbox = env.sandbox if env is not None else None
            await commit(self.worktree, message, hooks=self.settings.hooks, sandbox=sandbox)
        head = await git("rev-parse", "HEAD", cwd=self.worktree)
        if self._pipeline is not None:
            self._pipeline.head = head
        return head

    async def reset(self) -> None:
        """Back to the head: the patch's files go; untracked files (`include:`) stay."""
        await git("reset", "--hard", "--quiet", "HEAD", cwd=self.worktree)


async def _branch_exists(repo: Path, branch: str) -> bool:
    try:
        await git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", cwd=repo)
    except WorkspaceError:
        return False
    return True


def _spare_trees(config: MergeConfig) -> int:
    """The idle trees kept ready: a line's builds, its probes, alternates and a split."""
    return 8 * config.parallel_checks


def _trees_needed(config: MergeConfig) -> int:
    """The most check trees the queue may hold at once: the line's builds and their
    alternates, and beside them the red batches' splits, a tree per prefix check. Each
    of those checks is one of the check slots'; past three per batch in flight, a tree
    for every slot. With 100 slots and 4 batches, 12 trees held the splits back: 75
    tree leases of a 5 % red run waited over 0.1 s, 28 s in all (4 s with 40 trees).
    Trees are made on first use, so a run that needs few makes few."""
    return max(3 * config.parallel_checks, config.slots + config.parallel_checks)
