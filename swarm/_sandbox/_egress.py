"""The way out of a sandbox whose network is `loopback` or `allow`: swarm's proxy on the
host, reached through unix sockets shown inside the sandbox.

The sandbox keeps its own network namespace; nothing inside can open a connection to the
outside by itself. What it can reach is a directory of unix sockets (a `Lane`): `proxy`
(the HTTP CONNECT and plain HTTP proxy, `swarm._sandbox._proxy`) and one `port-N` per
forwarded host loopback port. Inside, `socat` listens on 127.0.0.1 for each and carries
the bytes to the socket (`swarm._sandbox.bwrap`).

`Egress` is what a sandbox (and its `with_read_only` copies) share. `session()` opens the
service: a private socket directory and a task group that owns every listener and every
connection, for as long as the run is open; cleanup is bounded. Each command gets its own
lane (its sockets, its `denied` list), served in that task group and cancelled when the
command ends: a lane costs a `mkdir` and a few `bind`s, no process. A command run with
no session open gets a service of its own, for that command only.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskGroup, TaskStatus

from swarm._sandbox._proxy import AllowList, forward, serve_proxy
from swarm._sandbox.base import Lane

__all__ = ["Egress"]

_CLOSE_TIMEOUT_S = 5.0
_MAX_CONNECTIONS = 256
"""Connections open at once through one service (a runaway client waits, not the host)."""


class _Service:
    def __init__(self, rules: AllowList, root: Path, tg: TaskGroup) -> None:
        self.rules, self.root, self.tg = rules, root, tg
        self.limiter = anyio.CapacityLimiter(_MAX_CONNECTIONS)
        self._numbers = itertools.count()

    @classmethod
    @asynccontextmanager
    async def open(cls, rules: AllowList) -> AsyncIterator[_Service]:
        root = Path(tempfile.mkdtemp(prefix="swarm-net-"))
        try:
            async with anyio.create_task_group() as tg:
                yield cls(rules, root, tg)
                tg.cancel_scope.cancel()
        finally:
            shutil.rmtree(root, ignore_errors=True)

    @asynccontextmanager
    async def lane(self) -> AsyncIterator[Lane]:
        lane = Lane(self.root / f"lane-{next(self._numbers)}", self.rules.loopback_ports)
        lane.directory.mkdir()
        try:
            scope = await self.tg.start(self._serve, lane)
            try:
                yield lane
            finally:
                scope.cancel()
        finally:
            shutil.rmtree(lane.directory, ignore_errors=True)

    async def _serve(self, lane: Lane, *, task_status: TaskStatus[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            handlers: list[tuple[Path, Any]] = [
                (
                    lane.directory / "proxy",
                    partial(serve_proxy, rules=self.rules, denied=lane.denied),
                )
            ]
            handlers += [
                (lane.directory / f"port-{p}", partial(forward, port=p)) for p in lane.forwarded
            ]
            async with anyio.create_task_group() as tg:
                for path, handler in handlers:
                    listener = await anyio.create_unix_listener(path)
                    # the command may not be swarm's uid (`swarm._sandbox._identity`); no
                    # one else reaches it (the service's directory is 0700)
                    path.chmod(0o666)
                    tg.start_soon(self._accept, listener, handler)
                task_status.started(scope)

    async def _accept(self, listener: Any, handler: Any) -> None:
        async with listener, anyio.create_task_group() as tg:
            while True:
                stream = await listener.accept()
                await self.limiter.acquire_on_behalf_of(stream)
                tg.start_soon(self._handle, stream, handler)

    async def _handle(self, stream: ByteStream, handler: Any) -> None:
        try:
            await handler(stream)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self.limiter.release_on_behalf_of(stream)
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S):
                await stream.aclose()


class Egress:
    """The proxy a sandbox's commands share (see the module)."""

    def __init__(self, rules: AllowList) -> None:
        self.rules = rules
        self._service: _Service | None = None

    def __getstate__(self) -> dict[str, Any]:  # shipped to a cluster node: not the service
        return {"rules": self.rules, "_service": None}

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        if self._service is not None:  # nested: the outer session owns the service
            yield
            return
        async with _Service.open(self.rules) as service:
            self._service = service
            try:
                yield
            finally:
                self._service = None

    @asynccontextmanager
    async def lane(self) -> AsyncIterator[Lane]:
        if self._service is not None:
            async with self._service.lane() as lane:
                yield lane
            return
        async with _Service.open(self.rules) as service, service.lane() as lane:
            yield lane
