"""Check trees: the worktrees where the merge queue builds and checks its batches.

A batch is built as a chain of commits, one per subtask (so attribution is kept), on top of
the commit it sits on: the integration head, or the tip of the batch ahead of it when it is
checked speculatively. The chain is built and its tip checked in a tree of its own, so
several batches (and the prefixes of a red batch being split) check at once without
touching the integration branch, which only ever fast-forwards to a green tip.

`TreePool` keeps up to `size` detached worktrees under
`<git-common-dir>/swarm-worktrees/<run-id>/_check-<n>`, each prepared once for the checks
(`include:`, `setup:`) and reused: one is held by one batch (or one prefix check) at a time.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Literal

import anyio
import anyio.to_thread

from swarm._sandbox import Sandbox, default_sandbox, sandboxed_git
from swarm.errors import WorkspaceError
from swarm.run._diff import header_path
from swarm.run._environment import CheckEnvironment
from swarm.run._git import admin_dir, git, hook_env, repo_lock, rmtree, write_owner

__all__ = ["IDENTITY", "CheckTree", "Patch", "Step", "TreePool", "commit"]

ADD_TIMEOUT_S = 60.0
READY_PAUSE_S = 0.02
"""How long `TreePool.keep_ready` waits for the repository's lock to be free."""
_WORD = re.compile(r"\w+")
IDENTITY = ("-c", "user.name=swarm", "-c", "user.email=swarm@localhost")
"""Who swarm's commits are by, whatever the machine's git config says."""


@dataclass(frozen=True)
class Patch:
    """One subtask's change, as the merge queue commits it."""

    name: str
    title: str
    patch: str

    @property
    def message(self) -> str:
        return f"swarm: {self.name}: {self.title}"

    @cached_property
    def files(self) -> frozenset[str]:
        """The paths it touches, read from its headers (a quoted path as git quotes it)."""
        out: set[str] = set()
        for line in self.patch.splitlines():
            if (path := header_path(line)) is not None:
                out.add(path)
            elif line.startswith(("--- a/", "+++ b/")):
                out.add(line[len("--- a/") :])
            elif line.startswith(('--- "a/', '+++ "b/')):
                out.add(line[len('--- "a/') : -1])
            elif line.startswith(("rename from ", "rename to ")):
                out.add(line.split(" ", 2)[-1])
        return frozenset(out)

    @cached_property
    def modules(self) -> frozenset[str]:
        """The names of the modules it changes (`pkg/util.py` is `util`); not dunders,
        which name no module another file refers to (`__init__`)."""
        stems = (PurePosixPath(f).stem for f in self.files)
        return frozenset(s for s in stems if s and not s.startswith("__"))

    @cached_property
    def named(self) -> frozenset[str]:
        """The words on the lines it adds: the modules it refers to are among them."""
        added = (line[1:] for line in self.patch.splitlines() if line.startswith("+"))
        return frozenset(_WORD.findall("\n".join(a for a in added if not a.startswith("++ "))))


StepKind = Literal["committed", "empty", "conflict", "refused"]


@dataclass(frozen=True)
class Step:
    """What building one patch into a chain gave: a commit, or why not."""

    kind: StepKind
    commit: str | None = None
    output: str = ""
    """git's message for a conflict; the hook's output when a commit hook refused."""


