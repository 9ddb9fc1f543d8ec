"""Opening files inside a workspace so that nothing outside it can be reached, even by a
directory swapped for a symlink between the check and the use.

`resolve_path` checks a path once; a concurrent process (a command the agent started,
another agent's tool) may replace a checked directory with a symlink to `/etc` before the
file is opened. So every open here walks the checked path one component at a time from a
descriptor of the workspace root, each component opened relative to its parent's
descriptor with `O_NOFOLLOW`: a component that became a symlink fails the walk instead of
being followed.

What is opened is never trusted to be a file: a command may have put a FIFO, a socket or a
device where a file was (`mkfifo app.py`: an open for reading or writing then waits for a
peer, forever, and ignores cancellation). So the last component is opened with
`O_NONBLOCK` (a FIFO opens at once, or fails with ENXIO) and without `O_TRUNC`, its type
checked with `fstat`, and anything but a regular file refused; a write truncates only then.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import resolve_path
from swarm.errors import ToolError

__all__ = ["DirEntry", "list_confined", "read_confined", "read_regular", "write_confined"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SWAPPED = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)
"""What an `O_NOFOLLOW` open of a component that became a symlink fails with."""

DirEntry = tuple[str, bool]
"""A directory entry: its name and whether it is a directory."""


def _swapped(path: str) -> ToolError:
    return ToolError(
        f"{path!r} changed while it was being opened (a symlink appeared in its path); refused"
    )


@contextmanager
def _parent_fd(ctx: ToolContext, path: str, *, writing: bool) -> Iterator[tuple[int, str, Path]]:
    """A descriptor of the checked path's parent directory, its last component, the path."""
    target = resolve_path(ctx, path, writing=writing)
    root = ctx.real_root
    parts = target.relative_to(root).parts
    fd = os.open(root, _DIR)
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not writing:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                next_fd = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        yield fd, parts[-1] if parts else ".", target
    except OSError as exc:
        if exc.errno in _SWAPPED:
            raise _swapped(path) from None
        if exc.errno == errno.ENOENT:
            raise ToolError(f"no such file or directory: {path!r}") from None
        raise
    finally:
        os.close(fd)


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _not_a_file(path: str, mode: int) -> ToolError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return ToolError(f"{path!r} is {kind}, not a regular file; refused")


def _open_file(path: str, name: str, parent: int, flags: int) -> int:
    """`name` in `parent` opened with `flags` (plus `O_NONBLOCK`, `O_NOFOLLOW`), checked
    to be a regular file or a directory (which the caller refuses as it sees fit)."""
    try:
        fd = os.open(
            name, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=parent
        )
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO without a reader, or a socket
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            raise _not_a_file(path, info.st_mode) from None
        raise
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        os.close(fd)
        raise _not_a_file(path, mode)
    os.set_blocking(fd, True)
    return fd


def read_confined(ctx: ToolContext, path: str, max_bytes: int) -> tuple[Path, bytes]:
    """The bytes of the file at `path` in the workspace; ToolError for a directory, a file
    over `max_bytes`, or a path that changed under us."""
    with _parent_fd(ctx, path, writing=False) as (parent, name, target):
        try:
            fd = _open_file(path, name, parent, os.O_RDONLY)
        except FileNotFoundError:
            raise ToolError(f"no such file: {path!r}") from None
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ToolError(f"{path!r} is a directory; use list_dir")
            if info.st_size > max_bytes:
                raise ToolError(
                    f"{path!r} is too large ({info.st_size} bytes); look into it with search"
                )
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as f:
            return target, f.read(max_bytes + 1)


def read_regular(path: Path) -> bytes | None:
    """The bytes of `path` if it is a regular file (not followed if a symlink), else None:
    for code that walks a worktree itself (the search tool without ripgrep)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read()


def write_confined(ctx: ToolContext, path: str, data: bytes) -> Path:
    """Write `data` to `path` in the workspace (parents made); returns the resolved path.

    The room is taken before the file is touched: a write the disk (a worktree's quota)
    refuses leaves an existing file as it was and makes no new one."""
    with _parent_fd(ctx, path, writing=True) as (parent, name, target):
        try:
            fd = _open_file(path, name, parent, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            made = True
        except FileExistsError:
            made = False
            try:
                fd = _open_file(path, name, parent, os.O_WRONLY)
            except IsADirectoryError:
                raise ToolError(f"{path!r} is a directory") from None
        with os.fdopen(fd, "wb") as f:
            size = os.fstat(f.fileno()).st_size
            try:
                if data:
                    os.posix_fallocate(f.fileno(), 0, len(data))
            except OSError:
                with contextlib.suppress(OSError):  # what a refused allocation added
                    if made:
                        os.unlink(name, dir_fd=parent)
                    else:
                        f.truncate(size)
                raise
            f.write(data)  # over the old bytes, in room already taken
            f.truncate(len(data))  # what was longer ends here
        return target


def list_confined(ctx: ToolContext, path: str) -> tuple[Path, list[DirEntry]]:
    """The entries of the directory at `path` in the workspace."""
    with _parent_fd(ctx, path, writing=False) as (parent, name, target):
        try:
            fd = os.open(name, _DIR, dir_fd=parent)
        except FileNotFoundError:
            raise ToolError(f"no such directory: {path!r}") from None
        except NotADirectoryError:
            if os.path.islink(target):  # a symlink swapped in: not followed
                raise _swapped(path) from None
            raise ToolError(f"{path!r} is a file; use read_file") from None
        try:
            with os.scandir(fd) as entries:
                return target, [(e.name, e.is_dir()) for e in entries]
        finally:
            os.close(fd)
