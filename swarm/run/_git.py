"""Git plumbing for workspaces: running git, the per-repository lock, removal.

Owns `git` (run git, stdout or a WorkspaceError; started through `swarm._sandbox._spawn`, its
environment built once until `os.environ` changes), `git_chain` (several git commands
for one process start), `git_retry` (for ref and worktree
changes that may meet another process's `.lock`), the per-repository, per-event-loop
`anyio.Lock` (`repo_lock`, `repo_state`) with its batches of branches and trash to delete,
owner files' liveness, and `unregister` (removing a worktree's files, git record and
branch without a git process per worktree: renamed into the trash, deleted in batches by
one `rm`). What enters a patch is `swarm.run._diff`'s; `swarm.run._workspace` builds
`Workspace` and `cleanup_stale` on these."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import socket
import stat
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import anyio
import anyio.lowlevel
import anyio.to_thread

from swarm._sandbox import _spawn
from swarm._sandbox._volume import Footprint
from swarm._sandbox.process import pid_alive
from swarm.agent._tool import command_env, environ
from swarm.errors import WorkspaceError

__all__ = [
    "TRASH_PREFIX",
    "admin_dir",
    "checkout_footprint",
    "common_dir",
    "delete_branch",
    "git",
    "git_chain",
    "git_retry",
    "owner_alive",
    "repo_lock",
    "repo_state",
    "resolved",
    "rmdir_if_empty",
    "rmtree",
    "stale_ref_lock",
    "unregister",
    "write_owner",
]

log = logging.getLogger("swarm.run._workspace")  # the name operators already filter on

_GIT_ENV_DROP = frozenset(
    {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY"}
)
_LOCK_RETRIES = 6
TRASH_PREFIX = "swarm-trash-"
"""What removal moves into the git dir before deleting it; `cleanup_stale` sweeps it."""


@dataclass
class _Repo:
    """Per repository and event loop: the lock on worktree and ref changes."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    doomed: set[str] = field(default_factory=set)
    """Refs waiting to be deleted by the next task that gets the lock."""
    sweeping: anyio.Lock = field(default_factory=anyio.Lock)
    """Held while a batch of trash is deleted."""
    trash: set[Path] = field(default_factory=set)
    """Removed worktrees' files and records, waiting to be deleted in one batch."""


_repos: WeakKeyDictionary[object, dict[Path, _Repo]] = WeakKeyDictionary()
_common_dirs: dict[Path, Path] = {}


def repo_state(common_dir: Path) -> _Repo:
    per_loop = _repos.setdefault(anyio.lowlevel.current_token().native_token, {})
    state = per_loop.get(common_dir)
    if state is None:
        state = per_loop[common_dir] = _Repo()
    return state


def _git_env(**extra: str) -> dict[str, str]:
    env = dict(_base_env())
    env.update(extra)
    return env


_env_cache: tuple[Mapping[str, str], dict[str, str]] | None = None


def _base_env() -> dict[str, str]:
    """The environment of swarm's own git commands; made again only when `os.environ`
    changes (making it costs more CPU than starting git: see `swarm.agent._tool.environ`)."""
    global _env_cache
    current = environ()
    if _env_cache is not None and _env_cache[0] is current:
        return _env_cache[1]
    env = {k: v for k, v in current.items() if k not in _GIT_ENV_DROP}
    # no prompts, stable English messages, no opportunistic index refreshes in the user's repo
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
    # the target repository's hooks never run from swarm's own git commands (a worktree
    # add runs post-checkout, a commit post-commit even with --no-verify): see hook_env
    env.update(_OWN_CONFIG)
    _env_cache = (current, env)
    return env


_ALWAYS = {
    # no command an unsandboxed agent planted in the repository's config (`git config
    # core.fsmonitor 'sh evil'` runs on every status, diff and add)
    "core.fsmonitor": "false",
    # no garbage collection started by swarm's `am`, `commit` or `reset` in the user's
    # repository: in one near git's thresholds each ran a whole `gc` (repack, prune,
    # pack-refs) in its path, and `pack-refs` holds the lock every branch deletion needs
    "gc.auto": "0",
    "maintenance.auto": "false",
}
"""Settings every git command of swarm's gets, whatever the repository's config says."""


def _config(settings: Mapping[str, str]) -> dict[str, str]:
    """`settings` as git's environment variables (`GIT_CONFIG_COUNT`, `_KEY_n`, `_VALUE_n`)."""
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for n, (key, value) in enumerate(settings.items()):
        env |= {f"GIT_CONFIG_KEY_{n}": key, f"GIT_CONFIG_VALUE_{n}": value}
    return env


