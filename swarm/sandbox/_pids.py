"""A hard cap on a sandboxed command's processes: a pids cgroup of its own.

`BwrapSandbox.guard` counts the processes in a command's PID namespace and kills it past
`Limits.max_processes`, but only every few milliseconds: between two looks a fork bomb
reached 0.8k-6.5k processes on the host, and RLIMIT_NPROC does not bind for root in
bubblewrap (a bomb reached 15k under `ulimit -u 200`). Where the machine lets swarm make
cgroups in a `pids` hierarchy (cgroup v1's, as root), each command runs in a cgroup of its
own whose `pids.max` the kernel enforces: a fork past it fails. The kernel counts threads
there too, so the cap is `TASKS_PER_PROCESS` times the process limit (a test runner's
threads must not fail); the guard still kills at the process limit, and reads the
cgroup's task count, one small file, instead of listing the namespace's /proc while the
count is under that limit.

Cgroups are named `swarm-<pid>-<n>` at the hierarchy's root. One is removed once its
command has ended; those left by processes that died are removed when the first is made.
Where there is no such hierarchy (cgroup v2 without delegation, no root), `make` returns
None and the guard alone keeps the limit.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from swarm.sandbox.process import pid_alive

__all__ = ["TASKS_PER_PROCESS", "joined", "make", "remove", "tasks", "usable"]

TASKS_PER_PROCESS = 4
_HIERARCHY = Path("/sys/fs/cgroup/pids")
_PREFIX = "swarm-"
_numbers = itertools.count()


def make(max_processes: int) -> Path | None:
    """A new cgroup capped at `TASKS_PER_PROCESS * max_processes` tasks, or None where
    swarm cannot make one."""
    root = _hierarchy()
    if root is None:
        return None
    path = root / f"{_PREFIX}{os.getpid()}-{next(_numbers)}"
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(TASKS_PER_PROCESS * max_processes))
    except OSError:
        remove(path)
        return None
    return path


def usable() -> bool:
    """Whether swarm may make pids cgroups here (`make` gives None otherwise)."""
    return _hierarchy() is not None


def joined(cgroup: Path, argv: Sequence[str]) -> list[str]:
    """`argv` run inside `cgroup`: a `/bin/sh` on the host moves itself there, then execs
    it, so everything the command starts is counted from its first fork."""
    return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *argv]


def tasks(cgroup: Path) -> int:
    """The tasks (processes and threads) in `cgroup` now. OSError once it is gone."""
    with open(cgroup / "pids.current", "rb") as f:
        return int(f.read())


class TaskCount:
    """`tasks(cgroup)` read again and again through one open file: each look is one
    `pread`, not a path walk, open and close (the guard looks at every running command's
    count a few times a second). `close` when done; OSError once the cgroup is gone."""

    __slots__ = ("_fd",)

    def __init__(self, cgroup: Path) -> None:
        self._fd = os.open(cgroup / "pids.current", os.O_RDONLY | os.O_CLOEXEC)

    def __call__(self) -> int:
        return int(os.pread(self._fd, 32, 0))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def remove(cgroup: Path) -> bool:
    """Remove `cgroup`; False while tasks are left in it."""
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


@functools.cache
def _hierarchy() -> Path | None:
    """The pids hierarchy's root if swarm may make cgroups there (probed once, when the
    cgroups dead processes left are removed)."""
    root = _HIERARCHY
    if not (root / "cgroup.procs").is_file() or not os.access(root, os.W_OK):
        return None
    probe = root / f"{_PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
        # a process must be able to move itself in, as each command will (`joined`)
        moved = subprocess.run(joined(probe, ["/bin/true"]), capture_output=True, check=False)
        usable = (probe / "pids.max").is_file() and moved.returncode == 0
    except OSError:
        return None
    finally:
        remove(probe)
    if usable:
        _remove_left(root)
    return root if usable else None


def _remove_left(root: Path) -> None:
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            owner = entry.name.removeprefix(_PREFIX).split("-", 1)[0]
            if entry.name.startswith(_PREFIX) and owner.isdigit() and not pid_alive(int(owner)):
                remove(Path(entry.path))
