"""One workspace on a cluster node: the body of the Ray actor `swarm._cluster` places there.

The actor holds its own clone of the base commit, made from a git bundle the driver put in
the object store (no shared filesystem), and runs everything its agent does there: the
built-in tools by name (the same functions as on the driver, on a `ToolContext` rooted in
the clone, with the node's sandbox), the checks, and the patch that goes back to the
driver's merge queue. It imports nothing of Ray: Ray makes it an actor (`ray.remote`), and
the tests drive it directly too.

Replies are plain data (`Reply`): a tool's failure is a `ToolError` message for the model,
not an exception crossing the wire.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio.to_thread

from swarm._sandbox import _volume
from swarm._sandbox.process import kill_processes_in
from swarm.agent._tool import Finish, Tool, WriteLog
from swarm.agent._toolbox import coding_tools
from swarm.errors import ToolError
from swarm.run._check import CheckResult, run_check
from swarm.run._diff import apply_patch, worktree_diff
from swarm.run._environment import CheckEnvironment
from swarm.run._git import checkout_footprint, git, owner_alive, write_owner

__all__ = ["CallLimits", "NodeInfo", "Reply", "WorkspaceNode", "sweep_dead_clones"]


@dataclass(frozen=True)
class NodeInfo:
    """Where a workspace lives."""

    host: str
    """The node's host name (`host.name` on spans)."""
    node: str
    """The Ray node id ('' outside Ray)."""
    path: str
    """The clone's directory on the node."""


@dataclass(frozen=True)
class CallLimits:
    """What a tool call's `ToolContext` takes from the driver's."""

    check: str | None
    timeout_s: float
    max_output_chars: int


@dataclass(frozen=True)
class Reply:
    """A remote call's result: `text` (a tool's output), or `error` (a `ToolError` for the
    model), or `finish` (the agent's summary); with the time spent on the node."""

    text: str = ""
    error: str | None = None
    finish: str | None = None
    check: CheckResult | None = None
    node_s: float = 0.0


def _node_id() -> str:
    """The Ray node this runs on; '' outside Ray (where asking would start a local Ray
    cluster, and leave `~/.ray/auth_token` behind, which later local clusters refuse)."""
    try:
        import ray  # present: this runs in a Ray worker when it runs remotely

        if not ray.is_initialized():
            return ""
        return str(ray.get_runtime_context().get_node_id())
    except Exception:
        return ""


