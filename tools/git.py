"""The git_diff tool: what the agent changed so far. Loaded as `swarm._builtin_tools.git`."""

from __future__ import annotations

import re

from swarm.agent._tool import ToolContext, tool
from swarm.agent._toolbox import resolve_path
from swarm.errors import ToolError, WorkspaceError
from swarm.run._workspace import worktree_diff

_FILE_HEADER = re.compile(r"^diff --git a/.* b/(.*)$", re.MULTILINE)


@tool(read_only=True)
async def git_diff(ctx: ToolContext, path: str | None = None) -> str:
    """Show what your patch holds so far: edits to tracked files and the files you wrote.

    Args:
        path: Only the changes to this file, or to the files under this directory,
            relative to the workspace root. Default: all.
    """
    root = ctx.root.resolve()
    rel = resolve_path(ctx, path).relative_to(root).as_posix() if path else "."
    try:
        diff = await worktree_diff(root, ctx.base or "HEAD", untracked=ctx.written.paths())
    except WorkspaceError as exc:
        raise ToolError(f"git_diff failed: {exc}") from None
    if rel != ".":
        diff = "".join(part for name, part in _by_file(diff) if f"{name}/".startswith(f"{rel}/"))
        return diff or f"(no changes to {rel})"
    return diff or "(no changes)"


def _by_file(diff: str) -> list[tuple[str, str]]:
    """The diff's parts, one per file: (its path, its text)."""
    starts = [m.start() for m in _FILE_HEADER.finditer(diff)]
    parts = [diff[a:b] for a, b in zip(starts, [*starts[1:], len(diff)], strict=True)]
    return [(m.group(1), part) for part in parts if (m := _FILE_HEADER.match(part))]
