"""A command's memory added up where no memory cgroup holds it as a whole.

Without a memory cgroup (`swarm._sandbox._pids.memory_usable`: a normal user whose cgroup
delegates nothing, `[sandbox] cgroups = false`) the kernel limits each process alone
(RLIMIT_DATA), which a shared mapping, a few processes of just under the limit, or files in
the memory-backed `/tmp` and `/dev/shm` each pass. `MemoryWatch` adds up, from the host,
through the sandbox's own `/proc`:

- what each of its processes holds, as its proportional set size (`Pss` in
  `smaps_rollup`: a page shared by n processes counts 1/n in each, so the sum counts it
  once, and a shared mapping counts whole);
- what its own memory-backed filesystems hold: the tmpfs mounts bubblewrap made for it
  (`/tmp`, `/dev/shm`, `/dev`), told from a host tmpfs bound in by their devices, which
  the host's mount table does not list.

The guard (`BwrapSandbox.guard`) looks every few tens of milliseconds and kills the
command past its limit. It is a look, not a cap: a command allocating fast passes the
limit by what it takes between two looks; a file in `/dev/shm` that a process also maps
counts twice (on the safe side).
"""

from __future__ import annotations

import functools
import os

__all__ = ["MemoryWatch"]

_MB = 1024 * 1024
_PSS = b"\nPss:"


class MemoryWatch:
    """Adds up what one sandboxed command holds in memory (see the module's docstring)."""

    def __init__(self, limit_mb: int) -> None:
        self.limit_mb = limit_mb
        self._tmpfs: list[str] | None = None  # found once the sandbox's mounts are up

    def over(self, init: int) -> str | None:
        """Why the command must end, if what the PID namespace whose init is `init` holds
        is past the limit; None while it is under. `init`'s root must be the sandbox's
        already (the guard looks first); raises OSError where `init` is gone."""
        proc = f"/proc/{init}/root/proc"
        if self._tmpfs is None:
            self._tmpfs = _own_tmpfs(init)
        held = _processes_bytes(proc) + sum(
            _used_bytes(f"/proc/{init}/root{m}") for m in self._tmpfs
        )
        if held <= self.limit_mb * _MB:
            return None
        return (
            f"the command passed its memory limit of {self.limit_mb} MB ({held // _MB} MB "
            "held by its processes, shared memory and files in /tmp and /dev/shm); swarm "
            "killed it"
        )


def _processes_bytes(proc: str) -> int:
    """The sum of the proportional set sizes of the processes `proc` lists."""
    total = 0
    with os.scandir(proc) as entries:
        pids = [e.name for e in entries if e.name.isdigit()]
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/smaps_rollup", "rb") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended between the listing and the read
        except PermissionError:
            continue  # changing its uid (the drop step), undumpable until it execs
        start = text.find(_PSS)
        if start >= 0:
            total += int(text[start + len(_PSS) : text.index(b"kB", start)]) * 1024
    return total


def _own_tmpfs(init: int) -> list[str]:
    """The mount points (as the sandbox sees them) of the tmpfs mounts made for it: those
    whose device the host's mount table does not hold."""
    host = _host_devices()
    points: dict[str, str] = {}
    with open(f"/proc/{init}/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            if " - tmpfs " in line and fields[2] not in host:
                points.setdefault(fields[2], fields[4].replace("\\040", " "))
    return sorted(points.values())


def _used_bytes(path: str) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@functools.cache
def _host_devices() -> frozenset[str]:
    """The `major:minor` of every filesystem in swarm's own mount table."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        return frozenset(line.split()[2] for line in f)