class WorkspaceNode:
    """A clone of one commit and the tools, checks and patch of the agent working in it."""

    def __init__(self, environment: CheckEnvironment, run_id: str, name: str) -> None:
        self.environment, self.run_id, self.name = environment, run_id, name
        self.root = Path()
        self.base = ""
        self._written = WriteLog()
        self._tools: dict[str, Tool] = {t.name: t for t in coding_tools()}
        self.volume = False
        """Whether the clone's files are a filesystem of their own."""

    async def ready(self) -> NodeInfo:
        """Answers once the actor runs (the driver waits here while the cluster is full):
        where it runs, no clone yet."""
        return NodeInfo(socket.gethostname(), _node_id(), "")

    async def open(self, bundle: bytes, base: str) -> NodeInfo:
        """Clone `base` from `bundle` into a fresh directory, then run the task's `setup:`.

        The clone's git dir is beside its files (`git`), which are a filesystem of their
        own where the node can make one (`swarm._sandbox._volume`: the kernel holds the
        sandbox's `disk_mb`), as on the driver."""
        await _sweep_dead_clones()
        where = Path(tempfile.mkdtemp(prefix=f"{_CLONE_PREFIX}{self.run_id}-{self.name}-"))
        write_owner(where / "repo")  # `repo.owner`: a later actor here removes what is left
        self.root = where / "repo"
        await git(
            "init", "--quiet", f"--separate-git-dir={where / 'git'}", str(self.root), cwd=where
        )
        await self._fetch(bundle)
        quota = self.environment.sandbox.policy.limits.disk_mb
        if quota is not None and _volume.unusable() is None:
            footprint = await checkout_footprint(self.root, base)
            gitfile = _unmade(self.root)
            self.volume = await _volume.make(self.root, quota, footprint)
            _remade(self.root, gitfile, made=self.volume)
        await git("checkout", "--quiet", "--detach", base, cwd=self.root)
        return await self._fresh(base)

    async def reset(self, bundle: bytes | None, base: str) -> NodeInfo:
        """Make the clone a fresh one at `base` for the next subtask (as `Workspace.reset`):
        the commits it lacks fetched from `bundle` (None: it has `base`), its files at
        `base`, every untracked file gone but what `include:` brought, then `setup:`."""
        if bundle is not None:
            await self._fetch(bundle)
        await git("reset", "--hard", "--quiet", base, cwd=self.root)
        excludes = [arg for pattern in self.environment.include for arg in ("-e", pattern)]
        await git("clean", "-ffdxq", *excludes, cwd=self.root)
        return await self._fresh(base)

    async def _fresh(self, base: str) -> NodeInfo:
        """The clone checked out at `base` is new work's: nothing written yet, `setup:`."""
        self.base = base
        self._written = WriteLog()
        if self.environment.include or self.environment.setup:
            await self.environment.prepare(self.root)
        return NodeInfo(socket.gethostname(), _node_id(), str(self.root))

    async def tool(self, name: str, arguments: dict[str, Any], limits: CallLimits) -> Reply:
        """Run the built-in tool `name` on the clone, as the driver would run it locally."""
        started = time.perf_counter()
        found = self._tools.get(name)
        if found is None:
            return Reply(error=f"unknown tool {name!r} on the cluster node")
        ctx = replace(
            self.environment.context(self.root, check=limits.check, timeout_s=limits.timeout_s),
            max_output_chars=limits.max_output_chars,
            base=self.base,
            written=self._written,
        )
        try:
            text = await found.run(arguments, ctx)
        except ToolError as exc:
            return Reply(error=str(exc), node_s=time.perf_counter() - started)
        except Finish as done:
            return Reply(finish=done.summary, node_s=time.perf_counter() - started)
        return Reply(text=text, node_s=time.perf_counter() - started)

    async def check(self, command: str, timeout_s: float) -> Reply:
        """The check `command` on the clone (the coordinator's, or the merge queue's)."""
        started = time.perf_counter()
        result = await run_check(
            command, self.root, timeout_s=timeout_s, environment=self.environment
        )
        return Reply(check=result, node_s=time.perf_counter() - started)

    async def check_commit(
        self, bundle: bytes | None, sha: str, command: str, timeout_s: float
    ) -> Reply:
        """The check `command` on commit `sha` (the merge queue's batch): fetched from
        `bundle` (None: the clone has it already), checked out clean, then checked; what
        earlier checks left untracked (caches, `setup:`'s output) stays, as in a check tree."""
        started = time.perf_counter()
        if bundle is not None:
            await self._fetch(bundle)
        await git("checkout", "--quiet", "--force", "--detach", sha, cwd=self.root)
        self.base = sha
        reply = await self.check(command, timeout_s)
        return replace(reply, node_s=time.perf_counter() - started)

    async def _fetch(self, bundle: bytes) -> None:
        source = self.root.parent / "fetch.bundle"
        await anyio.Path(source).write_bytes(bundle)
        try:
            await git("fetch", "--quiet", str(source), "+refs/*:refs/bundle/*", cwd=self.root)
        finally:
            source.unlink()

    async def patch(self) -> str:
        """What the agent changed since the base commit (as `Workspace.patch`)."""
        return await worktree_diff(self.root, self.base, untracked=self._written.paths())

    async def apply(self, patch: str, reverse: bool = False) -> None:
        """Apply `patch` to the clone, or take it back out (as `Workspace.apply`)."""
        await apply_patch(self.root, patch, self._written, reverse=reverse)

    async def close(self) -> None:
        """Remove the clone (the actor ends after this)."""
        if self.root != Path():
            with anyio.CancelScope(shield=True):  # bounded: each umount has a timeout
                await anyio.to_thread.run_sync(_remove_clone, self.root)
            self.volume = False

    async def pid(self) -> int:
        """The actor's process id (the fault tests kill nodes, not this)."""
        return os.getpid()


_CLONE_PREFIX = "swarm-"
_swept: list[bool] = []
"""Whether this process has swept the node's dead clones (once)."""


async def _sweep_dead_clones() -> None:
    """Remove, once per process, the clones on this node whose actor died without closing
    them (its node process killed: a clone that is a filesystem of its own stays mounted
    until someone unmounts it)."""
    if _swept:
        return
    _swept.append(True)
    await anyio.to_thread.run_sync(sweep_dead_clones, Path(tempfile.gettempdir()))


def sweep_dead_clones(temp: Path) -> None:
    """Remove the clones in `temp` (a node's temporary directory) whose owner process is
    gone: their commands killed, their filesystem unmounted, their files deleted."""
    for owner in temp.glob(f"{_CLONE_PREFIX}*/repo.owner"):
        if owner_alive(owner):
            continue
        repo = owner.with_name("repo")
        kill_processes_in(repo)
        _remove_clone(repo)


def _remove_clone(repo: Path) -> None:
    """Unmount clone `repo` if it is a filesystem of its own, then delete its directory.
    Looked at twice: a `mount` its killed actor had started may land after the first look,
    and deleting cannot take a mount point away (the files in it would go, the mount stay)."""
    for _ in range(2):
        _volume.release(repo)
        shutil.rmtree(repo.parent, ignore_errors=True)
        if not os.path.ismount(repo):
            return


def _unmade(root: Path) -> str:
    """Take away the clone's directory (it holds only its `.git` file, which this returns),
    so that a filesystem can be made in its place."""
    gitfile = (root / ".git").read_text()
    (root / ".git").unlink()
    root.rmdir()
    return gitfile


def _remade(root: Path, gitfile: str, *, made: bool) -> None:
    """Put the clone's `.git` file back in `root` (a directory anew, unless `made`)."""
    if not made:
        root.mkdir()
    (root / ".git").write_text(gitfile)
