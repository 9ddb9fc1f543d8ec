"""The seams of a run: where models, workspaces, checks, tools and merges come from.

A solve plugs in the real ones (git worktrees, the check in a subprocess, the coding
tools, the merge queue); `swarm simulate` plugs in a simulated world whose parts only
sleep; tests plug in in-memory parts to drive the coordinator's rules in milliseconds.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import anyio

from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._tool import Tool, WriteLog
from swarm.budget import Budget
from swarm.config import ClusterConfig, MergeConfig
from swarm.messages import ModelSettings
from swarm.model import Model
from swarm.run._check import CheckFn, CheckPlace
from swarm.run._environment import CheckEnvironment
from swarm.run._merge import Merger
from swarm.run._progress import Progress
from swarm.run._slack import RouteHints
from swarm.run._workspace import Workspace
from swarm.run._workspace._pool import WorkspacePool
from swarm.run.journal import Journal

__all__ = [
    "CheckFn",
    "Cluster",
    "ClusterOpener",
    "GitWorkspaces",
    "Merger",
    "ModelSource",
    "Pooled",
    "RunLike",
    "RunOptions",
    "Seams",
    "WorkspaceLike",
    "Workspaces",
    "is_local",
    "releasing",
    "warming",
]


class ModelSource(Protocol):
    """Gives each agent its model: by role, with an id stable across resumes."""

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model: ...


def is_local(path: Path) -> bool:
    """Whether a workspace's `path` is a directory on this machine: not a workspace on a
    cluster node, nor a simulated one. Asked without a worker thread: in a simulated
    run's virtual time, waiting for a thread lets the clock jump ahead (a deadline fires
    at once), and the answer is one `stat`."""
    return os.path.isdir(path)


class Where(Protocol):
    """Where an agent works: a directory, and the log its tools note new files in."""

    @property
    def path(self) -> Path: ...

    @property
    def written(self) -> WriteLog:
        """The files its agents' tools wrote (the workspace's patch takes the new ones)."""
        ...


@dataclass(frozen=True)
class Place:
    """A `Where` made of its two parts (the integration worktree and its log)."""

    path: Path
    written: WriteLog


class WorkspaceLike(Where, Protocol):
    """One agent's working copy: where its tools act, and its changes as a patch."""

    async def patch(self) -> str: ...

    async def apply(self, patch: str, *, reverse: bool = False) -> None:
        """Apply `patch` to its files, or take it back out (`reverse`)."""
        ...


class Workspaces(Protocol):
    """Opens a workspace at commit `base`, named after its subtask, removed on exit."""

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]: ...


class GitWorkspaces:
    """The real workspaces: a git worktree of `repo` per workspace, prepared for its checks.

    With `reuse`, a finished subtask's worktree is reset for the next one (see
    `swarm.run._workspace._pool`) and the owner of this object calls `aclose()` at the end."""

    def __init__(
        self,
        repo: Path,
        run_id: str,
        environment: CheckEnvironment | None = None,
        *,
        reuse: bool = False,
    ) -> None:
        self.repo, self.run_id = repo, run_id
        self.environment = environment or CheckEnvironment.resolve(repo)
        keep = self.environment.include
        self.disk_mb = self.environment.sandbox.policy.limits.disk_mb
        """Each worktree's disk quota (`Workspace.open`)."""
        self.pool = WorkspacePool(repo, run_id, keep=keep, disk_mb=self.disk_mb) if reuse else None

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]:
        return self._open(base, name)

    @asynccontextmanager
    async def _open(self, base: str, name: str) -> AsyncIterator[WorkspaceLike]:
        opened = (
            self.pool.lease(base, name)
            if self.pool
            else Workspace.open(
                self.repo, base=base, name=name, run_id=self.run_id, disk_mb=self.disk_mb
            )
        )
        async with opened as ws:
            if self.environment.include or self.environment.setup:
                attrs = {sc.WORKSPACE_NAME: name}
                with tracer().start_as_current_span(f"{sc.WORKSPACE_SPAN} setup", attributes=attrs):
                    await self.environment.prepare(ws.path)
            yield ws

    async def warm(self, base: str, count: int) -> None:
        """Make up to `count` worktrees at `base` ahead of need (only with `reuse`)."""
        if self.pool:
            await self.pool.warm(base, count)

    async def aclose(self) -> None:
        """Remove the worktrees kept for reuse (nothing to do without `reuse`)."""
        if self.pool:
            await self.pool.aclose()


@runtime_checkable
class Pooled(Protocol):
    """Workspaces kept for the run (`GitWorkspaces` with `reuse`): made ahead of need while
    the run waits, removed when it ends."""

    async def warm(self, base: str, count: int) -> None: ...

    async def aclose(self) -> None: ...