class CheckTree:
    """One detached worktree of the pool."""

    def __init__(self, path: Path, hooks: bool, sandbox: Sandbox | None = None) -> None:
        self.path, self.hooks, self.sandbox = path, hooks, sandbox

    async def goto(self, commit: str) -> None:
        """Check `commit` out here (what an earlier check left untracked stays)."""
        await self._unlock()
        await git("reset", "--hard", "--quiet", commit, cwd=self.path)

    async def build(self, base: str, patches: Sequence[Patch]) -> list[Step]:
        """Commit each patch on `base`, in order, one commit each; the tree ends at the
        chain's tip. A patch that does not apply (or that a hook refuses) is left out.

        Without hooks the whole chain is one `git am` (a git process per batch, not two per
        patch); with `hooks: run`, each patch is applied and committed as a user would, so
        the commit hooks run."""
        await self.goto(base)
        if self.hooks:
            steps = [await self._add(p) for p in patches]
        else:
            steps = await self._mail(patches)
        subjects = await git("log", "--format=%H %s", f"{base}..HEAD", cwd=self.path)
        shas = dict(reversed([line.split(" ", 1)[::-1] for line in subjects.splitlines()]))
        return [_named(s, shas.get(p.message)) for p, s in zip(patches, steps, strict=True)]

    async def _mail(self, patches: Sequence[Patch]) -> list[Step]:
        """`git am --3way` the patches as one mailbox; a patch that does not apply is
        skipped and noted, and `am` goes on with the rest."""
        failed: dict[int, str] = {}
        mbox = "".join(_as_mail(p) for p in patches).encode("utf-8", "surrogateescape")
        command: tuple[str, ...] = ("am", "--3way", "--keep", "--quiet", "--whitespace=nowarn")
        while True:
            try:
                await git(*IDENTITY, *command, cwd=self.path, input=mbox)
                break
            except WorkspaceError as exc:
                at = await self._am_position()
                if at is None:
                    raise
                files = await git("diff", "--name-only", "--diff-filter=U", cwd=self.path)
                where = f" (conflicts in {', '.join(files.split())})" if files else ""
                failed[at] = f"{patches[at].name}'s patch does not apply{where}: {exc}"
                command, mbox = ("am", "--skip", "--quiet"), b""
        return [
            Step("conflict", output=failed[i]) if i in failed else Step("committed")
            for i in range(len(patches))
        ]

    async def _am_position(self) -> int | None:
        """The patch `git am` stopped at (from its state files), or None if it is not."""
        admin = admin_dir(self.path)
        try:
            text = await anyio.Path(admin / "rebase-apply" / "next").read_text() if admin else ""
        except FileNotFoundError:
            return None
        return int(text.strip()) - 1 if text.strip().isdigit() else None

    async def _add(self, p: Patch) -> Step:
        text = p.patch if p.patch.endswith("\n") else p.patch + "\n"
        try:
            await git(
                "apply",
                "--3way",
                "--index",
                "--whitespace=nowarn",
                cwd=self.path,
                input=text.encode("utf-8", "surrogateescape"),
            )
        except WorkspaceError as exc:
            return Step("conflict", output=str(exc))
        try:
            await commit(self.path, p.message, hooks=self.hooks, sandbox=self.sandbox)
        except WorkspaceError as exc:
            if "nothing to commit" in str(exc) or "nothing added to commit" in str(exc):
                return Step("empty")  # its change is already on the base
            return Step("refused", output=str(exc))
        return Step("committed")

    async def _unlock(self) -> None:
        """Drop what a killed git command left (its locks, a `git am` half done): the
        tree is ours alone, and a batch cancelled mid-build kills its git."""
        admin = admin_dir(self.path)
        if admin is not None:
            # a few entries of a local directory: looked at here, not with a worker thread's
            # round trip per entry (anyio.Path's), as this runs before every batch
            for lock in admin.glob("*.lock"):  # index.lock, HEAD.lock
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()
            if (admin / "rebase-apply").exists():
                await anyio.to_thread.run_sync(rmtree, admin / "rebase-apply")


async def commit(path: Path, message: str, *, hooks: bool, sandbox: Sandbox | None) -> None:
    """Commit what is staged in worktree `path`. The repository's hooks run only when the
    task asks (`hooks: run`), and then inside the sandbox, without secrets; never else."""
    if hooks:
        await sandboxed_git(
            sandbox or default_sandbox(),
            *IDENTITY,
            "commit",
            "--quiet",
            "-m",
            message,
            cwd=path,
            env=hook_env(),
        )
    else:
        await git(*IDENTITY, "commit", "--quiet", "--no-verify", "-m", message, cwd=path)


