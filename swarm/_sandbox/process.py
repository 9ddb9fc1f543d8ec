"""Running one command confined: spawn it through a sandbox, capture its output, end its
whole process tree on exit, timeout or cancel.

The command runs in its own process group (the sandbox's launcher at its head), started
with as little of swarm's CPU as can be (`swarm._sandbox._process`); on timeout or
cancellation the group gets SIGTERM, a grace period, then SIGKILL, and leftovers are killed
when the command exits. Under bubblewrap the command's PID namespace goes with it, so a
child that left the group (`setsid`) dies too; without one, every process still carrying
the command's tag (`SWARM_COMMAND_TAG` in its environment) is killed.
`swarm.agent._toolbox.run_command` (tools, checks, `setup:`) and `swarm._sandbox.hooks` (git
hooks) are the callers.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from swarm._sandbox import _volume
from swarm._sandbox._process import Command, open_command
from swarm._sandbox.base import Launch, Sandbox

__all__ = [
    "COMMAND_TAG_VAR",
    "CommandResult",
    "kill_processes_in",
    "pid_alive",
    "run_confined",
    "tagged_processes",
    "truncate",
]

COMMAND_TAG_VAR = "SWARM_COMMAND_TAG"
"""Set to a fresh token in each command's environment; its descendants inherit it."""
_KILL_GRACE_S = 1.0
"""After SIGTERM to a command's process group, how long before SIGKILL."""
_RELEASE_TRIES = 200
"""Tries, 10 ms apart, to free what the sandbox made for a command that has ended."""
_EOF_GRACE_S = 0.5
"""After a command exits, how long its leftover children may hold the output pipe open."""


