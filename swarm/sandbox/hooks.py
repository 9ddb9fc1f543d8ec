"""Git commands that run the target repository's hooks (`hooks: run`), inside the sandbox.

swarm's own git commands never run hooks (`swarm.run._git`: `core.hooksPath` is
`/dev/null`). When a task asks for its hooks, the git command that fires them (the merge
queue's commit) runs here instead: in the sandbox, cwd the worktree, the git dir writable
but its `config`, `hooks/` and `info/` read-only, so a hook cannot plant what the host's
next git command would run. A hook outside what the sandbox shows (a `core.hooksPath` in
the user's home) is not found, and git skips it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from swarm.errors import WorkspaceError
from swarm.sandbox.base import Sandbox
from swarm.sandbox.process import run_confined

__all__ = ["sandboxed_git"]

HOOK_TIMEOUT_S = 600.0
_OUTPUT_CHARS = 20_000


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
    result = await run_confined(
        sandbox,
        [git, *args],
        cwd=cwd,
        env=env,
        timeout_s=timeout_s,
        max_output_chars=_OUTPUT_CHARS,
        git_write=True,
    )
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