@asynccontextmanager
async def releasing(workspaces: object) -> AsyncIterator[None]:
    """Remove the workspaces `workspaces` keeps (`Pooled`) in the background while the
    block runs: once no subtask will start again, the final check need not wait for it."""
    async with anyio.create_task_group() as tg:
        if isinstance(workspaces, Pooled):
            tg.start_soon(workspaces.aclose)
        yield


@asynccontextmanager
async def warming(workspaces: object, base: str, count: int) -> AsyncIterator[None]:
    """Make `count` workspaces at `base` in the background while the block runs, if
    `workspaces` keeps them (`Pooled`); the block's end stops making more."""
    if not isinstance(workspaces, Pooled):
        yield
        return
    async with anyio.create_task_group() as tg:
        tg.start_soon(workspaces.warm, base, count)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


@dataclass(frozen=True)
class Seams:
    """Where a run's agents work and how their work is checked: the workspaces, the check,
    the environment and tools agents get. A `World` gives them (the real repository's, a
    simulated world's); tests give in-memory ones. None means the real implementation."""

    workspaces: Workspaces | None = None
    """Where workspaces come from (default: git worktrees of the repository)."""
    check: CheckFn | None = None
    """How a check runs (default: a `Checker` in the repository's environment)."""
    environment: CheckEnvironment | None = None
    """What agents' commands run with (default: the repository's own environment)."""
    tools: Sequence[Tool] | None = None
    """The tools agents get (default: `coding_tools()`)."""
    check_slot: Callable[[], AbstractAsyncContextManager[None]] | None = None
    """The place an agent's own `run_tests` takes among the checks (default: the default
    `Checker`'s; None with a `check` given: no limit)."""


class Cluster(Protocol):
    """Workspaces on other machines (`swarm._cluster`): a run's seams with its workspaces,
    tools and checks sent there; `place` is where the checks of those workspaces run."""

    @property
    def place(self) -> CheckPlace: ...

    def seams(self, local: Seams, *, repo: Path, run_id: str) -> Seams: ...

    @property
    def head_lost(self) -> str | None:
        """Why the run was cancelled, when it was for the cluster's head lost: the run is
        then `interrupted` with this as its error; None: it was not."""
        ...


ClusterOpener = Callable[[ClusterConfig], AbstractAsyncContextManager[Cluster]]
"""Connects to the cluster `[cluster]` names for a run (`swarm._cluster.RayCluster.open`)."""


@dataclass(frozen=True)
class RunOptions:
    """A run's knobs: agents at once, their steps, the rounds of fixing, rebasing,
    planning and retrying, compaction, and the merge queue (`[merge]`)."""

    max_agents: int = 8
    max_steps_per_agent: int = 40
    fix_rounds: int = 3
    """Fixer rounds per subtask before it is given up (or started afresh)."""
    fresh_starts: int = 1
    """Times a subtask still red after its fix rounds starts again from its base with a
    new coder, told what stayed red: fixers piling up on a broken change (a small
    model's) do worse than a clean start."""
    escalate_after: int = 1
    """Fixer rounds on the speed tier before the reasoning tier takes over."""
    rebase_rounds: int = 2
    plan_retries: int = 2
    subtask_retries: int = 2
    """Times a subtask failed by its provider calls (not by red checks) starts again."""
    subtask_retry_after_s: float = 5.0
    """Wait before such a retry, times the retry's number (`[routing]
    subtask_retry_after_s`)."""
    compaction: bool = True
    """Agents keep their history inside the model's window (False: never compact)."""
    merge: MergeConfig = field(default_factory=MergeConfig)
    """The merge queue and the checks (`[merge]`, with the task's `merge:` over it)."""

    @property
    def check_timeout_s(self) -> float:
        return self.merge.check_timeout


class RunLike(Protocol):
    """What the coordinator and the agents it makes use of their `Run`
    (`swarm.run._run`): a `Run` is one; tests give an in-memory one."""

    @property
    def id(self) -> str: ...

    @property
    def models(self) -> ModelSource:
        """Where each agent gets its model."""
        ...

    @property
    def journal(self) -> Journal: ...

    @property
    def budget(self) -> Budget: ...

    @property
    def progress(self) -> Progress: ...

    @property
    def settings(self) -> Mapping[str, ModelSettings]:
        """Model settings by role (`[settings.<role>]` in the config)."""
        ...

    @property
    def hints(self) -> RouteHints | None:
        """Where the coordinator tells the router the run's shape (None: no router)."""
        ...
