"""Git commands that run the target repository's hooks (`hooks: run`), inside the sandbox.

swarm's own git commands never run hooks (`swarm.run._git`: `core.hooksPath` is
`/dev/null`). When a task asks for its hooks, the git command that fires them (the merge
queue's commit) runs here instead: in the sandbox, cwd the worktree, on a view of the
repository where nothing a hook changes outlives it but what the patch holds:

- the repository's git dir is read-only: its refs, `HEAD`, `packed-refs`, `config`,
  `hooks/`, `info/` and `objects/` (a hook that runs a worktree file, as pre-commit and
  husky do, moved the user's `master` and `HEAD`, made branches, wrote
  `objects/info/alternates`);
- the worktree's own directory in it is writable (its index, its `HEAD`, its logs), except
  `commondir` and `gitdir`, which say where the repository is;
- objects go to a directory of the command's own (`GIT_OBJECT_DIRECTORY`, the shared
  store its alternate), taken into the store afterwards only once each is checked
  (`swarm._sandbox._objects`);
- a worktree on a branch is detached for the command, and its branch moved to the new
  commit by swarm afterwards; a `HEAD` a hook attached to a branch is put back, refused.

A hook outside what the sandbox shows (a `core.hooksPath` in the user's home) is not found,
and git skips it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path

import anyio

from swarm._sandbox._objects import adopt
from swarm._sandbox.base import Sandbox, admin_of, git_dir
from swarm._sandbox.process import CommandResult, run_confined
from swarm.errors import WorkspaceError

__all__ = ["PRIVATE_OBJECTS", "sandboxed_git"]

HOOK_TIMEOUT_S = 600.0
PRIVATE_OBJECTS = "swarm-objects"
"""The directory, in a worktree's own git directory, its hooked git command writes to."""
_OUTPUT_CHARS = 20_000
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


async def sandboxed_git(
    sandbox: Sandbox,
    *args: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float = HOOK_TIMEOUT_S,
) -> str:
    """Run `git *args` in worktree `cwd` inside `sandbox`, hooks enabled as `env` leaves
    them (`swarm.run._git.hook_env()`); its output, or a WorkspaceError carrying it."""
    git = shutil.which("git", path=env.get("PATH")) or "git"
    common = git_dir(cwd)
    admin = admin_of(cwd)
    if common is None or admin is None:
        raise WorkspaceError(f"{cwd} is not a linked worktree: its hooks are not run")
    head = (admin / "HEAD").read_text()
    branch = head.removeprefix("ref:").strip() if head.startswith("ref:") else None
    old = (await _host_git(git, env, cwd, "rev-parse", "HEAD")).strip()
    private = admin / PRIVATE_OBJECTS
    shutil.rmtree(private, ignore_errors=True)
    private.mkdir()
    if branch is not None:  # the branch's ref is read-only in the sandbox: detach
        await _host_git(git, env, cwd, "update-ref", "--no-deref", "HEAD", old)
    own = {
        **env,
        "GIT_OBJECT_DIRECTORY": str(private),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common / "objects"),
    }
    try:
        result = await run_confined(
            sandbox,
            [git, *args],
            cwd=cwd,
            env=own,
            timeout_s=timeout_s,
            max_output_chars=_OUTPUT_CHARS,
            git_write=True,
        )
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            new = await _settle(git, env, cwd, admin, common, branch, old)
    if new is None:
        raise WorkspaceError(
            f"git {_subcommand(args)} in {cwd}: a hook pointed HEAD elsewhere; put back, refused"
        )
    return _checked(result, args, cwd, sandbox)


async def _settle(
    git: str,
    env: Mapping[str, str],
    cwd: Path,
    admin: Path,
    common: Path,
    branch: str | None,
    old: str,
) -> str | None:
    """After the command: its objects taken in, its HEAD checked (None: it was not a
    commit, and is put back), the branch moved to it and attached again."""
    private = admin / PRIVATE_OBJECTS
    try:
        adopt(private, common / "objects")
    finally:
        shutil.rmtree(private, ignore_errors=True)
    text = (admin / "HEAD").read_text().strip()
    new = text if _SHA.fullmatch(text) else None
    if new is None:
        (admin / "HEAD").write_text(f"{old}\n")
    if branch is not None:
        if new is not None and new != old:
            await _host_git(git, env, cwd, "update-ref", branch, new, old)
        await _host_git(git, env, cwd, "symbolic-ref", "HEAD", branch)
    return new


async def _host_git(git: str, env: Mapping[str, str], cwd: Path, *args: str) -> str:
    """swarm's own git command, on the host, no hooks (the reference-transaction one)."""
    argv = [git, "-c", "core.hooksPath=/dev/null", *args]
    done = await anyio.run_process(argv, cwd=cwd, env=dict(env), check=False)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        raise WorkspaceError(f"git {args[0]} failed in {cwd}: {why}")
    return done.stdout.decode()


def _checked(result: CommandResult, args: tuple[str, ...], cwd: Path, sandbox: Sandbox) -> str:
    if result.exit_code != 0:
        why = "timed out" if result.timed_out else f"exited {result.exit_code}"
        raise WorkspaceError(
            f"git {_subcommand(args)} {why} in {cwd} ({sandbox.kind} sandbox): "
            f"{result.output.strip()[-4000:]}"
        )
    return result.output


def _subcommand(args: tuple[str, ...]) -> str:
    """`commit` of `-c user.name=x commit -m ...`: what the error names."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] in ("-c", "-C") else rest[1:]
    return rest[0] if rest else " ".join(args)
