"""Workspaces: one git worktree per sub-agent, its patch, and cleanup on every exit path.

A `Workspace` is a worktree of the target repository at a base commit, on its own branch
`swarm-ws/<run_id>/<name>`, kept under `<git-common-dir>/swarm-worktrees/<run_id>/<name>` so
it is outside the user's working tree. (Not `swarm/<run_id>/<name>`: git cannot hold that
beside the run's result branch `swarm/<run_id>`.) The user's checkout, index and branch are never
touched: a patch is the worktree against its base, or built on a throwaway index file.
With a disk quota (`disk_mb`), the worktree is a filesystem of its own where swarm can
make one (root, loop devices: `swarm._sandbox._volume`), mounted at its path before its
files are checked out and unmounted before it is removed.

Git ref and worktree mutations on one repository are serialised by an `anyio.Lock` per
repository (per event loop; `repo_lock`) and retried on `.lock` contention from other
processes; the slow parts (checking files out, deleting them) run outside the lock, and
branch and file deletions are batched (one process for all the removals waiting). Each
workspace leaves an owner file (`<name>.owner`: host and pid) beside its directory, so
`cleanup_stale` can tell a crashed run's leftovers from a live run's workspaces. The git
plumbing (running git, the lock, removal) lives in `swarm.run._git`, what enters a patch in
`swarm.run._diff`; `git`, `repo_lock` and `worktree_diff` are re-exported here.

A patch holds what the agent changed: tracked edits and the untracked files the tools
wrote (`written`, the `WriteLog` every ToolContext rooted in the workspace shares), never a
check's outputs, nor paths matching `.swarmignore`.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread

from swarm._sandbox import _volume
from swarm._sandbox.bwrap import writable_for_commands
from swarm._sandbox.process import kill_processes_in
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._tool import ToolContext, WriteLog
from swarm.errors import WorkspaceError
from swarm.run._diff import apply_patch, worktree_diff
from swarm.run._git import (
    TRASH_PREFIX,
    admin_dir,
    checkout_footprint,
    common_dir,
    git,
    git_chain,
    git_retry,
    hook_env,
    owner_alive,
    repo_lock,
    repo_state,
    resolved,
    rmdir_if_empty,
    rmtree,
    unregister,
)

__all__ = ["Workspace", "cleanup_stale", "git", "hook_env", "repo_lock", "worktree_diff"]

log = logging.getLogger(__name__)

BRANCH_PREFIX = "swarm-ws"
"""Workspace branches are `swarm-ws/<run_id>/<name>`; cleanup_stale only touches these."""
CLEANUP_TIMEOUT_S = 60.0
"""Upper bound on removing one workspace, even when the caller was cancelled."""
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _check_component(kind: str, value: str) -> None:
    if not _COMPONENT.fullmatch(value) or ".." in value or value.endswith(".lock"):
        raise WorkspaceError(
            f"bad workspace {kind} {value!r}: use letters, digits, '.', '_' and '-' "
            "(it becomes part of a branch name)"
        )


class Workspace:
    """A git worktree of `repo` at commit `base`, on its own branch; see `Workspace.open`."""

    def __init__(
        self,
        repo: Path,
        path: Path,
        branch: str,
        base: str,
        common: Path,
        *,
        disk_mb: int | None = None,
    ) -> None:
        self.repo = repo
        """The target repository."""
        self.path = path
        """The worktree directory tools work in."""
        self.branch = branch
        """The workspace's branch, `swarm-ws/<run_id>/<name>`."""
        self.base = base
        """The commit (full sha) the workspace started from."""
        self.written = WriteLog()
        """The files tools wrote here: shared by every ToolContext rooted at `path`."""
        self.disk_mb = disk_mb
        """The worktree's disk quota: how much it may hold past its checkout (None: none)."""
        self.volume = False
        """Whether the worktree is a filesystem of its own, where the kernel holds
        `disk_mb` (`swarm._sandbox._volume`); else it is the sandbox's check."""
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
        disk_mb: int | None = None,
    ) -> AsyncIterator[Workspace]:
        """Make a worktree of `repo` at `base` for the block, and remove it afterwards.

        Removal (files, worktree record, branch) happens on every exit path, cancellation
        included. `root` overrides where worktrees live (default: inside the git dir).
        `disk_mb`: how much the worktree may hold past its checkout; where swarm can (root,
        loop devices) the worktree is a filesystem of that size, which refuses writes past
        it (`swarm._sandbox._volume`).
        """
        ws = await cls.create(repo, base=base, name=name, run_id=run_id, root=root, disk_mb=disk_mb)
        try:
            yield ws
        finally:
            await ws.close()

    @classmethod
    async def create(
        cls,
        repo: Path,
        *,
        base: str = "HEAD",
        name: str,
        run_id: str = "adhoc",
        root: Path | None = None,
        label: str | None = None,
        disk_mb: int | None = None,
    ) -> Workspace:
        """Make a worktree of `repo` at `base`; the caller owes it a `close()` (`open` is
        the block that does both). `label` names it in the trace (default: `name`);
        `disk_mb`: see `open`."""
        _check_component("name", name)
        _check_component("run_id", run_id)
        if base.startswith("-"):
            raise WorkspaceError(f"bad base {base!r}")
        repo = resolved(repo)  # a few lstat calls: cheaper than a trip to a worker thread
        common = await common_dir(repo)
        sha = await _commit_of(repo, base)
        where = Path(await anyio.Path(root).resolve()) if root else common / "swarm-worktrees"
        branch = f"{BRANCH_PREFIX}/{run_id}/{name}"
        ws = cls(repo, where / run_id / name, branch, sha, common, disk_mb=disk_mb)
        attrs = {sc.WORKSPACE_NAME: label or name}
        try:
            with tracer().start_as_current_span(f"{sc.WORKSPACE_SPAN} open", attributes=attrs):
                await ws._create()
        except BaseException:
            await ws.close()
            raise
        return ws

    async def close(self) -> None:
        """Remove the worktree, its record and its branch; bounded, and done even when the
        caller is being cancelled."""
        attrs = {sc.WORKSPACE_NAME: self.path.name}
        with (
            anyio.move_on_after(CLEANUP_TIMEOUT_S, shield=True),
            tracer().start_as_current_span(f"{sc.WORKSPACE_SPAN} close", attributes=attrs),
        ):
            await self._remove()
            self._added = self._owned = False

    async def reset(self, base: str, *, keep: Sequence[str] = ()) -> None:
        """Make this worktree a fresh one at `base` for new work: its branch and files at
        `base`, every untracked file gone but those matching `keep` (what `include:`
        brought), its write log empty. Much cheaper than a new worktree: no repository
        lock, only the files that differ are written, and one process start for both
        gits (`git_chain`)."""
        sha = await _commit_of(self.repo, base)
        excludes = [arg for pattern in keep for arg in ("-e", pattern)]
        await git_chain(
            ("reset", "--hard", "--quiet", sha), ("clean", "-ffdxq", *excludes), cwd=self.path
        )
        self.base = sha
        self.written = WriteLog()

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
        if self.disk_mb is not None:  # made first: git checks the files out into it
            footprint = await checkout_footprint(self.repo, self.base)
            with anyio.fail_after(CLEANUP_TIMEOUT_S, shield=True):
                self.volume = await _volume.make(self.path, self.disk_mb, footprint)
        # git reads every worktree's admin dir when adding one: one add at a time per repo.
        # Shielded: made whole or not at all, so cleanup knows what there is to remove.
        async with repo_state(self._common).lock:
            with anyio.fail_after(CLEANUP_TIMEOUT_S, shield=True):
                await git_retry(
                    "worktree",
                    "add",
                    "--quiet",
                    "--no-checkout",
                    "-b",
                    self.branch,
                    str(self.path),
                    self.base,
                    cwd=self.repo,
                )
                self._added = True
                self._admin = admin_dir(self.path)
        # files checked out from here inherit the grant: no walk of the tree later
        writable_for_commands(self.path)
        await git("read-tree", "-u", "--reset", self.base, cwd=self.path)

    async def _remove(self) -> None:
        try:
            if self.volume:  # its files go with it: git's record is all there is to remove
                await _volume.remove(self.path)
                self.volume = False
            if self._added:
                await unregister(self.repo, self._common, self.path, self.branch, self._admin)
            if self._owned:
                self._owner.unlink(missing_ok=True)
                rmdir_if_empty(self.path.parent)
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

        Subprocesses test the worktree's own code: see `swarm.check.check_env`. Commands
        run in the best sandbox the machine offers (`swarm._sandbox.default_sandbox`)."""
        from swarm.run._environment import CheckEnvironment, interpreters_in

        environment = CheckEnvironment.resolve(self.repo)  # the default sandbox, and what
        return ToolContext(  # of the repository's interpreter it must show
            root=self.path,
            check=check,
            env=environment.env_for(self.path),
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
            base=self.base,
            written=self.written,
            sandbox=environment.sandbox.with_read_only(interpreters_in(check)),
        )

    async def patch(self) -> str:
        """What the agent changed since `base`, as a git patch ('' if nothing).

        Tracked edits and the new files the tools wrote (`written`); not other untracked
        files (a check's outputs), nor paths matching `.swarmignore`: see `swarm.run._diff`.
        """
        index = self._admin / "index" if self._admin else None
        return await worktree_diff(
            self.path, self.base, index=index, untracked=self.written.paths()
        )

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

    async def apply(self, patch: str, *, reverse: bool = False) -> None:
        """Apply a patch (as made by `patch`) to the workspace's files, or take it back
        out (`reverse`). The files it makes count as written: they stay in this
        workspace's `patch`."""
        await apply_patch(self.path, patch, self.written, reverse=reverse)


async def _commit_of(repo: Path, base: str) -> str:
    """`base` as a full sha (a full sha needs no lookup: git checks it where it is used)."""
    if _SHA.fullmatch(base):
        return base
    try:
        return await git("rev-parse", "--verify", f"{base}^{{commit}}", cwd=repo)
    except WorkspaceError:
        raise WorkspaceError(f"{base!r} is not a commit in {repo}") from None


def _swarm_key(ref: str) -> tuple[str, str] | None:
    parts = ref.removeprefix("refs/heads/").split("/")
    return (parts[1], parts[2]) if len(parts) == 3 and parts[0] == BRANCH_PREFIX else None


async def cleanup_stale(repo: Path, *, run_id: str | None = None) -> list[Path]:
    """Remove swarm worktrees and branches whose run has died; returns their paths.

    A workspace counts as stale when the process named in its owner file is gone (or the
    file is missing). `run_id` limits the sweep to one run. Live workspaces are kept.
    """
    repo = Path(await anyio.Path(repo).resolve())
    common = await common_dir(repo)
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
        if (run_id is not None and run != run_id) or owner_alive(owner):
            continue
        kill_processes_in(path)  # the dead run's checks and commands still running there
        await _volume.remove(path)
        try:
            await unregister(repo, common, path, f"{BRANCH_PREFIX}/{run}/{name}", admin_dir(path))
        except WorkspaceError as exc:
            log.warning("could not remove stale workspace %s: %s", path, exc)
            continue
        owner.unlink(missing_ok=True)
        rmdir_if_empty(path.parent)
        removed.append(path)
    async with repo_state(common).lock:
        await git("worktree", "prune", cwd=repo)
    for trash in common.glob(f"{TRASH_PREFIX}*"):  # a crash in the middle of a removal
        await anyio.to_thread.run_sync(rmtree, trash)
    return removed
