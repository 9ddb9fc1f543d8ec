"""A run's worktrees, handed on: a subtask that finishes leaves its worktree to the next.

Making a git worktree takes the repository's lock (git reads every worktree's record when
it adds one), and removing one is thousands of unlinks plus its branch: under a burst of a
hundred agents both queue behind the lock and become most of the run's makespan. A pool
makes only as many worktrees as work at once, and gives a finished one to the next subtask
reset to its base (`Workspace.reset`: `git reset --hard` and `git clean`, no lock, only
the files that differ written). The pool removes its worktrees when the run ends
(`aclose`); a killed run's are removed by `cleanup_stale` at the next start, like any
workspace whose owner is gone.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.lowlevel

from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.errors import WorkspaceError
from swarm.run._workspace import CLEANUP_TIMEOUT_S, Workspace

__all__ = ["WorkspacePool"]

log = logging.getLogger(__name__)

WARM_AT_ONCE = 4
"""Worktrees made at once ahead of need."""


class WorkspacePool:
    """Worktrees of `repo` for run `run_id`, leased one subtask at a time."""

    def __init__(
        self, repo: Path, run_id: str, *, keep: Sequence[str] = (), disk_mb: int | None = None
    ) -> None:
        self.repo, self.run_id = repo, run_id
        self.keep = tuple(keep)
        """Untracked paths a reset leaves in place (what `include:` brought)."""
        self.disk_mb = disk_mb
        """Each worktree's disk quota (`Workspace.open`)."""
        self.made = 0
        """Worktrees made so far (each leased one is either made or reused)."""
        self.reused = 0
        self._idle: list[Workspace] = []
        self._fresh: list[Workspace] = []
        """Made ahead (`warm`) and never leased: as they were made, at their base."""

    @asynccontextmanager
    async def lease(self, base: str, name: str) -> AsyncIterator[Workspace]:
        """A worktree at `base` for subtask `name`'s block; given back to the pool after it,
        on every exit path (the next lease resets it, or `aclose` removes it)."""
        ws = await self._take(base, name)
        try:
            yield ws
        finally:
            self._idle.append(ws)

    async def _take(self, base: str, name: str) -> Workspace:
        fresh = next((ws for ws in self._fresh if ws.base == base), None)
        if fresh is not None:  # nothing to reset: a hundred agents start without 200 gits
            self._fresh.remove(fresh)
            return fresh
        self._idle[:0] = self._fresh  # made at another base: reset, after the used ones
        self._fresh.clear()
        while self._idle:
            ws = self._idle.pop()
            attrs: dict[str, str | bool] = {sc.WORKSPACE_NAME: name, sc.WORKSPACE_REUSED: True}
            try:
                with tracer().start_as_current_span(f"{sc.WORKSPACE_SPAN} open", attributes=attrs):
                    await ws.reset(base, keep=self.keep)
            except WorkspaceError as exc:  # a worktree git cannot reset: made anew instead
                log.warning("could not reuse workspace %s: %s", ws.path, exc)
                await ws.close()
                continue
            except BaseException:
                self._idle.append(ws)  # cancelled mid-reset: the next lease resets it again
                raise
            self.reused += 1
            return ws
        return await self._make(base, label=name)

    async def _make(self, base: str, *, label: str) -> Workspace:
        self.made += 1
        name = f"w{self.made:03d}"
        return await Workspace.create(
            self.repo,
            base=base,
            name=name,
            run_id=self.run_id,
            label=label,
            disk_mb=self.disk_mb,
        )

    async def warm(self, base: str, count: int) -> None:
        """Make worktrees at `base` until the pool has made `count`, `WARM_AT_ONCE` at a
        time (checking files out is mostly waiting on the disk): run it while the run
        waits for its baseline check and planner, and cancel it then (the worktrees being
        made are finished first). A worktree git cannot make ends the warming; the lease
        that needs one will say why."""
        async with anyio.create_task_group() as tg:
            for _ in range(WARM_AT_ONCE):
                tg.start_soon(self._warm_one, base, count)

    async def _warm_one(self, base: str, count: int) -> None:
        while self.made < count:
            # a worktree half made is finished, not thrown away, when the warming stops
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
                try:
                    self._fresh.append(await self._make(base, label="warm"))
                except WorkspaceError as exc:
                    log.warning("stopped making workspaces ahead of need: %s", exc)
                    return
            await anyio.lowlevel.checkpoint()  # where a cancelled warming stops

    async def aclose(self) -> None:
        """Remove every worktree the pool holds; bounded, and done when cancelled too."""
        idle, self._idle, self._fresh = [*self._idle, *self._fresh], [], []
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                for ws in idle:
                    tg.start_soon(ws.close)