_OWN_CONFIG = _config({"core.hooksPath": os.devnull, **_ALWAYS})
"""The settings of swarm's own git commands, as environment variables."""


def hook_env() -> dict[str, str]:
    """The environment of a git command that may run the repository's hooks (`hooks: run`):
    its own hooks path, and no secrets for them to read."""
    env = command_env(_git_env())  # an allow-list: the hooks are the repository's code
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    env.update(_config(_ALWAYS))
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
    env = _base_env() if env is None else env
    executable = _spawn.which("git", env)
    if executable is None:
        raise WorkspaceError(f"could not run git in {cwd}: git is not on PATH")
    try:  # `-C`: the fast spawn takes no working directory
        done = await _spawn.run([executable, "-C", str(cwd), *args], input=input, env=env)
    except OSError as exc:
        raise WorkspaceError(f"could not run git in {cwd}: {exc}") from exc
    if done.returncode:
        detail = (done.stderr or done.stdout).decode(errors="replace").strip()
        raise WorkspaceError(f"git {' '.join(args[:2])} failed in {cwd}: {detail}")
    return done.stdout.decode("utf-8", "surrogateescape")


async def git_chain(*commands: Sequence[str], cwd: Path) -> None:
    """Run git `commands` in `cwd` one after the other, stopping at the first that fails
    (WorkspaceError, as `git`), for one process start: a shell running them, the last in
    its place (`exec`). Each start costs the coordinator about 0.3 ms of CPU (see
    `swarm._sandbox._spawn`), a git's own work in its child is not the coordinator's. Without
    a shell on PATH they run one by one."""
    env = _base_env()
    executable, shell = _spawn.which("git", env), _spawn.which("sh", env)
    if executable is None or shell is None:
        for command in commands:
            await git(*command, cwd=cwd)
        return
    steps = [shlex.join([executable, "-C", str(cwd), *command]) for command in commands]
    script = " && ".join([*steps[:-1], f"exec {steps[-1]}"])
    try:
        done = await _spawn.run([shell, "-c", script], env=env)
    except OSError as exc:
        raise WorkspaceError(f"could not run git in {cwd}: {exc}") from exc
    if done.returncode:
        detail = (done.stderr or done.stdout).decode(errors="replace").strip()
        names = " / ".join(" ".join(command[:2]) for command in commands)
        raise WorkspaceError(f"git {names} failed in {cwd}: {detail}")


async def git_retry(*args: str, cwd: Path, input: bytes | None = None) -> str:
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
    return repo_state(await common_dir(Path(await anyio.Path(repo).resolve()))).lock


async def common_dir(repo: Path) -> Path:
    common = _common_dirs.get(repo)
    if common is None:
        out = Path(await git("rev-parse", "--git-common-dir", cwd=repo))
        common = _common_dirs[repo] = (out if out.is_absolute() else repo / out).resolve()
    return common


def resolved(path: Path) -> Path:
    """`path` made absolute, symlinks resolved."""
    return path.resolve()


def stale_ref_lock(common: Path, *, older_than_s: float = 60.0) -> str | None:
    """A note on a `packed-refs.lock` in git dir `common` older than `older_than_s`, None
    if there is none: every ref deletion there (a branch, `git am`'s own) waits a second on
    it, then fails. A git killed mid-way leaves one (swarm's own could, before it let a
    cancelled git finish)."""
    lock = common / "packed-refs.lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return None
    if age < older_than_s:
        return None
    return (
        f"{lock} is {age / 60:.0f} min old, left by a git process killed mid-way: every "
        "branch deletion in the repository waits on it, then fails; remove it if no git "
        "runs there"
    )


def rmtree(path: Path) -> None:
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


def rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def write_owner(path: Path) -> Path:
    """Name this process as the owner of swarm's worktree `path` (`<path>.owner`: host and
    pid), so a later start's `cleanup_stale` removes it once this process is gone."""
    owner = path.with_name(f"{path.name}.owner")
    owner.parent.mkdir(parents=True, exist_ok=True)
    owner.write_text(f"{socket.gethostname()} {os.getpid()}\n")
    return owner


def owner_alive(owner: Path) -> bool:
    """Whether the process that made a workspace still runs (unknown hosts count as alive)."""
    try:
        host, pid = owner.read_text().split()
        return host != socket.gethostname() or pid_alive(int(pid))
    except (OSError, ValueError):
        return False  # no or unreadable owner file: nobody claims it


