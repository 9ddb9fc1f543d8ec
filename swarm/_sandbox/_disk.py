"""A worktree's disk quota: how much its commands may make it grow, checked while they run.

No kernel limit fits a worktree that lives in a directory of the host's filesystem: project
quotas need the filesystem mounted with `prjquota` (most are not, and it cannot be done
from here), and a loop-mounted image per worktree would move the worktree itself. What the
kernel enforces is per file (RLIMIT_FSIZE, `Limits.file_size_mb`) and per sandbox for its
memory-backed `/tmp` and `/dev/shm` (their sizes). The rest is this check: the sandbox's
guard asks `DiskWatch.over()` at each of its looks (5 to 250 ms apart), which costs one
`statvfs` as long as the filesystem's free space has not fallen by more than the room the
worktree had left at the last count; only then is the worktree counted (every file's
allocated blocks, symlinks not followed), and a command that made it grow past
`Limits.disk_mb` beyond its size at its first command is killed, and told so. Between two
looks a command can write what the disk takes in that time (a 64 MB quota stopped a 400 MB
bomb at 128 MB); space another process frees at the same moment can hide growth from
`statvfs` until the next count.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["DiskWatch", "used"]

_MB = 1024 * 1024
_sizes: dict[Path, tuple[int, int]] = {}
"""Each worktree's size when its first command started (the quota is growth past it), and
at its last count."""
_MAX_SIZES = 4096


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

    def __init__(self, root: Path, limit_mb: int) -> None:
        self.root, self.limit_mb = root, limit_mb
        if root not in _sizes:  # counted once; later only when the disk fills (`over`)
            if len(_sizes) > _MAX_SIZES:
                _sizes.clear()
            size = used(root)
            _sizes[root] = (size, size)
        self._baseline, self._counted = _sizes[root]
        self._allowed = self._baseline + limit_mb * _MB
        self._free = self._free_bytes()

    def _free_bytes(self) -> int:
        info = os.statvfs(self.root)
        return info.f_bfree * info.f_frsize

    def over(self) -> str | None:
        """Why the command must stop (the worktree past its quota), or None."""
        free = self._free_bytes()
        if self._free - free <= self._allowed - self._counted:
            return None  # the whole filesystem has not taken in the room left
        self._counted, self._free = used(self.root), free
        _sizes[self.root] = (self._baseline, self._counted)
        if self._counted <= self._allowed:
            return None
        grown = (self._counted - self._baseline) / _MB
        return (
            f"the worktree grew past its disk quota of {self.limit_mb} MB (by {grown:.0f} MB "
            "in all); the command was killed: delete what it wrote that is not needed"
        )
