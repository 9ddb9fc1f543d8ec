"""Starting commands without stalling the coordinator: the client of the spawn server.

`spawn_server()` starts `swarm._sandbox._spawn_server` for as long as its block runs
(`swarm.run._solve` opens it around a run) and makes it the current one for the tasks
started inside. While it is open, `swarm._sandbox._spawn` (git) and `swarm._sandbox._process`
(sandboxed commands) hand their commands to it (`Server.start`) instead of forking the
coordinator, whose event loop then never waits for a child to reach its `exec`. Outside
one (a library call, a test, a system without pidfds) they start commands themselves.

`Server.start` sends the command and its descriptors; `Started` reads the command's pid
and exit status from its status pipe. Cancelled before the command has exited, it has the
server kill it. A server that has died starts nothing more: `start` raises `ServerGone`
(the command did not start) and `current()` is None from then on, so commands start here
again; a command that was running when it died fails with OSError (it may have run).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import struct
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import anyio
import orjson

from swarm._sandbox import _spawn_server
from swarm.errors import ServerGone

__all__ = ["ServerGone", "Started", "current", "spawn_server"]

_STOP_TIMEOUT_S = 5.0
_current: ContextVar[Server | None] = ContextVar("swarm_spawn_server", default=None)


def current() -> Server | None:
    """The spawn server open for this task, or None (none open, or it died: commands then
    start the way they do without one)."""
    server = _current.get()
    return server if server is not None and server.alive else None


class Server:
    """The coordinator's end of a running spawn server."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._ids = itertools.count()
        self._room = anyio.Lock()
        """Held by the one sender waiting for room in the socket's buffer."""
        self.alive = True

    async def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        fds: Sequence[int],
        *,
        cwd: Path | None = None,
        session: bool = False,
    ) -> Started:
        """Have the server start `argv` with `fds` (stdin, stdout, stderr) as its standard
        streams; they are the caller's still (the server has its own copies). `cwd` or
        `session` (a new session) start it the slower way (`subprocess`), and report its
        pid at once (`Started.started`)."""
        command = next(self._ids)
        read, write = os.pipe2(os.O_CLOEXEC)
        try:
            header = {"id": command, "argv": list(argv), "env": dict(env)}
            if cwd is not None or session:
                header |= {"cwd": str(cwd) if cwd is not None else None, "session": session}
                header["pid"] = True
            await self._send(header, [*fds, write])
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        return Started(self, command, read)

    async def kill(self, command: int) -> None:
        """SIGKILL a command the server started, if it still runs."""
        with contextlib.suppress(OSError):
            await self._send({"kill": command}, [])

    async def _send(self, header: dict[str, Any], fds: Sequence[int]) -> None:
        """One message; waits (never blocks the loop) while the socket's buffer is full.
        OSError, and the server is no longer `alive`, when it has gone."""
        try:
            message = orjson.dumps(header)
        except TypeError:  # a lone surrogate (undecodable bytes in an environment value)
            message = json.dumps(header).encode("utf-8", "surrogateescape")
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
        ancillary = rights if fds else []
        if self._sent(message, ancillary):
            return
        async with self._room:  # anyio lets one task at a time wait on a socket
            while not self._sent(message, ancillary):
                await anyio.wait_writable(self._sock)

    def _sent(self, message: bytes, ancillary: list[tuple[int, int, bytes]]) -> bool:
        """Sent; False when the buffer is full."""
        try:
            self._sock.sendmsg([message], ancillary)
        except BlockingIOError:
            return False
        except OSError as exc:
            self.alive = False
            raise ServerGone(exc.errno, f"the spawn server has gone: {exc}") from exc
        return True


class Started:
    """A command the server started: its pid (when asked for), then its exit status."""

    def __init__(self, server: Server, command: int, status_fd: int) -> None:
        self._server, self._command, self._fd = server, command, status_fd
        self.pid = -1
        self.status: int | None = None
        """The wait status (`os.waitstatus_to_exitcode`), once the command has exited."""

    async def started(self) -> int:
        """The command's pid (asked for at `start`); OSError when it could not start."""
        while self.pid < 0 and self.status is None:
            await self._next()
        return self.pid

    async def wait(self, *, grace: float = 0.0) -> int:
        """Wait for the command to exit; its wait status. Cancelled, it lets the command
        run on for up to `grace` seconds, then kills it, and waits (bounded) for it to be
        gone: a git killed mid-way must not write its locks into a tree that is handed on.
        """
        try:
            return await self._ended()
        except BaseException:
            if self.status is None:
                with anyio.CancelScope(shield=True):
                    with anyio.move_on_after(grace), contextlib.suppress(OSError):
                        await self._ended()
                    with anyio.move_on_after(_STOP_TIMEOUT_S), contextlib.suppress(OSError):
                        if self.status is None:
                            await self._server.kill(self._command)
                            await self._ended()
            raise

    async def _ended(self) -> int:
        while self.status is None:
            await self._next()
        return self.status

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    async def _next(self) -> None:
        """Read the next record of the status pipe."""
        record = b""
        while len(record) < _spawn_server.RECORD.size:
            await anyio.wait_readable(self._fd)
            chunk = os.read(self._fd, _spawn_server.RECORD.size - len(record))
            if not chunk:
                self._server.alive = False
                raise OSError("the spawn server went away before the command ended")
            record += chunk
        tag, value = _spawn_server.RECORD.unpack(record)
        if tag == _spawn_server.FAILED:
            raise OSError(value, os.strerror(value))
        if tag == _spawn_server.PID:
            self.pid = value
        else:
            self.status = value


@asynccontextmanager
async def spawn_server() -> AsyncIterator[Server | None]:
    """Run a spawn server for the block (None where the system lacks pidfds)."""
    if not (_spawn_server.pidfd_ok() and hasattr(socket, "SOCK_SEQPACKET")):
        yield None
        return
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours:
        try:
            pid = _launch(theirs)
        finally:
            theirs.close()
        token = _current.set(Server(ours))
        try:
            yield _current.get()
        finally:
            _current.reset(token)
            ours.shutdown(socket.SHUT_RDWR)  # the server sees the end and exits
            await _reap(pid)


def _launch(theirs: socket.socket) -> int:
    """Start the server on its end of the socket, as its descriptor 3 (only there: no
    other child can inherit it and keep the server alive), with an empty environment
    (each command brings its own; the server keeps no secrets)."""
    argv = [sys.executable, "-I", "-S", _spawn_server.__file__, "3"]
    return os.posix_spawn(
        argv[0], argv, {}, file_actions=[(os.POSIX_SPAWN_DUP2, theirs.fileno(), 3)]
    )


async def _reap(pid: int) -> None:
    """Wait (shielded, bounded) for the server to exit; killed if it has not."""
    pidfd = os.pidfd_open(pid)
    try:
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(_STOP_TIMEOUT_S):
                await anyio.wait_readable(pidfd)
            _spawn_server.reap(pid)
    finally:
        os.close(pidfd)
