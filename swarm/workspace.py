"""Workspaces: one git worktree per sub-agent, its patch, and cleanup on every exit path.

A `Workspace` is a worktree of the target repository at a base commit, on its own branch
`swarm-ws/<run_id>/<name>`, kept under `<git-common-dir>/swarm-worktrees/<run_id>/<name>` so
it is outside the user's working tree. (Not `swarm/<run_id>/<name>`: git cannot hold that
beside the run's result branch `swarm/<run_id>`.) The user's checkout, index and branch are never
touched: patches are computed with a throwaway index file.

Git ref and worktree mutations on one repository are serialised by an `anyio.Lock` per
repository (per event loop; `repo_lock`) and retried on `.lock` contention from other
processes; the slow parts (checking files out, deleting them) run outside the lock, and
branch deletions are batched. Each workspace
leaves an owner file (`<name>.owner`: host and pid) beside its directory, so
`cleanup_stale` can tell a crashed run's leftovers from a live run's workspaces.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import anyio
import anyio.lowlevel
import anyio.to_thread

from swarm.errors import WorkspaceError
from swarm.tool import ToolContext

__all__ = ["Workspace", "cleanup_stale", "git", "repo_lock", "worktree_diff"]

log = logging.getLogger(__name__)

BRANCH_PREFIX = "swarm-ws"
"""Workspace branches are `swarm-ws/<run_id>/<name>`; cleanup_stale only touches these."""
CLEANUP_TIMEOUT_S = 60.0
"""Upper bound on removing one workspace, even when the caller was cancelled."""
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_GIT_ENV_DROP = frozenset(
    {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY"}
)
_LOCK_RETRIES = 6


@dataclass
class _Repo:
    """Per repository and event loop: the lock on worktree and ref changes."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    doomed: set[str] = field(default_factory=set)
    """Refs waiting to be deleted by the next task that gets the lock."""


_repos: WeakKeyDictionary[object, dict[Path, _Repo]] = WeakKeyDictionary()
_common_dirs: dict[Path, Path] = {}


def _repo(common_dir: Path) -> _Repo:
    per_loop = _repos.setdefault(anyio.lowlevel.current_token().native_token, {})
    state = per_loop.get(common_dir)
    if state is None:
        state = per_loop[common_dir] = _Repo()
    return state


def _git_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    # no prompts, stable English messages, no opportunistic index refreshes in the user's repo
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_OPTIONAL_LOCKS="0", **extra)
    return env


