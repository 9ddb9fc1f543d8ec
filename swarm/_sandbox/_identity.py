"""Who a sandboxed command is to the host's kernel: never root.

Unprivileged, bubblewrap maps the command's uid in a user namespace to the uid that
started it, so when swarm runs as root (containers, CI, agent VMs) a command was uid 0 to
the host without capabilities: the owner of every root-owned file it could reach. When
swarm runs as root, bubblewrap therefore makes no user namespace: it builds the mounts as
root (so it can open every path it binds, `/root` and other 0700 directories included),
keeps only the capabilities to change identity (`KEPT_CAPABILITIES`), and the command's
first step inside the sandbox (`Drop`: swarm's static helper, `swarm._sandbox._drop`, else
`setpriv`) becomes `HOST_UID`:`HOST_GID` with no supplementary groups, no capabilities in
any set, an empty bounding set and `no_new_privs`, then execs the command: an
unprivileged uid with no capabilities, for good (Docker's order: set up as root, drop
before the command). Flatpak, Codex and Claude Code's sandbox runtime run bubblewrap as the
user, which has no root to drop; this is the same end for a root swarm.

The worktree and the other writable paths are root's files, which that uid may not write:
`grant` gives it read, write and search there with POSIX ACLs, the default ACL too, so what
swarm's file tools and host-side git write later is the command's to change as well. The
uid owns nothing on the host, so a root-owned file bound where it should not be is only
what its mode lets anyone do with it.

When swarm is not root, the user namespace maps the command to swarm's own uid, which is
not root either: nothing here applies. Nor where a root swarm may not make namespaces
without a user namespace (a container's root lacks CAP_SYS_ADMIN by default; probed once):
commands then run as before, in a user namespace mapping them to uid 0, and the run says
so at its start.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import stat
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from swarm._sandbox import _drop

__all__ = ["HOST_GID", "HOST_UID", "KEPT_CAPABILITIES", "Drop", "dropping", "grant", "problem"]

HOST_UID = HOST_GID = 65532
"""The uid and gid a command runs as when swarm is root: owns no file, in no group (the
number distroless images use for `nonroot`)."""
KEPT_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
"""What bubblewrap leaves the command's first step: to change uid and gid, and to empty
the bounding set; the drop step gives them up before the command runs."""
_ACCESS, _DEFAULT = "system.posix_acl_access", "system.posix_acl_default"
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
_RWX = 7

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Drop:
    """How a command sheds root: its first step, and the bubblewrap arguments that show
    that step inside the sandbox."""

    argv: tuple[str, ...]
    """Run before the command's own argv: it ends by exec-ing that argv."""
    mounts: tuple[str, ...]
    how: str
    """In a few words, for the run's log."""


@functools.cache
def dropping() -> Drop | None:
    """How commands drop to `HOST_UID` (swarm is root), else None (swarm is not root, or
    it cannot be done here: see `problem`). The static helper (`swarm._sandbox._drop`)
    where it builds and runs, else `setpriv`; which one is said once."""
    if os.geteuid() != 0:
        return None
    found = _found()
    if isinstance(found, str):
        return None
    log.info("a root swarm's commands drop to uid %d %s", HOST_UID, found.how)
    return found


def problem() -> str | None:
    """Why a root swarm's commands keep uid 0 on the host (in a user namespace of their
    own, as a normal user's do), or None."""
    if os.geteuid() != 0:
        return None
    found = _found()
    return found if isinstance(found, str) else None


@functools.cache
def _found() -> Drop | str:
    """The first drop step bubblewrap runs here, as root and without a user namespace
    (the helper, then `setpriv`), probed once; or why there is none. A root without
    CAP_SYS_ADMIN (a container's, by default) may make no namespace so."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    built = _drop.helper()
    if built is not None:
        mounts = ("--ro-bind", str(built), _drop.INSIDE)
        helper = Drop((_drop.INSIDE, str(HOST_UID), str(HOST_GID)), mounts, "via swarm's helper")
        if (failed := _failure(helper)) is None:
            return helper
        log.info("the sandbox's drop helper did not run here (%s): trying setpriv", failed)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return "setpriv (util-linux) is not installed: commands run as host uid 0"
    drop = Drop(tuple(_setpriv_argv(setpriv)), (), "via setpriv")
    if (failed := _failure(drop)) is None:
        return drop
    return f"bubblewrap could not drop to uid {HOST_UID} ({failed}): commands run as host uid 0"


def _failure(drop: Drop) -> str | None:
    """Why bubblewrap, as root and without a user namespace, did not run `true` after
    `drop`'s step; None when it did."""
    line = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--tmpfs", "/run"]
    line += drop.mounts  # the helper's mount point is made in that /run
    line += ["--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL"]
    for name in KEPT_CAPABILITIES:
        line += ["--cap-add", name]
    try:
        done = subprocess.run(
            [*line, "--", *drop.argv, "/bin/true"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip()[-300:] or f"exit {done.returncode}"
    return None


def _setpriv_argv(setpriv: str) -> list[str]:
    return [
        setpriv,
        *("--reuid", str(HOST_UID), "--regid", str(HOST_GID), "--clear-groups"),
        *("--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs"),
        "--",
    ]


def grant(path: Path) -> None:
    """Let `HOST_UID` read, write and search `path` and everything under it, and what is
    made there later (ACLs, access and default). Once per tree: a tree whose top already
    grants it is left as it is (only root may change that top's ACL). Symlinks are not
    followed; only directories and regular files are touched."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if _granted(top):
            return
    finally:
        os.close(top)
    for _, _, files, fd in os.fwalk(path, topdown=False, follow_symlinks=False):
        for name in files:
            with contextlib.suppress(OSError):
                _grant_file(name, fd)
        _set(fd, _DEFAULT, os.fstat(fd).st_mode, directory=True)
        _set(fd, _ACCESS, os.fstat(fd).st_mode, directory=True)  # the top's last: the mark


def _grant_file(name: str, parent: int) -> None:
    if not stat.S_ISREG(os.lstat(name, dir_fd=parent).st_mode):
        return
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(name, flags, dir_fd=parent)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            _set(fd, _ACCESS, mode, directory=False)
    finally:
        os.close(fd)


def _set(fd: int, kind: str, mode: int, *, directory: bool) -> None:
    """An ACL on `fd`: its mode's entries, plus `HOST_UID` with what the owner has and
    write (search too for a directory). OSError where the filesystem has no ACLs."""
    owner, group, other = (mode >> 6) & _RWX, (mode >> 3) & _RWX, mode & _RWX
    ours = _RWX if directory else owner | 6
    entries = [
        (_USER_OBJ, owner, _NO_ID),
        (_USER, ours, HOST_UID),
        (_GROUP_OBJ, group, _NO_ID),
        (_MASK, ours | group, _NO_ID),
        (_OTHER, other, _NO_ID),
    ]
    data = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    os.setxattr(fd, kind, data)


def _granted(fd: int) -> bool:
    try:
        data = os.getxattr(fd, _DEFAULT)
    except OSError:
        return False
    entries = [struct.unpack_from("<HHI", data, at) for at in range(4, len(data), 8)]
    return (_USER, _RWX, HOST_UID) in entries
