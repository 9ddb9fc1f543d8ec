"""Hard caps on a sandboxed command's processes and memory: cgroups of its own.

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

Memory is capped the same way where the machine has cgroup v1's `memory` hierarchy and
swarm may write there: a cgroup of the same name in it, `memory.limit_in_bytes` (and
`memsw`, where swap is accounted) set to `Limits.memory_mb`, for the whole command: its
processes together, their shared mappings, and what they write to the sandbox's
memory-backed `/tmp` and `/dev/shm` (a tmpfs page is charged to its writer's cgroup). Past
it the kernel kills the largest process; `oom_kills` tells the tool result. Where there is
none, only RLIMIT_DATA (per process) holds: `memory_usable` says which, once per run.

Under cgroup v2 (one hierarchy, `/sys/fs/cgroup` a `cgroup2` mount) the same cgroup holds
both caps, `pids.max` and `memory.max` (and `memory.swap.max` 0), made below the cgroup
swarm runs in, where that cgroup delegates the `pids` (and `memory`) controllers to its
children (its `cgroup.subtree_control`: swarm enables them there if it may); the kernel's
`memory.events` tells the OOM kills. v1's hierarchies are used where they are writable
(they are looked at first); where neither is, `make` returns None.

Cgroups are named `swarm-<pid>-<n>` at each hierarchy's root (v2: in swarm's own). One is
removed once its command has ended; those left by processes that died are removed when the
first is made. Where swarm may make none (v2 without delegation, no root), `make` returns
None: the guard keeps the limit, and the kernel caps the command's PID namespace
(`swarm._sandbox._pidns`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from swarm._sandbox import _seccomp
from swarm._sandbox.process import pid_alive

__all__ = [
    "TASKS_PER_PROCESS",
    "joined",
    "make",
    "memory_of",
    "memory_usable",
    "oom_kills",
    "remove",
    "tasks",
    "usable",
]

TASKS_PER_PROCESS = 4
_HIERARCHY = Path("/sys/fs/cgroup/pids")
_MEMORY = Path("/sys/fs/cgroup/memory")
_UNIFIED = Path("/sys/fs/cgroup")
_PREFIX = "swarm-"
_numbers = itertools.count()


def make(max_processes: int, memory_mb: int | None = None) -> Path | None:
    """A new cgroup capped at `TASKS_PER_PROCESS * max_processes` tasks, or None where
    swarm cannot make one; with `memory_mb`, its twin in the memory hierarchy capped at
    that (where there is one: `memory_of`)."""
    root = _hierarchy()
    if root is None:
        return None
    name = f"{_PREFIX}{os.getpid()}-{next(_numbers)}"
    path = root / name
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(TASKS_PER_PROCESS * max_processes))
        if memory_mb is not None and memory_usable():
            _cap_memory(path if _unified(root) else _MEMORY / name, memory_mb)
    except OSError:
        remove(path)
        return None
    return path


def _cap_memory(path: Path, memory_mb: int) -> None:
    limit = str(memory_mb * 1024 * 1024)
    if (path / "memory.max").is_file():  # v2: the cgroup itself
        (path / "memory.max").write_text(limit)
        with contextlib.suppress(OSError):  # only where swap is accounted
            (path / "memory.swap.max").write_text("0")
        return
    path.mkdir()
    (path / "memory.limit_in_bytes").write_text(limit)
    with contextlib.suppress(OSError):  # only where swap is accounted
        (path / "memory.memsw.limit_in_bytes").write_text(limit)


def memory_of(cgroup: Path) -> Path | None:
    """The memory twin of `cgroup`, if it has one (v1; v2 caps memory in `cgroup`)."""
    twin = _MEMORY / cgroup.name
    return twin if twin.is_dir() else None


def oom_kills(cgroup: Path) -> int:
    """How many processes the kernel killed in `cgroup`'s memory twin for passing its
    limit (0 without one)."""
    twin = _MEMORY / cgroup.name
    try:
        if (cgroup / "memory.events").is_file():  # v2
            text = (cgroup / "memory.events").read_text()
        else:
            text = (twin / "memory.oom_control").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def usable() -> bool:
    """Whether swarm may make pids cgroups here (`make` gives None otherwise)."""
    return _hierarchy() is not None


JOIN = (
    'echo $$ > "$0/cgroup.procs" || exit 125; '
    '[ -z "$1" ] || echo $$ > "$1/cgroup.procs" || exit 125'
)
"""Shell steps that move the shell into cgroup `$0` and, if `$1` is not empty, into its
memory twin `$1` (`joined`, and the seats' launchers)."""


def joined(cgroup: Path, argv: Sequence[str]) -> list[str]:
    """`argv` run inside `cgroup` (and its memory twin): a `/bin/sh` on the host moves
    itself there, then execs it, so everything the command starts is counted from its
    first fork."""
    twin = memory_of(cgroup)
    opened, argv = _seccomp.folded(argv)
    script = f'{JOIN}; shift; exec "$@"'
    if opened is not None:
        script += f" {_seccomp.FD}<{shlex.quote(opened)}"
    return ["/bin/sh", "-c", script, str(cgroup), str(twin or ""), *argv]


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
    """Remove `cgroup` and its memory twin; False while tasks are left in either."""
    return _rmdir(cgroup) & _rmdir(_MEMORY / cgroup.name)


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


@functools.cache
def memory_usable() -> bool:
    """Whether swarm may make memory cgroups here (cgroup v1's hierarchy, writable, or v2's
    memory controller delegated; probed once)."""
    root = _hierarchy()
    if root is not None and _unified(root):
        return "memory" in _controllers(root / "cgroup.subtree_control")
    if root is None or not (_MEMORY / "cgroup.procs").is_file():
        return False
    probe = _MEMORY / f"{_PREFIX}{os.getpid()}-probe"
    try:
        _cap_memory(probe, 64)
    except OSError:
        return False
    finally:
        _rmdir(probe)
    _remove_left(_MEMORY)
    return True


@functools.cache
def _hierarchy() -> Path | None:
    """Where swarm makes its cgroups: v1's pids hierarchy's root, else v2's cgroup swarm
    runs in, if swarm may make cgroups there (probed once, when the cgroups dead processes
    left are removed)."""
    return _usable(_HIERARCHY) or _usable(_delegating(_UNIFIED))


def _unified(root: Path) -> bool:
    return root != _HIERARCHY


def _controllers(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _delegating(mount: Path) -> Path | None:
    """Under cgroup v2 mounted at `mount`: the cgroup this process is in, once its children
    get the `pids` controller (and `memory`, where it is there); None if they cannot."""
    if not (mount / "cgroup.controllers").is_file():
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    if own is None:
        return None
    base = mount / own.lstrip("/")
    wanted = {"pids", "memory"} & _controllers(base / "cgroup.controllers")
    missing = wanted - _controllers(base / "cgroup.subtree_control")
    if missing:
        # refused (EBUSY) when the cgroup holds processes and is not the root: v2's rule
        # that only leaves hold processes; the pids controller alone is not worth moving
        # swarm for
        with contextlib.suppress(OSError):
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
    return base if "pids" in _controllers(base / "cgroup.subtree_control") else None


def _usable(root: Path | None) -> Path | None:
    """`root`, if swarm may make a pids cgroup there and move a process into it."""
    if root is None or not (root / "cgroup.procs").is_file() or not os.access(root, os.W_OK):
        return None
    probe = root / f"{_PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
        # a process must be able to move itself in, as each command will (`joined`)
        join = ["/bin/sh", "-c", f'{JOIN}; shift; exec "$@"', str(probe), "", "/bin/true"]
        moved = subprocess.run(join, capture_output=True, check=False)
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
                _rmdir(Path(entry.path))
