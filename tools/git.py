"""The git_diff tool: what the agent changed so far. Loaded as `swarm._builtin_tools.git`."""

from __future__ import annotations

from swarm.agent._tool import ToolContext, tool
from swarm.errors import ToolError, WorkspaceError
from swarm.run._workspace import worktree_diff


@tool(read_only=True)
async def git_diff(ctx: ToolContext) -> str:
    """Show what your patch holds so far: edits to tracked files and the files you wrote."""
    try:
        root = ctx.root.resolve()
        diff = await worktree_diff(root, ctx.base or "HEAD", untracked=ctx.written.paths())
    except WorkspaceError as exc:
        raise ToolError(f"git_diff failed: {exc}") from None
    return diff or "(no changes)"
