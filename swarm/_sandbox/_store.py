"""The files every sandbox of a user shows its commands (the seccomp filter, the `/etc`,
filtered git configs), kept once per machine and user, not once per process.

Each swarm process used to write them into temporary directories of its own, removed when
it exited normally: a killed process (a run stopped with SIGKILL, a test runner's timeout,
a Ray worker) left all three behind, and /tmp held hundreds of each. Here they live in one
directory per user, `<tmp>/swarm-<uid>`, named by their content (a file) or by what their
content is made from (a tree), so every process of that user finds and reuses the same
ones, and a process killed at any moment leaves nothing a later one does not reuse or
clear up.

The directory is made 0700 and trusted only if it is a real directory (not a symlink),
owned by this uid and closed to everyone else; elsewhere (another user made the name
first) this process uses a private directory of its own, removed at exit, and says so
once. Entries appear atomically: a file is written under a temporary name and renamed
into place, a tree built under a temporary name and renamed whole; the temporary names
carry the writer's pid, and those of writers no longer alive are removed when a process
first uses the directory. Nothing else is ever removed: an entry may be in use by a
running command of another process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import secrets
import shutil
import stat
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

from swarm._sandbox.process import pid_alive

__all__ = ["directory", "file", "shared_in", "tree"]

log = logging.getLogger(__name__)

_PARTIAL = ".partial-"
"""The prefix of an entry being written: `.partial-<pid>-<random>`."""


@functools.cache
def directory() -> Path:
    """This user's directory of shared sandbox files (made, checked, swept once)."""
    return shared_in(Path(tempfile.gettempdir()))


def shared_in(tmp: Path) -> Path:
    """This user's directory of shared sandbox files in `tmp`, made or checked and swept;
    a private one, removed at exit, where the shared one is not safe."""
    uid = os.geteuid()
    where = tmp / f"swarm-{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(where, 0o700)
    problem = _untrusted(where, uid)
    if problem is None:
        _sweep(where)
        return where
    private = Path(tempfile.mkdtemp(prefix=f"swarm-{uid}-", dir=tmp))
    weakref.finalize(_sweep, shutil.rmtree, private, ignore_errors=True)
    log.warning(
        "%s is not safe to share (%s): this process keeps its sandbox files in %s instead",
        where,
        problem,
        private,
    )
    return private


def _untrusted(where: Path, uid: int) -> str | None:
    """Why `where` may not be trusted, or None."""
    try:
        info = os.lstat(where)
    except OSError as exc:
        return str(exc)
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if info.st_uid != uid:
        return f"owned by uid {info.st_uid}"
    if info.st_mode & 0o077:
        return f"mode {stat.S_IMODE(info.st_mode):o}, open to others"
    return None


def _sweep(where: Path) -> None:
    """Remove the partial entries of writers that are no longer alive."""
    with contextlib.suppress(OSError), os.scandir(where) as entries:
        for entry in entries:
            if not entry.name.startswith(_PARTIAL):
                continue
            pid = entry.name.removeprefix(_PARTIAL).split("-", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def _partial() -> Path:
    return directory() / f"{_PARTIAL}{os.getpid()}-{secrets.token_hex(4)}"


def file(kind: str, content: bytes) -> Path:
    """A file holding `content` (mode 0644: a sandboxed command's uid may read it), named
    `<kind>-<hash of content>`: written once, then reused."""
    where = directory() / f"{kind}-{hashlib.sha256(content).hexdigest()[:32]}"
    try:
        if where.read_bytes() == content:
            return where
    except OSError:
        pass
    partial = _partial()
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            os.fchmod(f.fileno(), 0o644)  # whatever the umask
        os.replace(partial, where)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return where


def tree(kind: str, key: str, build: Callable[[Path], None]) -> Path:
    """A directory named `<kind>-<hash of key>`: `key` says everything its content is made
    from; `build` makes that content in an empty directory it is given, once."""
    where = directory() / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:32]}"
    if where.is_dir():
        return where
    partial = _partial()
    partial.mkdir()
    try:
        build(partial)
        try:
            partial.rename(where)
        except OSError:  # another process made it first: theirs is the same
            if not where.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return where