async def git(
    *args: str, cwd: Path, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> str:
    """Run git in `cwd`; its stdout without trailing newlines (like shell `$(git ...)`).

    A failure raises WorkspaceError carrying git's message.
    """
    return (await _git_raw(*args, cwd=cwd, input=input, env=env)).rstrip("\n")


async def _git_raw(
    *args: str, cwd: Path, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> str:
    try:
        done = await anyio.run_process(
            ["git", *args], cwd=cwd, input=input, env=env or _git_env(), check=False
        )
    except OSError as exc:
        raise WorkspaceError(f"could not run git in {cwd}: {exc}") from exc
    if done.returncode:
        detail = (done.stderr or done.stdout).decode(errors="replace").strip()
        raise WorkspaceError(f"git {' '.join(args[:2])} failed in {cwd}: {detail}")
    return done.stdout.decode("utf-8", "surrogateescape")


async def _git_retry(*args: str, cwd: Path, input: bytes | None = None) -> str:
    """`git` for ref/worktree changes: other processes may hold a `.lock` for a moment."""
    for attempt in range(_LOCK_RETRIES):
        try:
            return await git(*args, cwd=cwd, input=input)
        except WorkspaceError as exc:
            busy = ".lock" in str(exc) and "File exists" in str(exc)
            if not busy or attempt == _LOCK_RETRIES - 1:
                raise
            await anyio.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


async def repo_lock(repo: Path) -> anyio.Lock:
    """The lock swarm holds while adding or removing worktrees of `repo` (and changing its
    workspace refs). Code outside this module that runs `git worktree add/remove/prune` on
    the same repository should hold it too: git cannot add two worktrees at once."""
    return _repo(await _common_dir(Path(await anyio.Path(repo).resolve()))).lock


async def _common_dir(repo: Path) -> Path:
    common = _common_dirs.get(repo)
    if common is None:
        out = Path(await git("rev-parse", "--git-common-dir", cwd=repo))
        common = _common_dirs[repo] = (out if out.is_absolute() else repo / out).resolve()
    return common


async def worktree_diff(root: Path, base: str = "HEAD", *, index: Path | None = None) -> str:
    """The diff of `root`'s files against `base`, new untracked files included (binary-safe).

    Uses a copy of the worktree's index (`index`, found with git when None), so the real
    index is left as it was.
    """
    if index is None:
        out = await git("rev-parse", "--git-path", "index", cwd=root)
        index = Path(out) if Path(out).is_absolute() else root / out
    with tempfile.TemporaryDirectory(prefix="swarm-index-") as tmp:
        scratch = Path(tmp) / "index"
        if index.exists():
            shutil.copyfile(index, scratch)  # keeps the stat cache: `add` need not rehash
        env = _git_env(GIT_INDEX_FILE=str(scratch))
        await git("add", "--all", cwd=root, env=env)
        return await _git_raw(
            "diff", "--cached", "--binary", "--no-color", "--no-ext-diff",
            "--src-prefix=a/", "--dst-prefix=b/", base, "--",
            cwd=root, env=env,
        )  # fmt: skip


def _check_component(kind: str, value: str) -> None:
    if not _COMPONENT.fullmatch(value) or ".." in value or value.endswith(".lock"):
        raise WorkspaceError(
            f"bad workspace {kind} {value!r}: use letters, digits, '.', '_' and '-' "
            "(it becomes part of a branch name)"
        )


def _rmtree(path: Path) -> None:
    def retry_writable(func: Any, target: str, _exc: Any) -> None:
        parent = os.path.dirname(target)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        func(target)

    if not path.exists():
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry_writable)
    else:
        shutil.rmtree(path, onerror=retry_writable)


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _owner_alive(owner: Path) -> bool:
    """Whether the process that made a workspace still runs (unknown hosts count as alive)."""
    try:
        host, pid = owner.read_text().split()
        if host != socket.gethostname():
            return True
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, ValueError):
        return False  # no or unreadable owner file: nobody claims it
    return True


async def _delete_branch(repo: Path, common: Path, branch: str) -> None:
    """Delete a branch. Batched: whoever gets the repo lock deletes every branch queued so
    far in one git process, so a hundred removals do not queue a hundred processes."""
    state = _repo(common)
    ref = f"refs/heads/{branch}"
    state.doomed.add(ref)
    async with state.lock:
        if ref not in state.doomed:
            return  # an earlier batch took it
        batch = sorted(state.doomed)
        state.doomed.clear()
        lines = "".join(f"delete {r}\n" for r in batch).encode()
        try:
            await _git_retry("update-ref", "--stdin", cwd=repo, input=lines)
        except WorkspaceError:
            # one bad ref fails the whole transaction: the rest go one by one
            for other in batch:
                try:
                    await _git_retry("update-ref", "-d", other, cwd=repo)
                except WorkspaceError as exc:
                    if other == ref:
                        raise
                    log.warning("could not delete branch %s: %s", other, exc)


async def _unregister(
    repo: Path, common: Path, path: Path, branch: str, admin: Path | None
) -> None:
    """Delete a worktree's files and git record (`admin`, its dir in the git dir), then its
    branch: what `git worktree remove --force` does, without a git process per worktree."""
    await anyio.to_thread.run_sync(_rmtree, path)
    state = _repo(common)
    if admin is not None and await anyio.Path(admin).is_dir():
        trash = common / f"swarm-trash-{uuid.uuid4().hex}"
        async with state.lock:  # a `worktree add` must never see it half deleted
            try:
                await anyio.Path(admin).rename(trash)
            except FileNotFoundError:
                pass  # someone's `git worktree prune` got there first
        await anyio.to_thread.run_sync(_rmtree, trash)
    else:
        async with state.lock:
            try:
                await git("worktree", "remove", "--force", str(path), cwd=repo)
            except WorkspaceError:
                pass  # not registered (any more); `git worktree prune` drops what is left
    await _delete_branch(repo, common, branch)


