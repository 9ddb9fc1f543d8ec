"""What enters a workspace's patch: `worktree_diff` and its rules.

A patch holds what the agent changed, never what its check left behind (`.nyc_output/`,
`coverage/`, `.coverage`, reports: on real repositories these went into every patch, made
rebases fail and got committed). So it is built, on a throwaway copy of the worktree's
index, from

- every change to tracked files (`git add --update`: edits and deletions),
- the untracked files the tools wrote (`untracked`, from the workspace's `WriteLog`), and
  untracked files with the content of a deleted tracked file (a move made with `mv`),
- minus every path matching `.swarmignore` at the worktree's root (gitignore syntax,
  matched by git itself), even a tracked one: such paths stay as they were at `base`.

Gitignored files never enter. With `untracked=None` every untracked, unignored file does
(what `git_diff` shows an agent).

The blobs `git add` makes of the agent's files go to an object directory of the diff's own
(`GIT_OBJECT_DIRECTORY`, the repository's store its alternate), removed with the scratch
index: never to the shared store, which every agent's sandbox shows read-only (`git
cat-file --batch-all-objects` in one agent's sandbox listed the others' unfinished files).

A worktree is the agent's, not to be trusted: before any diff is built, the files that
would enter are sized (`lstat`, nothing read), and one past `MAX_PATCH_FILE_BYTES` or all
together past `MAX_PATCH_BYTES` refuse the patch with a `WorkspaceError` naming the file
(a 150 MB file written over a tracked one made the coordinator build a 203 MB patch).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from swarm._sandbox.base import git_dir
from swarm.agent._tool import WriteLog
from swarm.errors import WorkspaceError
from swarm.run._git import _git_env, _git_raw, git

__all__ = [
    "MAX_PATCH_BYTES",
    "MAX_PATCH_FILE_BYTES",
    "SWARMIGNORE",
    "apply_patch",
    "header_path",
    "patch_paths",
    "python_sections",
    "worktree_diff",
]

MAX_PATCH_FILE_BYTES = 16 * 1024 * 1024
"""The largest file a patch may carry (its size in the worktree)."""
MAX_PATCH_BYTES = 64 * 1024 * 1024
"""The most all the files a patch carries may hold together."""

SWARMIGNORE = ".swarmignore"
"""Gitignore-syntax patterns of paths that never enter a patch."""
_EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
_FILE_SECTION = re.compile(r"^diff --git ", re.MULTILINE)
_NEW_PYTHON_PATH = re.compile(r"^\+\+\+ b/(.+\.py)$", re.MULTILINE)


async def worktree_diff(
    root: Path,
    base: str = "HEAD",
    *,
    index: Path | None = None,
    untracked: Iterable[str] | None = None,
) -> str:
    """The diff of `root`'s files against `base` (binary-safe); see the module's rules.

    `untracked`: the untracked files (root-relative posix paths) that may enter; None lets
    every untracked, unignored file in. The real index is left as it was: when there is
    nothing untracked to add and no `.swarmignore`, the patch is the worktree against
    `base` (one git process when each written file is a tracked one it changes and none
    was deleted, two otherwise); else it is built on a copy of the worktree's index
    (`index`, found with git when None).
    """
    await _check_sizes(root, base, untracked)
    listed = None
    if untracked is not None:
        written = frozenset(untracked)
        # the worktree against `base`: git reads the worktree's own index only for its
        # stat data, and tracked paths alone enter
        plain = None
        if not (root / SWARMIGNORE).is_file():
            plain = await _diff(root, base, _git_env(), cached=False)
            if written <= _changed_paths(plain) and "\ndeleted file mode " not in plain:
                return plain  # each written file a tracked one it shows, none deleted
        listed = await _listed(root)
        none_written = not any(p in written for p in listed.others)
        if plain is not None and none_written and not (listed.others and listed.deleted):
            return plain  # nothing untracked to add (none written, none moved)
    if index is None:
        out = await git("rev-parse", "--git-path", "index", cwd=root)
        index = Path(out) if Path(out).is_absolute() else root / out
    with tempfile.TemporaryDirectory(prefix="swarm-index-") as tmp:
        scratch = Path(tmp) / "index"
        if index.exists():
            # copy2 keeps the index file's mtime: git rehashes entries not older than the
            # index ("racily clean"); a fresh mtime would hide a same-size edit made within
            # the same second as the checkout, and the patch would come out empty
            shutil.copy2(index, scratch)
        env = _git_env(GIT_INDEX_FILE=str(scratch), **_own_objects(root, Path(tmp)))
        if untracked is None or listed is None:
            await git("add", "--all", cwd=root, env=env)
        else:
            await git("add", "--update", cwd=root, env=env)
            chosen = await _chosen(root, env, base, listed.others, frozenset(untracked))
            await _add(root, env, chosen)
        await _drop_swarmignored(root, env, base)
        return await _diff(root, base, env, cached=True)


def _own_objects(root: Path, scratch: Path) -> dict[str, str]:
    """git's variables that write new objects to `scratch/objects`, reading the
    repository's store of `root` through an alternate (none when it is not found)."""
    common = git_dir(root)
    store = common / "objects" if common is not None else root / ".git" / "objects"
    if not store.is_dir():
        return {}
    (scratch / "objects").mkdir()
    return {
        "GIT_OBJECT_DIRECTORY": str(scratch / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(store),
    }


async def _check_sizes(root: Path, base: str, untracked: Iterable[str] | None) -> None:
    """Refuse (WorkspaceError) a patch whose files are too large: see the module."""
    out = await git("diff", "--name-only", "-z", "--no-renames", base, "--", cwd=root)
    paths = _nul_list(out)
    if untracked is None:
        paths += (await _listed(root)).others
    else:
        paths += untracked
    total = 0
    for path in dict.fromkeys(paths):
        try:
            size = os.lstat(root / path).st_size
        except OSError:  # deleted: nothing to carry
            continue
        total += size
        if size > MAX_PATCH_FILE_BYTES or total > MAX_PATCH_BYTES:
            what = "it" if size > MAX_PATCH_FILE_BYTES else "the patch's files together"
            limit = MAX_PATCH_FILE_BYTES if size > MAX_PATCH_FILE_BYTES else MAX_PATCH_BYTES
            raise WorkspaceError(
                f"the patch of {root.name} is refused: {path} is {size / 1e6:.1f} MB and "
                f"{what} would pass the limit of {limit // (1024 * 1024)} MB; delete or "
                "shrink it (a generated or downloaded file belongs in .gitignore)"
            )


async def _diff(root: Path, base: str, env: Mapping[str, str], *, cached: bool) -> str:
    return await _git_raw(
        "diff",
        *(["--cached"] if cached else []),
        "--binary",
        "--no-color",
        "--no-ext-diff",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        base,
        "--",
        cwd=root,
        env=env,
    )


def _changed_paths(diff: str) -> set[str]:
    """The paths of a diff's `diff --git a/P b/P` headers (not renames, copies, quoted)."""
    return {p for line in diff.splitlines() if (p := header_path(line)) is not None}


def python_sections(patch: str) -> list[tuple[str, str]]:
    """Each Python file a unified diff leaves in place (its `+++ b/` side), with its part
    of the patch, in order."""
    sections = []
    for section in _FILE_SECTION.split(patch):
        if (path := _NEW_PYTHON_PATH.search(section)) is not None:
            sections.append((path[1], section))
    return sections


def header_path(line: str) -> str | None:
    """P, if `line` is a `diff --git a/P b/P` header naming one unquoted path."""
    if not line.startswith("diff --git "):
        return None
    rest = line[len("diff --git ") :]
    n = (len(rest) - 5) // 2  # "a/P b/P": both sides name the same path
    return rest[2 : 2 + n] if rest == f"a/{rest[2 : 2 + n]} b/{rest[2 : 2 + n]}" else None


@dataclass(frozen=True)
class _Listed:
    others: list[str]
    """The untracked, unignored files: the same with the worktree's index or with a copy
    `git add --update` changed (that adds no path)."""
    deleted: bool
    """Whether a file in the index is gone from the worktree (perhaps moved with `mv`)."""


async def _listed(root: Path) -> _Listed:
    out = await git("ls-files", "-z", "-t", "--others", "--deleted", "--exclude-standard", cwd=root)
    entries = _nul_list(out)
    others = [e[2:] for e in entries if e.startswith("? ")]
    return _Listed(others, len(others) < len(entries))


async def apply_patch(root: Path, patch: str, written: WriteLog, *, reverse: bool = False) -> None:
    """Apply `patch` (as `worktree_diff` made it) to the worktree at `root`, or with
    `reverse` take it back out (`patch` being what is there); the files it makes count as
    `written`, so they stay in the worktree's patch."""
    if not patch.strip():
        return
    data = patch.encode("utf-8", "surrogateescape")
    args = ["apply", "--binary", "--whitespace=nowarn"] + (["--reverse"] if reverse else [])
    await git(*args, "-", cwd=root, input=data)
    if not reverse:
        for path in await patch_paths(root, data):
            written.note(path)


async def patch_paths(root: Path, patch: bytes) -> list[str]:
    """The paths a patch creates or changes (both sides of a rename); applies nothing."""
    out = await git("apply", "--numstat", "-z", "-", cwd=root, input=patch)
    paths: list[str] = []
    tokens = iter(out.split("\0"))
    for token in tokens:
        parts = token.split("\t", 2)
        if len(parts) != 3:
            continue
        if parts[2]:
            paths.append(parts[2])
        else:  # a rename or copy: `added<TAB>deleted<TAB>\0old\0new\0`
            paths += [next(tokens, ""), next(tokens, "")]
    return [p for p in paths if p]


def _nul_list(out: str) -> list[str]:
    return [p for p in out.split("\0") if p]


def _pathspecs(paths: Iterable[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


async def _chosen(
    root: Path, env: Mapping[str, str], base: str, others: list[str], written: frozenset[str]
) -> list[str]:
    """The untracked, unignored files to add: those written, and moved tracked files."""
    chosen = [p for p in others if p in written]
    rest = [p for p in others if p not in written and "\n" not in p]
    moved = await _deleted_blobs(root, env, base) if rest else set()
    if moved:
        hashes = await git("hash-object", "--stdin-paths", cwd=root, env=env, input=_lines(rest))
        chosen += [p for p, h in zip(rest, hashes.split(), strict=True) if h in moved]
    return chosen


def _lines(paths: list[str]) -> bytes:
    return "".join(f"{p}\n" for p in paths).encode("utf-8", "surrogateescape")


async def _deleted_blobs(root: Path, env: Mapping[str, str], base: str) -> set[str]:
    """The blobs (other than the empty one) of tracked files deleted since `base`."""
    out = await git("diff-index", "--cached", "-z", "--diff-filter=D", base, cwd=root, env=env)
    blobs = {field.split()[2] for field in out.split("\0") if field.startswith(":")}
    return blobs - {_EMPTY_BLOB}


async def _add(root: Path, env: Mapping[str, str], paths: list[str]) -> None:
    if paths:
        await git(
            "--literal-pathspecs",
            "add",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
            cwd=root,
            env=env,
            input=_pathspecs(paths),
        )


async def _drop_swarmignored(root: Path, env: Mapping[str, str], base: str) -> None:
    """Put every path matching `.swarmignore` back as it was at `base` in the index."""
    patterns = root / SWARMIGNORE
    if not patterns.is_file():
        return
    matched = _nul_list(
        await git(
            "ls-files",
            "-z",
            "--cached",
            "--ignored",
            f"--exclude-from={patterns}",
            f"--with-tree={base}",  # paths deleted since base are listed too
            cwd=root,
            env=env,
        )
    )
    if matched:
        await git(
            "--literal-pathspecs",
            "reset",
            "--quiet",
            base,
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
            cwd=root,
            env=env,
            input=_pathspecs(matched),
        )
