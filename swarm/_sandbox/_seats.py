"""Launchers already in their pids cgroups (seats), so a command does not wait to join one.

Each sandboxed command runs in a pids cgroup of its own (`swarm._sandbox._pids`), and the
process that moves into it pays for the move: writing `cgroup.procs` makes the kernel wait
for an RCU grace period, about 10 ms when no other move happened in the last few
milliseconds (measured: a bwrap `true` took 17.7 ms joined against 4.8 ms not). A seat
pays that ahead of time. It is a bash started in a fresh cgroup of its own, stdin a pipe
from here, stdout and stderr the pipe its command will write to: it moves itself into the
cgroup, then waits on stdin. `Seat.start` writes the command there, NUL-separated (the
working directory, the number of environment entries, the entries, the argv), and closes
the pipe; the seat changes directory, exports the entries and execs the command, stdin
from /dev/null. The command keeps the seat's pid, process group and pipes. Measured the
same way, a command in a seat took 5.2-5.6 ms.

`Seats.open()` keeps `IDLE` seats ready for as long as its block runs (a run opens it, via
`Sandbox.session()`); each one taken is replaced in the background once its command has
ended (`replace`, from `Sandbox.release`). `take` gives one only
once it has joined its cgroup (the cgroup counts its one task), else None: the command
then joins a cgroup itself, as it does outside a session. At the block's end the idle
seats get an empty command (they exit) and their cgroups are removed, in bounded time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from swarm._sandbox import _pids, _seccomp
from swarm._sandbox._process import PIDFD, Command, open_command

__all__ = ["IDLE", "Seat", "Seats"]

IDLE = 4
_CLOSE_TIMEOUT_S = 5.0
_SCRIPT = (
    f"{_pids.JOIN}; "
    'mapfile -d "" a || exit 125; [ ${#a[@]} -gt 2 ] || exit 0; '
    'cd -- "${a[0]}" || exit 126; unset OLDPWD; n=${a[1]}; export -- "${a[@]:2:n}"; '
    f"{_seccomp.OPEN}; "
    'exec -- "${a[@]:n+2}" </dev/null'
)


class Seat:
    """A bash in `cgroup`, waiting for its command on the pipe `feed` writes to."""

    def __init__(self, cgroup: Path, process: Command, feed: int) -> None:
        self.cgroup, self.process, self._feed = cgroup, process, feed

    async def start(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> Command:
        """Run `argv` in this seat; the command is the seat's process from then on. A seat
        that died while idle is replaced by a command that joins the cgroup itself."""
        opened, command = _seccomp.folded(argv)  # the seat opens the filter itself
        told = env if opened is None else {**env, _seccomp.VARIABLE: opened}
        entries = [f"{k}={v}" for k, v in told.items()]
        fields = [str(cwd), str(len(entries)), *entries, *command]
        try:
            await self._write(b"".join(os.fsencode(f) + b"\0" for f in fields))
        except OSError:  # the seat died while idle: nothing of the command ran
            await self.discard(kill=True)
            return await open_command(_pids.joined(self.cgroup, argv), cwd=cwd, env=env)
        except BaseException:  # killed before its pipe closes: it must not run a part
            await self.discard(kill=True)
            raise
        return self.process

    async def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._feed, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._feed)
        self._close_feed()

    def _close_feed(self) -> None:
        if self._feed >= 0:
            os.close(self._feed)
            self._feed = -1

    async def discard(self, *, kill: bool = False) -> None:
        """End the seat and reap it, bounded: `kill` at once, else an empty command (it
        exits; SIGKILL if it has not within a second). Its cgroup is the caller's."""
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self._close_feed()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S):
            with anyio.move_on_after(1):
                await self.process.wait()
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.aclose()


class Seats:
    """Idle seats for commands capped at `max_processes` processes; see the module."""

    def __init__(self, max_processes: int, memory_mb: int | None = None) -> None:
        self.max_processes = max_processes
        self.memory_mb = memory_mb
        self._idle: list[Seat] = []
        self._taken: set[Seat] = set()
        self._group: TaskGroup | None = None
        self._bash = shutil.which("bash") if PIDFD else None

    def __reduce__(self) -> tuple[type[Seats], tuple[int, int | None]]:
        """Pickled (a sandbox sent to a Ray node): a new pool there, not yet open."""
        return Seats, (self.max_processes, self.memory_mb)

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Keep seats ready for the block (nested: the outer block keeps them)."""
        if self._group is not None or self._bash is None or not _pids.usable():
            yield
            return
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                for _ in range(IDLE):
                    group.start_soon(self._add)
                try:
                    yield
                finally:
                    self._group = None
                    group.cancel_scope.cancel()
        finally:
            idle, self._idle = self._idle, []
            with anyio.CancelScope(shield=True):  # at once: each is bounded, so all are
                async with anyio.create_task_group() as group:
                    for seat in idle:
                        group.start_soon(seat.discard)
            for seat in idle:
                _pids.remove(seat.cgroup)

    def take(self) -> Seat | None:
        """An idle seat that has joined its cgroup, or None."""
        for i, seat in enumerate(self._idle):
            with contextlib.suppress(OSError):
                if _pids.tasks(seat.cgroup) == 1:  # joined, and still there
                    del self._idle[i]
                    self._taken.add(seat)
                    return seat
        return None

    def replace(self, seat: Seat) -> None:
        """Start a seat in place of `seat`, whose command has ended (once per seat). Not
        at `take`: a bash starting and joining its cgroup beside the command slowed the
        command (by 2.5-3 ms on 2 cores)."""
        if seat in self._taken:
            self._taken.discard(seat)
            if self._group is not None:
                self._group.start_soon(self._add)

    async def _add(self) -> None:
        assert self._bash is not None
        cgroup = _pids.make(self.max_processes, self.memory_mb)
        if cgroup is None:
            return
        read, feed = os.pipe2(os.O_CLOEXEC)
        try:
            os.set_blocking(feed, False)
            twin = _pids.memory_of(cgroup)
            argv = [self._bash, "-c", _SCRIPT, str(cgroup), str(twin or "")]
            process = await open_command(argv, cwd=Path("/"), env={}, stdin=read)
        except BaseException:
            os.close(feed)
            _pids.remove(cgroup)
            raise
        finally:
            os.close(read)
        self._idle.append(Seat(cgroup, process, feed))
