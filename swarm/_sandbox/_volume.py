"""A worktree's own filesystem: where the kernel holds the worktree's disk quota.

A worktree that is a directory of the host's filesystem can only be watched
(`swarm._sandbox._disk`): many small files written fast pass a quota before a look sees
them. Where swarm is root and the machine has loop devices and `mkfs.ext4` (containers, CI
and agent VMs, where it mostly runs), each worktree gets a filesystem of its own instead: a
sparse ext4 image beside the worktree (`<name>.img`; the host's disk holds only what is
written), made without a journal or reserved blocks and loop-mounted `nosuid,nodev,noatime`
at the worktree's path before git checks the files out into it. The image holds the
checkout (`Footprint`) plus the quota, so a write past the quota fails with ENOSPC,
whoever makes it: a command, a file tool, host-side git. A command that met it is told so
(`used_up`). Removing the worktree unmounts it first (lazily when something still holds
it) and deletes the image; its files are never written to the host's disk.

Where it cannot be done (not root, no loop device, no `mkfs.ext4`, a mount refused) the
worktree is a plain directory and the quota is `_disk`'s check; the run says so once
(`unusable`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import anyio

from swarm._sandbox import _spawn
from swarm.errors import WorkspaceError

__all__ = [
    "Footprint",
    "image_of",
    "make",
    "quota_of",
    "release",
    "remove",
    "unusable",
    "used_up",
]

log = logging.getLogger(__name__)

_MB = 1024 * 1024
_BLOCK = 4096
_INODE_SIZE = 256
_BYTES_PER_INODE = 16384
"""Inodes for the quota's room: one per 16 KB (mkfs's default ratio); files beyond that
many are refused like bytes past the quota."""
_GROUP = 128 * _MB
"""ext4's block group with 4 KB blocks: each has its bitmaps and a share of the inode table."""
_PER_GROUP = 4 * _BLOCK
"""Each group's bitmaps, descriptors and rounding of its inode table, with room to spare."""
_KERNEL_RESERVE, _KERNEL_RESERVE_MAX = 0.02, 16 * _MB
"""What ext4 keeps back from every writer (2 % of the blocks, at most 4,096 of them), so
that delayed allocation never meets a full disk: an image is that much larger."""
_STEP_TIMEOUT_S = 30.0
"""Upper bound on one mkfs, mount or umount."""
_FULL_BYTES = 256 * 1024
"""Free space under which a volume counts as used up (a write that failed left less)."""
_volumes: dict[Path, int] = {}
"""Mounted worktrees of this process, and their quotas in MB."""
_said: list[str] = []
"""Why a volume could not be made, once said (one warning a process)."""