def truncate(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, keeping its head and tail."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[… {cut} characters cut …]\n{text[len(text) - tail :]}"


@dataclass(frozen=True)
class CommandResult:
    """How a command ended and what it printed (stdout and stderr interleaved)."""

    exit_code: int | None
    """None when the command was killed on timeout."""
    output: str
    """Combined output, cut in the middle when longer than the limit asked for; the
    sandbox's notes (`denials`) follow it."""
    timed_out: bool
    duration_s: float
    denials: tuple[str, ...] = field(default=())
    """What the sandbox refused or stopped, in a few words each (also in `output`)."""


class _Capture:
    """Keeps the first and last `limit // 2` bytes of a stream and counts what falls between."""

    def __init__(self, limit: int) -> None:
        self.keep = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > 4 * self.keep:
            del self.tail[: -self.keep]

    def text(self, limit_chars: int) -> str:
        if self.total == len(self.head) + len(self.tail):  # nothing dropped: cut exactly
            return truncate((self.head + self.tail).decode(errors="replace"), limit_chars)
        tail = self.tail[-self.keep :]
        cut = self.total - len(self.head) - len(tail)
        head_text, tail_text = self.head.decode(errors="replace"), tail.decode(errors="replace")
        return f"{head_text}\n[… {cut} bytes cut …]\n{tail_text}"


def shell(command: str) -> list[str]:
    """The argv that runs `command` in bash (or sh)."""
    return [_shell_for(os.environ.get("PATH")), "-c", command]


@functools.lru_cache(maxsize=16)
def _shell_for(path: str | None) -> str:
    return shutil.which("bash", path=path) or "/bin/sh"


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (one we may not signal counts as running; one that has
    exited and waits to be reaped, a zombie, does not: it holds no file, mount or cwd)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether `pid` has exited and waits to be reaped (Linux; elsewhere False)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    end = stat.rfind(b")")  # the name, in parentheses, may hold anything
    return stat[end + 2 : end + 3] == b"Z"


def _killpg(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tagged_processes(tag: str) -> list[int]:
    """Pids of the processes whose environment carries `SWARM_COMMAND_TAG=tag` (Linux;
    elsewhere none): a command's descendants, including those that left its process group
    and session with `setsid`."""
    needle = f"{COMMAND_TAG_VAR}={tag}".encode()
    found = []
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or not ours
            continue
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found


def kill_processes_in(directory: Path) -> int:
    """SIGKILL every process whose working directory is `directory` or below it (Linux;
    elsewhere none): what a killed run's commands left running in its worktrees."""
    root, killed = str(directory), 0
    for pid in _pids():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd").removesuffix(" (deleted)")
        except OSError:
            continue
        if (cwd == root or cwd.startswith(root + os.sep)) and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _kill_tagged(tag: str) -> None:
    for _ in range(3):  # again, for what forked while we were killing
        pids = tagged_processes(tag)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


async def _stop(process: Command, tag: str, *, search: bool) -> None:
    """Kill the command's whole process group: TERM, a grace period, then KILL; then, with
    `search` (a sandbox whose processes can outlive it), every process still carrying the
    command's tag (those that escaped with `setsid`)."""
    if process.returncode is None:
        _killpg(process.pid, signal.SIGTERM)
        with anyio.move_on_after(_KILL_GRACE_S):
            await process.wait()
    _killpg(process.pid, signal.SIGKILL)  # stragglers, even when the leader has exited
    if search:
        _kill_tagged(tag)
    if process.returncode is None:
        await process.wait()


async def run_confined(
    sandbox: Sandbox,
    command: str | Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    max_output_chars: int,
    git_write: bool = False,
) -> CommandResult:
    """Run `command` (a shell string or argv) in `cwd` through `sandbox`; see the module.

    `git_write`: see `Sandbox.launch` (git commands that run the repository's hooks)."""
    argv = shell(command) if isinstance(command, str) else list(command)
    tag = secrets.token_hex(8)  # what the command's descendants inherit, `setsid` or not
    env = {**env, COMMAND_TAG_VAR: tag}
    capture = _Capture(max_output_chars)
    stopped: list[str] = []
    async with sandbox.lane() as lane:
        launch = sandbox.launch(argv, cwd=cwd, env=env, git_write=git_write, lane=lane)
        started = time.perf_counter()
        try:
            process = await _start(launch, sandbox.policy.pidfd)
        except BaseException:
            sandbox.release(launch)  # nothing ran in what it made
            raise
        try:
            with anyio.move_on_after(timeout_s) as deadline:
                await _watch(sandbox, launch, process, capture, stopped)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_KILL_GRACE_S + 5):
                await _stop(process, tag, search=not sandbox.contains_processes)
                await process.aclose()
                stopped += sandbox.ended(launch)
                for _ in range(_RELEASE_TRIES):  # the namespace's last ones may be exiting
                    if sandbox.release(launch):
                        break
                    await anyio.sleep(0.01)
    output = capture.text(max_output_chars)
    refused = lane.denied if lane is not None else []
    denials = (*stopped, *refused, *sandbox.denials(output), *_volume.used_up(cwd, output))
    notes = "".join(f"\n[sandbox: {d}]" for d in denials)
    return CommandResult(
        exit_code=None if deadline.cancelled_caught else process.returncode,
        output=output + notes,
        timed_out=deadline.cancelled_caught,
        duration_s=time.perf_counter() - started,
        denials=denials,
    )


def _start(launch: Launch, pidfd: bool) -> Awaitable[Command]:
    if launch.seat is not None:
        return launch.seat.start(launch.argv, cwd=launch.cwd, env=launch.env)
    return open_command(launch.argv, cwd=launch.cwd, env=launch.env, pidfd=pidfd)


async def _watch(
    sandbox: Sandbox, launch: Launch, process: Command, capture: _Capture, stopped: list[str]
) -> None:
    """Read the command's output and guard its limits until it exits (and a short while
    after, for what its leftovers still print)."""
    stdout = process.stdout
    assert stdout is not None
    eof = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_read, stdout, capture, eof)
        tg.start_soon(_guard, sandbox, process.pid, launch, stopped)
        await process.wait()
        # children that outlive the command may keep the pipe open: don't wait on them
        with anyio.move_on_after(_EOF_GRACE_S):
            await eof.wait()
        tg.cancel_scope.cancel()


async def _guard(sandbox: Sandbox, pid: int, launch: Launch, stopped: list[str]) -> None:
    why = await sandbox.guard(pid, launch)
    if why is not None:
        stopped.append(why)


async def _read(stream: ByteReceiveStream, capture: _Capture, eof: anyio.Event) -> None:
    try:
        async for chunk in stream:
            capture.add(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    eof.set()