async def delete_branch(repo: Path, common: Path, branch: str) -> None:
    """Delete a branch. Batched: whoever gets the repo lock deletes every branch queued so
    far in one git process, so a hundred removals do not queue a hundred processes."""
    state = repo_state(common)
    ref = f"refs/heads/{branch}"
    state.doomed.add(ref)
    async with state.lock:
        if ref not in state.doomed:
            return  # an earlier batch took it
        batch = sorted(state.doomed)
        state.doomed.clear()
        lines = "".join(f"delete {r}\n" for r in batch).encode()
        try:
            # never killed half way (a killed ref transaction leaves packed-refs.lock and
            # every later deletion fails): shielded, bounded by git's own lock retries
            with anyio.CancelScope(shield=True):
                await git_retry("update-ref", "--stdin", cwd=repo, input=lines)
        except WorkspaceError:
            # one bad ref fails the whole transaction: the rest go one by one
            for other in batch:
                try:
                    await git_retry("update-ref", "-d", other, cwd=repo)
                except WorkspaceError as exc:
                    if other == ref:
                        raise
                    log.warning("could not delete branch %s: %s", other, exc)


async def unregister(repo: Path, common: Path, path: Path, branch: str, admin: Path | None) -> None:
    """Delete a worktree's files and git record (`admin`, its dir in the git dir), then its
    branch: what `git worktree remove --force` does, without a git process per worktree.

    The files and the record are first renamed into the git dir's trash (at once: a
    `worktree add` never sees a half-deleted record), then deleted with the trash of every
    removal waiting by then, by one `rm` process: deleting a checkout's files is thousands
    of system calls, which the coordinator's own process need not make."""
    state = repo_state(common)
    try:
        trash = [_to_trash(common, path)]
    except OSError:  # not movable into the trash (another filesystem): deleted here
        trash = []
        await anyio.to_thread.run_sync(rmtree, path)
    if admin is not None:
        async with state.lock:
            trash.append(_to_trash(common, admin))
    else:
        async with state.lock:
            try:
                await git("worktree", "remove", "--force", str(path), cwd=repo)
            except WorkspaceError:
                pass  # not registered (any more); `git worktree prune` drops what is left
    await _empty_trash(state, [t for t in trash if t is not None])
    await delete_branch(repo, common, branch)


def _to_trash(common: Path, path: Path) -> Path | None:
    """Move `path` into the git dir's trash; None when it is gone already (someone's `git
    worktree prune`, or never made). OSError when it cannot be moved."""
    trash = common / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
    try:
        path.rename(trash)
    except FileNotFoundError:
        return None
    return trash


async def _empty_trash(state: _Repo, paths: list[Path]) -> None:
    """Delete `paths` with whatever else waits: one `rm` for the batch, which whoever gets
    the lock first runs; a batch that fails is deleted here instead, path by path."""
    state.trash.update(paths)
    async with state.sweeping:
        if not any(p in state.trash for p in paths):
            return  # an earlier batch took them
        batch = list(state.trash)
        state.trash.clear()
        if not await _rm(batch):
            for trash in batch:
                try:
                    await anyio.to_thread.run_sync(rmtree, trash)
                except OSError as exc:
                    log.warning("could not delete %s (cleanup_stale will): %s", trash, exc)


async def _rm(paths: list[Path]) -> bool:
    """`rm -rf` the paths in one process; False if it could not (then rmtree does)."""
    rm = _spawn.which("rm", environ())
    if rm is None:
        return False
    try:
        done = await _spawn.run([rm, "-rf", "--", *map(str, paths)], env=environ())
    except OSError:
        return False
    return done.returncode == 0


def admin_dir(path: Path) -> Path | None:
    """A worktree's own directory inside the git dir, read from its `.git` file."""
    try:
        gitfile = (path / ".git").read_text().strip()
    except OSError:
        return None
    return Path(gitfile.removeprefix("gitdir: ")) if gitfile.startswith("gitdir: ") else None


_footprints: dict[str, Footprint] = {}
"""What each commit's checkout takes on disk (a commit's tree never changes)."""


async def checkout_footprint(repo: Path, sha: str) -> Footprint:
    """What checking out commit `sha` of `repo` takes on ext4 (the size of a worktree that
    is a filesystem of its own, `swarm._sandbox._volume`)."""
    if (found := _footprints.get(sha)) is None:
        listing = await git("ls-tree", "-r", "-t", "-l", "-z", "--full-tree", sha, cwd=repo)
        found = _footprints[sha] = Footprint.of_tree(listing)
    return found
