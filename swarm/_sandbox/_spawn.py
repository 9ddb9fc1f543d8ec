"""Running a short command (git, mkfs, mount) for its output, with little of swarm's CPU.

A solve runs thousands of git commands. Through `anyio.run_process` each one costs the
coordinator about 0.6 ms of CPU (measured on Linux, Python 3.11): asyncio's subprocess
transport, three pipe transports and their protocols, and a thread per child to wait for
it. `run` costs about 0.2 ms: `posix_spawn` (no fork of a large process), the child's
stdin, stdout and stderr are anonymous in-memory files (`memfd`) read once it has exited,
and the exit is awaited on a pidfd, so there is one thing to wait for and no task, thread
or transport per command. Where either is missing (not Linux, an old kernel) it falls back
to `anyio.run_process`.

Commands run this way take no working directory (`posix_spawn` cannot change it): git is
given `-C <dir>` instead. Other file descriptors are not closed in the child; Python opens
its own non-inheritable, so the child gets only 0, 1 and 2.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import anyio

from swarm._sandbox import _spawn_server, _spawner

__all__ = ["Finished", "Spawning", "run", "which"]

GRACE_S = 10.0
"""How long a command whose caller is cancelled may run on before it is killed. A git
killed mid-way leaves its lock files: a stale `packed-refs.lock` (every ref deletion takes
it, `git am` too) made each later `git am` and branch deletion in the repository wait a
second per ref, for the rest of the run: 12 s per batch of the merge queue."""

_which: dict[tuple[str, str | None], str | None] = {}
_fast: bool | None = None


def _fast_ok() -> bool:
    """Whether this system has posix_spawn, memfd and pidfd (probed once)."""
    global _fast
    if _fast is None:
        try:
            os.close(os.memfd_create("probe", os.MFD_CLOEXEC))
            _fast = _spawn_server.pidfd_ok()
        except (AttributeError, OSError):
            _fast = False
    return _fast


@dataclass(frozen=True)
class Spawning:
    """How `run` starts its commands (the default: the fastest way the system has)."""

    grace_s: float = GRACE_S
    """How long a command whose caller is cancelled may run on before it is killed."""
    fast: bool = True
    """posix_spawn, memfd and pidfd where the system has them; False: `anyio.run_process`,
    the portable way."""
    server: _spawner.Server | None = None
    """The spawn server to start commands through; None: the one open for this task
    (`swarm._sandbox._spawner.current`), if any."""


@dataclass(frozen=True)
class Finished:
    """How a command ended."""

    returncode: int
    stdout: bytes
    stderr: bytes


def which(name: str, env: Mapping[str, str]) -> str | None:
    """The executable `name` runs as under `env`'s PATH (cached: PATH rarely changes)."""
    key = (name, env.get("PATH"))
    if key not in _which:
        _which[key] = shutil.which(name, path=key[1])
    return _which[key]


_DEFAULT = Spawning()


async def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    input: bytes | None = None,
    how: Spawning = _DEFAULT,
) -> Finished:
    """Run `argv` (its first item a path) to the end. If the caller is cancelled, the
    command may run on for `how.grace_s` (shielded), then it is killed.

    Raises OSError when it cannot be started."""
    server = how.server or _spawner.current()
    if server is not None and server.alive:
        with contextlib.suppress(_spawner.ServerGone):  # not started: start it here instead
            return await _run_served(server, argv, env, input, how.grace_s)
    if how.fast and _fast_ok():
        return await _run_spawned(argv, env, input, how.grace_s)
    return await _run_portable(argv, env, input, how.grace_s)


def _memfd(name: str, data: bytes | None = None) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    if data:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _drain(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


@contextlib.contextmanager
def _streams(input: bytes | None) -> Iterator[list[int]]:
    """The command's stdin (holding `input`), stdout and stderr, closed after the block."""
    fds: list[int] = []
    try:
        for name, data in (("stdin", input), ("stdout", None), ("stderr", None)):
            fds.append(_memfd(name, data))
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def _finished(status: int, fds: list[int]) -> Finished:
    return Finished(os.waitstatus_to_exitcode(status), _drain(fds[1]), _drain(fds[2]))


async def _run_served(
    server: _spawner.Server,
    argv: Sequence[str],
    env: Mapping[str, str],
    input: bytes | None,
    grace_s: float,
) -> Finished:
    with _streams(input) as fds:
        started = await server.start(argv, env, fds)
        try:
            return _finished(await started.wait(grace=grace_s), fds)
        finally:
            started.close()


async def _run_spawned(
    argv: Sequence[str], env: Mapping[str, str], input: bytes | None, grace_s: float
) -> Finished:
    with _streams(input) as fds:
        pid = _spawn_server.posix_start(argv, env, fds)
        try:
            pidfd = os.pidfd_open(pid)
        except BaseException:  # out of file descriptors: nothing to wait on
            _spawn_server.reap(pid)
            raise
        try:
            await anyio.wait_readable(pidfd)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(grace_s):
                await anyio.wait_readable(pidfd)
            raise
        finally:
            status = _spawn_server.reap(pid)
            os.close(pidfd)
        return _finished(status, fds)


async def _run_portable(
    argv: Sequence[str], env: Mapping[str, str], input: bytes | None, grace_s: float
) -> Finished:
    """`anyio.run_process`, in a task of its own, shielded: cancelling it kills the
    command at once, so a cancelled caller first waits up to `grace_s` for it."""
    ended = anyio.Event()
    process = anyio.CancelScope(shield=True)
    outcome: list[Finished | OSError] = []  # an OSError is raised as itself, not grouped

    async def go() -> None:
        with process:
            try:
                done = await anyio.run_process(list(argv), input=input, env=dict(env), check=False)
                outcome.append(Finished(done.returncode, done.stdout, done.stderr))
            except OSError as exc:
                outcome.append(exc)
        ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(go)
        try:
            await ended.wait()
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(grace_s):
                await ended.wait()
            process.cancel()
            raise
    if isinstance(outcome[0], OSError):
        raise outcome[0]
    return outcome[0]