def _admin_dir(path: Path) -> Path | None:
    """A worktree's own directory inside the git dir, read from its `.git` file."""
    try:
        gitfile = (path / ".git").read_text().strip()
    except OSError:
        return None
    return Path(gitfile.removeprefix("gitdir: ")) if gitfile.startswith("gitdir: ") else None


class Workspace:
    """A git worktree of `repo` at commit `base`, on its own branch; see `Workspace.open`."""

    def __init__(self, repo: Path, path: Path, branch: str, base: str, common: Path) -> None:
        self.repo = repo
        """The target repository."""
        self.path = path
        """The worktree directory tools work in."""
        self.branch = branch
        """The workspace's branch, `swarm-ws/<run_id>/<name>`."""
        self.base = base
        """The commit (full sha) the workspace started from."""
        self._common = common
        self._owner = path.with_name(f"{path.name}.owner")
        self._owned = False
        self._added = False
        self._admin: Path | None = None

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r}, branch={self.branch!r}, base={self.base[:12]!r})"

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        repo: Path,
        *,
        base: str = "HEAD",
        name: str,
        run_id: str = "adhoc",
        root: Path | None = None,
    ) -> AsyncIterator[Workspace]:
        """Make a worktree of `repo` at `base` for the block, and remove it afterwards.

        Removal (files, worktree record, branch) happens on every exit path, cancellation
        included. `root` overrides where worktrees live (default: inside the git dir).
        """
        _check_component("name", name)
        _check_component("run_id", run_id)
        if base.startswith("-"):
            raise WorkspaceError(f"bad base {base!r}")
        repo = Path(await anyio.Path(repo).resolve())
        common = await _common_dir(repo)
        sha = base
        if not _SHA.fullmatch(base):  # a full sha needs no lookup: `worktree add` checks it
            try:
                sha = await git("rev-parse", "--verify", f"{base}^{{commit}}", cwd=repo)
            except WorkspaceError:
                raise WorkspaceError(f"{base!r} is not a commit in {repo}") from None
        where = Path(await anyio.Path(root).resolve()) if root else common / "swarm-worktrees"
        ws = cls(repo, where / run_id / name, f"{BRANCH_PREFIX}/{run_id}/{name}", sha, common)
        try:
            await ws._create()
            yield ws
        finally:
            with anyio.move_on_after(CLEANUP_TIMEOUT_S, shield=True):
                await ws._remove()

    async def _create(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._owner.open("x") as f:
                f.write(f"{socket.gethostname()} {os.getpid()}\n")
        except FileExistsError:
            raise WorkspaceError(
                f"workspace {self.branch} is in use, or was left by a crashed run "
                "(cleanup_stale removes those)"
            ) from None
        self._owned = True
        if self.path.exists():
            raise WorkspaceError(f"{self.path} exists; remove it or run cleanup_stale")
        # git reads every worktree's admin dir when adding one: one add at a time per repo.
        # Shielded: made whole or not at all, so cleanup knows what there is to remove.
        async with _repo(self._common).lock:
            with anyio.fail_after(CLEANUP_TIMEOUT_S, shield=True):
                await _git_retry(
                    "worktree", "add", "--quiet", "--no-checkout", "-b", self.branch,
                    str(self.path), self.base, cwd=self.repo,
                )  # fmt: skip
                self._added = True
                self._admin = _admin_dir(self.path)
        await git("read-tree", "-u", "--reset", self.base, cwd=self.path)

    async def _remove(self) -> None:
        try:
            if self._added:
                await _unregister(self.repo, self._common, self.path, self.branch, self._admin)
            if self._owned:
                self._owner.unlink(missing_ok=True)
                _rmdir_if_empty(self.path.parent)
        except (WorkspaceError, OSError) as exc:
            log.warning("could not remove workspace %s (cleanup_stale will): %s", self.path, exc)

    def context(
        self,
        *,
        check: str | None = None,
        timeout_s: float = 120.0,
        max_output_chars: int = 20_000,
    ) -> ToolContext:
        """A ToolContext confining tools to this workspace (git_diff compares with `base`).

        Subprocesses test the worktree's own code: see `swarm.check.check_env`."""
        from swarm.check import check_env

        return ToolContext(
            root=self.path,
            check=check,
            env=check_env(self.path),
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
            base=self.base,
        )

    async def patch(self) -> str:
        """Everything changed since `base` as a git patch (new files included; '' if none)."""
        index = self._admin / "index" if self._admin else None
        return await worktree_diff(self.path, self.base, index=index)

    async def commit(self, message: str) -> str:
        """Commit all changes on the workspace branch; returns the new HEAD sha.

        With nothing to commit, returns the current HEAD without making a commit.
        """
        await git("add", "--all", cwd=self.path)
        options = ["-c", "gc.auto=0", "-c", "maintenance.auto=false"]
        if not await self._has_identity():
            options += ["-c", "user.name=swarm", "-c", "user.email=swarm@localhost"]
        try:
            await git(*options, "commit", "--quiet", "--no-verify", "-m", message, cwd=self.path)
        except WorkspaceError as exc:
            if "nothing to commit" not in str(exc):
                raise
        return await git("rev-parse", "HEAD", cwd=self.path)

    async def _has_identity(self) -> bool:
        if os.environ.get("GIT_AUTHOR_EMAIL") and os.environ.get("GIT_COMMITTER_EMAIL"):
            return True
        try:
            return bool(await git("config", "user.email", cwd=self.path))
        except WorkspaceError:
            return False

    async def apply(self, patch: str, *, three_way: bool = False) -> None:
        """Apply a patch (as made by `patch`) to the workspace's files."""
        if not patch.strip():
            return
        args = ["apply", "--binary", "--whitespace=nowarn"] + (["--3way"] if three_way else [])
        await git(*args, "-", cwd=self.path, input=patch.encode("utf-8", "surrogateescape"))


def _swarm_key(ref: str) -> tuple[str, str] | None:
    parts = ref.removeprefix("refs/heads/").split("/")
    return (parts[1], parts[2]) if len(parts) == 3 and parts[0] == BRANCH_PREFIX else None


async def cleanup_stale(repo: Path, *, run_id: str | None = None) -> list[Path]:
    """Remove swarm worktrees and branches whose run has died; returns their paths.

    A workspace counts as stale when the process named in its owner file is gone (or the
    file is missing). `run_id` limits the sweep to one run. Live workspaces are kept.
    """
    repo = Path(await anyio.Path(repo).resolve())
    common = await _common_dir(repo)
    default_root = common / "swarm-worktrees"
    found: dict[tuple[str, str], Path] = {}
    for block in (await git("worktree", "list", "--porcelain", cwd=repo)).split("\n\n"):
        fields = dict(line.split(" ", 1) for line in block.splitlines() if " " in line)
        key = _swarm_key(fields.get("branch", ""))
        if key and "worktree" in fields:
            found[key] = Path(fields["worktree"])
    refs = await git(
        "for-each-ref", "--format=%(refname)", f"refs/heads/{BRANCH_PREFIX}/", cwd=repo
    )
    for ref in refs.split():
        key = _swarm_key(ref)
        if key:
            found.setdefault(key, default_root / key[0] / key[1])
    # owner files without a branch: a crash between writing the file and `worktree add`
    for owner in default_root.glob("*/*.owner"):
        found.setdefault((owner.parent.name, owner.stem), owner.with_suffix(""))
    removed: list[Path] = []
    for (run, name), path in sorted(found.items()):
        owner = path.with_name(f"{name}.owner")
        if (run_id is not None and run != run_id) or _owner_alive(owner):
            continue
        try:
            await _unregister(repo, common, path, f"{BRANCH_PREFIX}/{run}/{name}", _admin_dir(path))
        except WorkspaceError as exc:
            log.warning("could not remove stale workspace %s: %s", path, exc)
            continue
        owner.unlink(missing_ok=True)
        _rmdir_if_empty(path.parent)
        removed.append(path)
    async with _repo(common).lock:
        await git("worktree", "prune", cwd=repo)
    for trash in common.glob("swarm-trash-*"):  # a crash in the middle of a removal
        await anyio.to_thread.run_sync(_rmtree, trash)
    return removed