def _named(step: Step, sha: str | None) -> Step:
    """A step `git` said it committed, with its commit (none: its change was already
    there, so the patch is empty here)."""
    if step.kind != "committed":
        return step
    return Step("committed", sha) if sha else Step("empty")


def _as_mail(p: Patch) -> str:
    """`p` as one message of a mailbox `git am` reads (its subject: the commit message)."""
    subject = " ".join(p.message.split())
    text = p.patch if p.patch.endswith("\n") else p.patch + "\n"
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: swarm <swarm@localhost>\nSubject: {subject}\n\n---\n{text}"
    )


class TreePool:
    """Up to `size` check trees, made on first use and removed when the pool closes."""

    def __init__(
        self,
        repo: Path,
        root: Path,
        *,
        size: int,
        environment: CheckEnvironment | None = None,
        hooks: bool = False,
    ) -> None:
        self.repo, self.root = repo, root
        self.environment, self.hooks = environment, hooks
        self._limit = anyio.CapacityLimiter(size)
        self.size = size
        self._idle: list[CheckTree] = []
        self._made: list[Path] = []
        self._leased = anyio.Event()

    async def fill(self, count: int) -> None:
        """Make `count` trees now, before the workspaces queue on the repository's lock."""
        made = [await self._make() for _ in range(min(count, self.size) - len(self._made))]
        self._idle.extend(made)

    async def keep_ready(self, spare: int) -> None:
        """Keep `spare` trees made and idle (up to `size` in all), making them in the
        background, one at a time and only while nobody waits for the repository's lock
        (the agents' workspaces go first). A burst of red batches' splits asks for a
        dozen trees at once; made then, each waited for the lock the one before held (up
        to 1.1 s, on this machine)."""
        lock = await repo_lock(self.repo)
        while True:
            if len(self._idle) >= spare or len(self._made) >= self.size:
                await self._leased.wait()
                self._leased = anyio.Event()
            elif lock.locked() or lock.statistics().tasks_waiting:
                await anyio.sleep(READY_PAUSE_S)
            else:
                self._idle.append(await self._make())

    @asynccontextmanager
    async def tree(self) -> AsyncIterator[CheckTree]:
        """A tree held for the block (waiting for one when all are held)."""
        async with self._limit:
            tree = self._idle.pop() if self._idle else await self._make()
            self._leased.set()
            try:
                yield tree
            finally:
                self._idle.append(tree)

    async def _make(self) -> CheckTree:
        path = self.root / f"_check-{len(self._made)}"
        self._made.append(path)
        write_owner(path)  # a killed run's trees go at the next start, whatever its run id
        # never half made (git leaves a cancelled add locked): shielded, and bounded
        with anyio.fail_after(ADD_TIMEOUT_S, shield=True):
            # the lock only for git's own records, as workspaces do: checked out under it,
            # a burst of 13 trees at once waited up to 1.1 s for it (0.44 s each, median)
            async with await repo_lock(self.repo):
                add = ("worktree", "add", "--quiet", "--detach", "--no-checkout", str(path))
                await git(*add, cwd=self.repo)
            await git("reset", "--hard", "--quiet", cwd=path)
        if self.environment is not None:
            await self.environment.prepare(path)
        sandbox = self.environment.sandbox if self.environment is not None else None
        return CheckTree(path, self.hooks, sandbox)

    async def close(self) -> None:
        """Remove every tree the pool made (bounded: callers shield it)."""
        await remove_trees(self.repo, self._made)
        self._made.clear()
        self._idle.clear()


async def remove_trees(repo: Path, paths: Sequence[Path]) -> None:
    """Remove the merge queue's worktrees (this run's, or a killed run's found on resume)
    and their owner files."""
    if not paths:
        return
    async with await repo_lock(repo):
        for path in paths:
            with contextlib.suppress(WorkspaceError):
                # twice: a locked worktree (an add cut short by a kill) goes too
                await git("worktree", "remove", "--force", "--force", str(path), cwd=repo)
            path.with_name(f"{path.name}.owner").unlink(missing_ok=True)
        await git("worktree", "prune", cwd=repo)
