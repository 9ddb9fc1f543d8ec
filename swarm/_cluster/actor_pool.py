"""A run's workspace actors, handed on: a subtask that finishes leaves its actor to the next.

A new actor is a new worker process on its node (importing swarm: seconds on a busy node),
then the whole history as a bundle and a clone: most of a short subtask's time. The pool
keeps a finished subtask's actor and resets its clone to the next subtask's base
(`WorkspaceNode.reset`: only the commits it lacks, as an incremental bundle; `git reset
--hard`, `git clean` keeping what `include:` brought, `setup:` again).

A subtask that finds no idle actor asks Ray for a new one and waits for it (a `swarm.wait
cluster` span: the actor's start, and room on a full cluster). An actor given back while
the cluster is full goes to the longest waiter at once, whose own request is withdrawn: an
idle actor holds its CPUs, so that request would never be met. While the cluster has room
it goes idle instead, for the next subtask, and the waiters' new actors come up: handing
it over then would keep the run at fewer actors than agents whenever a subtask is shorter
than an actor's start. (A waiter whose actor Ray has not placed `STUCK_S` after room was
seen takes an idle one anyway.)

An actor that cannot be placed, cloned or reset (its node lost) fails the lease with that
error (a `NodeLost`: the coordinator notes it and starts the subtask again, elsewhere). An
actor whose call failed to come back (its node lost, the call cancelled: it may still run
there) is ended, never reused; so is one beyond the run's agent count. The pool ends every
actor it holds at the run's end (`aclose`, bounded, when cancelled too); one in use then
ends when its subtask gives it back.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from swarm._cluster.node import NodeInfo
from swarm._cluster.remote import lost_lately
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm._tracing.waits import waiting
from swarm.errors import WorkspaceError

__all__ = ["CLOSE_TIMEOUT_S", "ActorPool", "Held", "Lifecycle"]

log = logging.getLogger(__name__)

STUCK_S = 20.0
"""How long a waiter waits for its new actor before it takes an idle one instead."""
ROOM_TIMEOUT_S = 5.0
"""The longest asking the cluster whether it has room may take (then: it has)."""
CLOSE_TIMEOUT_S = 30.0
"""The longest ending a remote workspace may take, even when cancelled."""


@dataclass(eq=False)
class Held:
    """One workspace actor: where it is, the commit its clone is at ('' not cloned yet)."""

    actor: Any
    info: NodeInfo | None = None
    have: str = ""
    reusable: bool = True
    """False once a call to it failed to come back (see the module's docstring)."""
    leases: int = 0


@dataclass(frozen=True)
class Lifecycle:
    """How the pool starts, readies and ends actors (`RayWorkspaces` gives Ray's)."""

    start: Callable[[str], Awaitable[tuple[Any, NodeInfo | None]]]
    """A new actor named so, placed (waits for room; ended if cancelled meanwhile), and
    where it runs."""
    room: Callable[[], Awaitable[bool]]
    """Whether the cluster has room for one more actor now."""
    ready: Callable[[Held, str], Awaitable[None]]
    """Clone (or reset) the held actor's workspace at commit `sha`."""
    end: Callable[[Any], Awaitable[None]]
    """End an actor, bounded in time even when cancelled."""
    abandon: Callable[[Any], None]
    """End an actor at once, asking nothing of its node (thought lost): its clone stays."""


@dataclass(eq=False)
class _Waiter:
    given: anyio.Event = field(default_factory=anyio.Event)
    held: Held | None = None
    failed: Exception | None = None
    """Why its new actor could not be placed (its node lost, say): raised to the subtask
    as it is, not inside the task group's `ExceptionGroup`."""


class ActorPool:
    """Workspace actors leased one subtask at a time; see the module's docstring."""

    def __init__(self, life: Lifecycle) -> None:
        self.life = life
        self.limit: int | None = None
        """The most actors kept (the run's agents, from `warm`); None: no bound."""
        self.started = 0
        self.reused = 0
        self.dropped = 0
        """Actors ended before the run's end: lost, or whose call was cut short."""
        self._live = 0
        self._idle: list[Held] = []
        self._waiters: deque[_Waiter] = deque()
        self._closed = False

    @asynccontextmanager
    async def lease(self, sha: str, name: str) -> AsyncIterator[Held]:
        """An actor whose clone is at commit `sha`, for subtask `name`'s block; given back
        after it (or ended: see the module's docstring)."""
        held = await self._take(sha, name)
        try:
            yield held
        finally:
            await self._give_back(held)

    async def _take(self, sha: str, name: str) -> Held:
        held = await self._acquire(name)
        attrs: dict[str, str | bool] = {
            sc.WORKSPACE_NAME: name,
            sc.WORKSPACE_REUSED: bool(held.have),
        }
        try:
            with tracer().start_as_current_span(f"{sc.WORKSPACE_SPAN} open", attributes=attrs):
                await self.life.ready(held, sha)
        except BaseException:
            await self._discard(held)
            raise
        held.leases += 1
        self.reused += held.leases > 1
        return held

    async def _acquire(self, name: str) -> Held:
        """An idle actor, or a new one once placed, or one given back while waiting."""
        if (idle := self._pop_idle()) is not None:
            return idle
        waiter = _Waiter()
        self._waiters.append(waiter)
        try:
            with waiting(sc.WAIT_CLUSTER, attributes={sc.WORKSPACE_NAME: name}):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._place_for, waiter, name)
                    while not waiter.given.is_set():
                        with anyio.move_on_after(STUCK_S):
                            await waiter.given.wait()
                        if not waiter.given.is_set():
                            if (idle := self._pop_idle()) is not None:
                                waiter.held = idle
                                waiter.given.set()
                    tg.cancel_scope.cancel()
        except BaseException:
            if waiter.held is not None:  # given one, then cancelled: for the next
                await self._give_back(waiter.held)
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        if waiter.held is None and waiter.failed is not None:
            raise waiter.failed
        assert waiter.held is not None
        return waiter.held

    def _pop_idle(self) -> Held | None:
        """An idle actor on a node this driver has not seen lost lately. One on a lost
        node is never handed out (a subtask started again after losing that node was
        handed its idle actor, and lost it at once) and is abandoned at once: ending it
        the usual way could wait on its node, and one kept until `aclose` held its CPUs
        when the node was not lost after all, so that a subtask waiting for room there
        waited for ever."""
        lost = lost_lately()
        while self._idle:
            held = self._idle.pop()
            if held.info is None or held.info.node not in lost:
                return held
            self._live -= 1
            self.dropped += 1
            self.life.abandon(held.actor)
        return None

    async def _place_for(self, waiter: _Waiter, name: str) -> None:
        self._live += 1
        try:
            actor, where = await self.life.start(name)
        except Exception as exc:
            self._live -= 1
            if waiter.held is None:
                waiter.failed = exc
                waiter.given.set()
            return
        except BaseException:
            self._live -= 1
            raise
        self.started += 1
        held = Held(actor, where)
        if waiter.held is None:
            waiter.held = held
            waiter.given.set()
        else:  # given one meanwhile; not cancelled yet
            await self._give_back(held)

    async def _give_back(self, held: Held) -> None:
        if not held.reusable:
            await self._discard(held)
            return
        full = False
        if self._waiters:
            with anyio.CancelScope(shield=True), anyio.move_on_after(ROOM_TIMEOUT_S):
                full = not await self.life.room()
        if full:
            while self._waiters:
                waiter = self._waiters.popleft()
                if waiter.held is None:
                    waiter.held = held
                    waiter.given.set()
                    return
        if self._closed or (self.limit is not None and self._live > self.limit):
            await self._drop(held)
            return
        self._idle.append(held)

    async def _discard(self, held: Held) -> None:
        self.dropped += 1
        await self._drop(held)

    async def _drop(self, held: Held) -> None:
        self._live -= 1
        await self.life.end(held.actor)

    async def warm(self, sha: str, count: int) -> None:
        """Start actors with clones at `sha`, one at a time, while the cluster has room and
        fewer than `count` live (the run's agents: also the pool's bound), while the run
        waits for its baseline check and planner; cancel it then. An actor being started
        is finished, not thrown away, when warming stops (it was seen to have room)."""
        self.limit = count
        while self._live < count and not self._closed and await self.life.room():
            waiter = _Waiter()
            try:
                with anyio.fail_after(CLOSE_TIMEOUT_S, shield=True):
                    with waiting(sc.WAIT_CLUSTER, attributes={sc.WORKSPACE_NAME: "warm"}):
                        await self._place_for(waiter, "warm")
                    if waiter.failed is not None:
                        raise waiter.failed
                    assert waiter.held is not None
                    await self.life.ready(waiter.held, sha)
            except BaseException as exc:
                if waiter.held is not None:
                    await self._discard(waiter.held)
                if not isinstance(exc, WorkspaceError | TimeoutError):
                    raise
                log.warning("stopped starting workspace actors ahead of need: %s", exc)
                return
            await self._give_back(waiter.held)
            await anyio.lowlevel.checkpoint()  # where a cancelled warming stops

    async def aclose(self) -> None:
        """End every idle actor now and every one in use when given back; bounded."""
        self._closed = True
        idle, self._idle = self._idle, []
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                for held in idle:
                    tg.start_soon(self._drop, held)
