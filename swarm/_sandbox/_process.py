"""Starting a command in its own process group, with as little of swarm's CPU as we can.

`anyio.open_process` on asyncio costs about 0.6 ms of CPU per command (an asyncio
subprocess transport, pipe transports and protocols, and a thread per child to wait for
it); a solve runs a check per subtask and agents run many more. Where the system has
pidfds (Linux 5.3+), `open_command` starts the command with `subprocess.Popen` (a vfork)
and waits on a pidfd and a non-blocking pipe instead: about half the CPU, no thread. The
result quacks like anyio's `Process` as far as `run_confined` needs: `pid`, `returncode`,
`wait`, `stdout`, `aclose`. Elsewhere it is anyio's `Process`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypedDict

import anyio
from anyio.abc import ByteReceiveStream

from swarm._sandbox import _spawn_server, _spawner

__all__ = ["Command", "open_command"]

_READ_SIZE = 65536


class Command(Protocol):
    """What `run_confined` uses of a started process."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def stdout(self) -> ByteReceiveStream | None: ...

    async def wait(self) -> int: ...

    async def aclose(self) -> None: ...


PIDFD = _spawn_server.pidfd_ok()
"""Whether commands start here with pidfds (else through anyio)."""


async def open_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: int | None = None,
    pidfd: bool = True,
) -> Command:
    """Start `argv` in `cwd` in a new session, stdin from /dev/null (or the descriptor
    `stdin`, still the caller's to close; needs pidfds), stdout and stderr together in one
    pipe; through the run's spawn server when one is open. `pidfd=False` (a sandbox
    policy's) starts it through anyio even where pidfds work.

    A session, not only a process group: on Linux a session is a scheduling group of its
    own (autogroup), so a fork bomb's thousand processes share one command's part of the
    cores and the guard watching it still gets its turn."""
    if not (PIDFD and pidfd):
        return await anyio.open_process(list(argv), cwd=cwd, env=dict(env), **_STREAMS)
    server = _spawner.current()
    if server is not None:
        with contextlib.suppress(_spawner.ServerGone):  # not started: start it here instead
            return await _Served.open(server, argv, cwd, env, stdin)
    return _Spawned(_popen(argv, cwd, env, stdin))


class _Streams(TypedDict):
    stdin: int
    stdout: int
    stderr: int
    start_new_session: bool


_STREAMS = _Streams(
    stdin=subprocess.DEVNULL,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    start_new_session=True,
)


def _popen(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], stdin: int | None
) -> subprocess.Popen[bytes]:
    """Start the command (does not wait for it: CPython forks with vfork here)."""
    streams = _STREAMS if stdin is None else _STREAMS | {"stdin": stdin}
    return subprocess.Popen(list(argv), cwd=cwd, env=dict(env), **streams)


class _Spawned:
    """A started command, its exit awaited on a pidfd."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self._pidfd = -1
        try:
            self._pidfd = os.pidfd_open(popen.pid)
        finally:
            if self._pidfd < 0:  # no pidfd (out of descriptors): do not leave it running
                popen.kill()
                popen.wait()
        assert popen.stdout is not None
        self._stdout = _PipeStream(popen.stdout.fileno())

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    @property
    def stdout(self) -> ByteReceiveStream:
        return self._stdout

    async def wait(self) -> int:
        while (code := self._popen.poll()) is None:
            await anyio.wait_readable(self._pidfd)
        return code

    async def aclose(self) -> None:
        await self._stdout.aclose()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        if self._popen.stdout is not None:
            self._popen.stdout.close()
        if self._popen.poll() is None:  # the caller stops it first; this only reaps
            await self.wait()


class _Served:
    """A command the spawn server started: its output through a pipe of ours."""

    def __init__(self, started: _spawner.Started, read: int) -> None:
        self._started = started
        self._stdout = _PipeStream(read)
        self._read = read

    @classmethod
    async def open(
        cls,
        server: _spawner.Server,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        stdin: int | None = None,
    ) -> _Served:
        read, write = os.pipe2(os.O_CLOEXEC)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            streams = [null if stdin is None else stdin, write, write]
            started = await server.start(argv, env, streams, cwd=cwd, session=True)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(null)
            os.close(write)
        served = cls(started, read)
        try:
            with anyio.CancelScope(shield=True):  # started, it is the caller's to stop
                await started.started()
        except BaseException:
            await served.aclose()
            raise
        return served

    @property
    def pid(self) -> int:
        return self._started.pid

    @property
    def returncode(self) -> int | None:
        status = self._started.status
        return None if status is None else os.waitstatus_to_exitcode(status)

    @property
    def stdout(self) -> ByteReceiveStream:
        return self._stdout

    async def wait(self) -> int:
        return os.waitstatus_to_exitcode(await self._started.wait())

    async def aclose(self) -> None:
        await self._stdout.aclose()
        if self._read >= 0:
            os.close(self._read)
            self._read = -1
        if self._started.status is None and self._started.pid > 0:
            await self._started.wait()  # the caller stops it first; this only reaps
        self._started.close()


class _PipeStream(ByteReceiveStream):
    """The read end of the command's output pipe, read without blocking the loop."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._closed = False
        os.set_blocking(fd, False)

    async def receive(self, max_bytes: int = _READ_SIZE) -> bytes:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                chunk = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if not chunk:
                raise anyio.EndOfStream
            return chunk

    async def aclose(self) -> None:
        self._closed = True  # the fd itself belongs to the Popen object, closed with it
