"""The run lock: one process at a time runs or resumes a run, and who that is.

Two processes on one run would share its journal rows, worktrees and branch, and break
both. `run_lock` holds an exclusive `flock` on `<state>/runs/<run-id>/lock` for the run's
life; the kernel drops it when the process ends in any way (kill -9 included), so a lock
never outlives its holder and needs no stale-lock cleanup.

The lock file also names its holder: pid and the process's start time (a pid is reused;
a pid and its start time are not). `owner` says whether a run's process is alive: the
lock held and its holder the process that took it. A journal that says `running` with no
owner is a run killed before it could say so (`swarm runs` shows it `interrupted`).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from swarm.errors import ConfigError

__all__ = ["owner", "run_lock"]


def _started(pid: int) -> str:
    """When process `pid` started (clock ticks since boot, from /proc); "" if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: count from the last ")"
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def _alive(pid: int, started: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    return not started or _started(pid) in ("", started)


@contextmanager
def run_lock(state_dir: Path, run_id: str) -> Iterator[Path]:
    """Hold the lock of `run_id` for the block; ConfigError when another process has it."""
    path = state_dir / "runs" / run_id / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").split()
        pid = holder[0] if holder else "?"
        os.close(fd)
        raise ConfigError(
            f"run {run_id} is running in another process (pid {pid}): let it finish or "
            f"stop it (Ctrl-C, or kill {pid}) before resuming it",
            path=str(path),
        ) from None
    try:
        os.ftruncate(fd, 0)
        me = os.getpid()
        os.pwrite(fd, f"{me} {_started(me)}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)


def owner(state_dir: Path, run_id: str) -> int | None:
    """The pid of the live process running `run_id`, or None when no process is: its lock
    is free, or held only by a leftover child of a holder that died."""
    path = state_dir / "runs" / run_id / "lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").split()
        else:
            return None  # nobody holds it (ours is dropped when the file is closed)
    finally:
        os.close(fd)
    if not holder or not holder[0].isdigit():
        return None
    pid = int(holder[0])
    return pid if _alive(pid, holder[1] if len(holder) > 1 else "") else None