@dataclass(frozen=True)
class Footprint:
    """What a checkout takes on ext4: its blocks and its inodes."""

    bytes: int
    inodes: int

    @classmethod
    def of_tree(cls, listing: str) -> Footprint:
        """From `git ls-tree -r -t -l -z` output: a block per 4 KB of each file (what
        ext4 allocates) and per directory."""
        total = inodes = 0
        for entry in listing.split("\0"):
            if not entry:
                continue
            head = entry.split("\t", 1)[0].split()
            if len(head) < 4:
                continue
            inodes += 1
            size = _BLOCK if head[1] == "tree" else int(head[3]) if head[3].isdigit() else 0
            total += -(-size // _BLOCK) * _BLOCK
        return cls(total, inodes)


@functools.cache
def unusable() -> str | None:
    """Why worktrees cannot have filesystems of their own here, or None when they can."""
    if os.geteuid() != 0:
        return "swarm is not root"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if _tool(tool) is None:
            return f"no {tool}"
    return None


def image_of(path: Path) -> Path:
    """Where worktree `path`'s image lives: beside it, `<name>.img`."""
    return path.with_name(f"{path.name}.img")


async def make(path: Path, quota_mb: int, footprint: Footprint) -> bool:
    """Make `path` (absent) a mounted filesystem with room for `footprint` plus `quota_mb`;
    False (and `path` not made) when it cannot be done here: the caller makes a directory."""
    if unusable() is not None:
        return False
    image = image_of(path)
    inodes = footprint.inodes + quota_mb * _MB // _BYTES_PER_INODE + 64
    size = _image_size(footprint.bytes + 2 * _BLOCK + quota_mb * _MB, inodes)  # + `.git`
    made_image = made_dir = False  # on failure, undo only what this call made
    try:
        _sparse_file(image, size)
        made_image = True
        await _run(
            "mkfs.ext4", "-q", "-F", "-b", str(_BLOCK), "-I", str(_INODE_SIZE),
            "-N", str(inodes), "-m", "0", "-O", "^has_journal,^resize_inode",
            "-E", "lazy_itable_init=1,nodiscard", str(image),
        )  # fmt: skip
        os.mkdir(path)
        made_dir = True
        await _run("mount", "-o", "loop,nosuid,nodev,noatime", str(image), str(path))
        _volumes[path] = quota_mb
        (path / "lost+found").rmdir()  # git adds a worktree only to an empty directory
    except (OSError, WorkspaceError) as exc:
        _say_once(f"{exc}")
        if made_dir:
            with anyio.CancelScope(shield=True):
                await remove(path)
            with contextlib.suppress(OSError):
                os.rmdir(path)
        elif made_image:
            image.unlink(missing_ok=True)
        return False
    return True


async def remove(path: Path) -> None:
    """Unmount worktree `path`'s filesystem if it has one (lazily when something still
    holds it) and delete its image; bounded, and a no-op for a plain directory."""
    if _forget(path):
        with anyio.CancelScope(shield=True):
            try:
                await _run("umount", str(path))
            except WorkspaceError:
                with contextlib.suppress(WorkspaceError):
                    await _run("umount", "--lazy", str(path))
    image_of(path).unlink(missing_ok=True)


def release(path: Path) -> None:
    """`remove` for a caller with no event loop (or one whose process is gone): unmount,
    lazily when something still holds it, and delete the image."""
    if _forget(path) and not _umount(path):
        _umount(path, "--lazy")
    image_of(path).unlink(missing_ok=True)


def _forget(path: Path) -> bool:
    """Forget worktree `path`'s quota; whether a filesystem is mounted there (this
    process's or a dead run's)."""
    _volumes.pop(path, None)
    return os.path.ismount(path)


def _umount(path: Path, *options: str) -> bool:
    exe = _tool("umount")
    if exe is None:
        return False
    try:
        done = subprocess.run(
            [exe, *options, str(path)], capture_output=True, timeout=_STEP_TIMEOUT_S, env=_ENV
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def quota_of(cwd: Path) -> int | None:
    """The quota (MB) of the volume `cwd` is in, if it is in one of this process's."""
    if not _volumes:
        return None
    for where in (cwd, *cwd.parents):
        if (quota := _volumes.get(where)) is not None:
            return quota
    return None


def used_up(cwd: Path, output: str) -> list[str]:
    """What to tell a command run in `cwd` whose worktree's volume is full."""
    quota = quota_of(cwd)
    if quota is None:
        return []
    try:
        info = os.statvfs(cwd)
    except OSError:
        return []
    full = info.f_bavail * info.f_frsize < _FULL_BYTES or info.f_favail == 0
    if not full and "No space left on device" not in output:
        return []
    return [
        f"the worktree's disk quota of {quota} MB is used up: writes past it were refused "
        "(no space left on device); delete what is not needed"
    ]


def _image_size(data: int, inodes: int) -> int:
    """The image whose free space after mounting is `data` (bytes) with `inodes` inodes."""
    base = data + inodes * _INODE_SIZE
    size = base
    for _ in range(3):  # the groups' share depends on the size: settled in a step or two
        reserve = min(int(size * _KERNEL_RESERVE), _KERNEL_RESERVE_MAX)
        size = base + reserve + (size // _GROUP + 1) * _PER_GROUP
    return -(-size // _BLOCK) * _BLOCK


def _sparse_file(path: Path, size: int) -> None:
    with open(path, "xb") as f:
        f.truncate(size)


async def _run(tool: str, *args: str) -> None:
    exe = _tool(tool)
    if exe is None:
        raise WorkspaceError(f"no {tool}")
    try:
        with anyio.fail_after(_STEP_TIMEOUT_S, shield=True):
            done = await _spawn.run([exe, *args], env=_ENV, how=_QUICK)
    except TimeoutError:
        raise WorkspaceError(f"{tool} took over {_STEP_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise WorkspaceError(f"{tool} could not start: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()
        raise WorkspaceError(f"{tool} failed ({done.returncode}): {said[:300]}")


_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
_QUICK = _spawn.Spawning(grace_s=0.0)
"""mkfs, mount and umount run shielded within their own bound: no grace on top."""


@functools.cache
def _tool(name: str) -> str | None:
    return shutil.which(name, path=_ENV["PATH"])


def _say_once(why: str) -> None:
    if _said:
        return
    _said.append(why)
    log.warning(
        "a worktree could not have a filesystem of its own (%s): its disk quota is a check, "
        "which commands writing fast may pass before they are stopped",
        why,
    )
