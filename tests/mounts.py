"""The filesystems a test may leave mounted: worktrees that are filesystems of their own
(`swarm._sandbox._volume`, as root with loop devices). One left under a test's directory
keeps its loop device and makes pytest's removal of old test directories fail (EBUSY)."""

from __future__ import annotations

import re
from pathlib import Path

from swarm._sandbox import _volume

__all__ = ["mounted_under", "release_all"]

_ESCAPED = re.compile(r"\\([0-7]{3})")


def mounted_under(where: Path) -> list[Path]:
    """The mount points below `where`, deepest first."""
    try:
        with open("/proc/self/mountinfo") as f:
            points = [_ESCAPED.sub(lambda m: chr(int(m[1], 8)), line.split()[4]) for line in f]
    except OSError:
        return []
    prefix = f"{where}/"
    return sorted((Path(p) for p in points if p.startswith(prefix)), key=lambda p: -len(p.parts))


def release_all(where: Path) -> list[Path]:
    """Unmount every filesystem below `where` (and delete its image); returns them."""
    left = mounted_under(where)
    for point in left:
        _volume.release(point)
    return left
