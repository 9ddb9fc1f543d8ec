"""A worktree's disk quota where the kernel cannot hold it: checked while commands run.

Where it can, the worktree is a filesystem of its own (`swarm._sandbox._volume`: swarm is
root and has loop devices) and nothing here runs. A worktree that is a directory of the
host's filesystem has no kernel limit that fits: project quotas need the filesystem
mounted with `prjquota` (most are not, and it cannot be done from here). What the
kernel enforces there: per file, RLIMIT_FSIZE at `Limits.largest_file_mb` (the smaller of
`file_size_mb` and `disk_mb`: one file never passes the quota, however fast it is
written), and per sandbox the sizes of its memory-backed `/tmp` and `/dev/shm`.

The rest, many files that together pass the quota, is this check: the sandbox's guard
asks `DiskWatch.over()` at each of its looks, which costs one `statvfs` as long as the
filesystem's free space has not fallen by more than the room the worktree had left at
the last count; only then is the worktree counted (every file's allocated blocks,
symlinks not followed), and a command that made it grow past `Limits.disk_mb` beyond its
size at its first command is killed, and told so. The looks are the guard's (5 to 250 ms
apart) while the disk fills slowly, and sooner while it fills fast (`next_look_s`: the
first after 10 ms, then half the time the room left would last at the rate seen, 5 ms at
the least). Between two
looks a command still writes what the disk takes in that time, and a loaded machine may
run the guard late: a quota is a bound the command is stopped near, not at (a 64 MB
quota stopped a 400 MB bomb of 4 MB files at 128 MB with fixed looks); space another
process frees at the same moment can hide growth from `statvfs` until the next count.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from time import monotonic

__all__ = ["FIRST_LOOK_S", "SOONEST_S", "DiskWatch", "used"]

_MB = 1024 * 1024
_sizes: dict[Path, tuple[int, int]] = {}
"""Each worktree's size when its first command started (the quota is growth past it), and
at its last count."""
_MAX_SIZES = 4096
SOONEST_S = 0.005
"""The shortest wait between two looks at a filling disk (one `statvfs` each)."""
FIRST_LOOK_S = 0.01
"""The latest first look: a command in a pids cgroup is otherwise first looked at after
50 ms, in which a bomb writes 50 MB on a fast disk."""


def used(root: Path) -> int:
    """Bytes allocated to the files under `root` (symlinks not followed)."""
    total, stack = 0, [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


class DiskWatch:
    """The quota of worktree `root` (`limit_mb` of growth) while one command runs."""

    def __init__(self, root: Path, limit_mb: int, *, clock: Callable[[], float] = monotonic):
        self.root, self.limit_mb = root, limit_mb
        if root not in _sizes:  # counted once; later only when the disk fills (`over`)
            if len(_sizes) > _MAX_SIZES:
                _sizes.clear()
            size = used(root)
            _sizes[root] = (size, size)
        self._baseline, self._counted = _sizes[root]
        self._allowed = self._baseline + limit_mb * _MB
        self._free = self._free_bytes()
        self._clock = clock
        self._look = (clock(), self._free)
        """When the last look was, and the free space it saw."""
        self._room = self._allowed - self._counted
        """What the worktree may still take, as far as the last look knows."""
        self._rate = 0.0
        """Bytes a second the filesystem lost between the last two looks."""
        self._looks = 0

    def next_look_s(self, planned_s: float) -> float:
        """How long to wait before the next look: `planned_s`, or sooner when the disk
        fills fast (half the time the room left lasts at the rate it filled since the last
        look, not under `SOONEST_S`); the first look after `FIRST_LOOK_S` at the latest."""
        if self._looks == 0:  # how fast it fills is not known yet
            return min(planned_s, FIRST_LOOK_S)
        if self._rate <= 0:
            return planned_s
        return min(planned_s, max(SOONEST_S, self._room / self._rate / 2))

    def _free_bytes(self) -> int:
        info = os.statvfs(self.root)
        return info.f_bfree * info.f_frsize

    def over(self) -> str | None:
        """Why the command must stop (the worktree past its quota), or None."""
        free = self._free_bytes()
        now, (then, before) = self._clock(), self._look
        self._rate = (before - free) / (now - then) if now > then else 0.0
        self._look = (now, free)
        self._looks += 1
        self._room = self._allowed - self._counted - (self._free - free)
        if self._room >= 0:
            return None  # the whole filesystem has not taken in the room left
        self._counted, self._free = used(self.root), free
        self._room = self._allowed - self._counted
        _sizes[self.root] = (self._baseline, self._counted)
        if self._counted <= self._allowed:
            return None
        grown = (self._counted - self._baseline) / _MB
        return (
            f"the worktree grew past its disk quota of {self.limit_mb} MB (by {grown:.0f} MB "
            "in all); the command was killed: delete what it wrote that is not needed"
        )
