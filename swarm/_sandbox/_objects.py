"""Taking in the objects a sandboxed git command wrote to an object directory of its own.

A git command that runs the repository's hooks (`hooks: run`) sees the repository's
objects read-only, and writes its own (the commit, its trees, what a hook `git add`s) to a
private directory (`GIT_OBJECT_DIRECTORY`, the shared store as its alternate). Nothing in
that directory is trusted: `adopt` takes each loose object in only after checking it (its
header, its size, its name the hash of its content), so a hook can neither corrupt the
user's store nor replace an object in it; packs, which a hook would have had to make on
purpose, are refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import zlib
from pathlib import Path

from swarm.errors import WorkspaceError

__all__ = ["MAX_OBJECT_BYTES", "adopt"]

MAX_OBJECT_BYTES = 256 * 1024 * 1024
"""The largest object taken in (its content, inflated)."""
_HEX = re.compile(r"[0-9a-f]+")
_TYPES = (b"blob", b"tree", b"commit", b"tag")


def adopt(private: Path, store: Path) -> int:
    """Move the loose objects of `private` into the object store `store` (those it lacks);
    the number taken in. WorkspaceError for one that is not what its name says."""
    if any((private / "pack").glob("*.pack")):
        raise WorkspaceError(f"a hook packed objects in {private}; refused")
    taken = 0
    with contextlib.suppress(FileNotFoundError), os.scandir(private) as fans:
        for fan in fans:
            if len(fan.name) != 2 or not _HEX.fullmatch(fan.name) or not fan.is_dir():
                continue
            with os.scandir(fan.path) as entries:
                for entry in entries:
                    if _HEX.fullmatch(entry.name) and len(entry.name) in (38, 62):
                        taken += _take(Path(entry.path), fan.name + entry.name, store)
    return taken


def _take(path: Path, name: str, store: Path) -> int:
    target = store / name[:2] / name[2:]
    if target.exists():
        return 0
    data = _checked(path, name)
    target.parent.mkdir(exist_ok=True)
    temporary = target.parent / f"tmp_obj_swarm_{os.getpid()}_{name[2:10]}"
    temporary.write_bytes(data)
    temporary.chmod(0o444)
    os.replace(temporary, target)
    return 1


def _checked(path: Path, name: str) -> bytes:
    """The compressed object at `path`, if it inflates to a well-formed object whose hash
    is `name`."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not (os.fstat(fd).st_mode & 0o170000) == 0o100000:  # a regular file
            raise WorkspaceError(f"object {name} is not a file; refused")
        data = f.read(MAX_OBJECT_BYTES + 1)
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(data, MAX_OBJECT_BYTES + 64)
    except zlib.error:
        raise WorkspaceError(f"object {name} is corrupt; refused") from None
    header, nul, content = raw.partition(b"\0")
    kind, _, size = header.partition(b" ")
    well_formed = nul and kind in _TYPES and size.isdigit() and int(size) == len(content)
    if not well_formed or inflate.unconsumed_tail:
        raise WorkspaceError(f"object {name} is corrupt or too large; refused")
    digest = (hashlib.sha1 if len(name) == 40 else hashlib.sha256)(raw).hexdigest()
    if digest != name:
        raise WorkspaceError(f"object {name} does not hold what its name says; refused")
    return data
