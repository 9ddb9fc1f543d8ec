"""The run lock: one process at a time runs or resumes a run.

Two processes on one run would share its journal rows, worktrees and branch, and break
both. `run_lock` holds an exclusive `flock` on `<state>/runs/<run-id>/lock` for the run's
life; the kernel drops it when the process ends in any way (kill -9 included), so a lock
never outlives its holder and needs no stale-lock cleanup.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from swarm.errors import ConfigError

__all__ = ["run_lock"]


@contextmanager
def run_lock(state_dir: Path, run_id: str) -> Iterator[Path]:
    """Hold the lock of `run_id` for the block; ConfigError when another process has it."""
    path = state_dir / "runs" / run_id / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"run {run_id} is running in another process (pid {holder}): let it finish or "
            f"stop it (Ctrl-C, or kill {holder}) before resuming it",
            path=str(path),
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)
