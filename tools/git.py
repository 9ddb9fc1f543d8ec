"""The git_diff tool: what the agent changed so far. Loaded as `swarm._builtin_tools.git`."""

from __future__ import annotations

from swarm.agent.tool import ToolContext, tool
from swarm.errors import ToolError, WorkspaceError
from swarm.run.workspace import worktree_diff


@tool
async def git_diff(ctx: ToolContext) -> str:
    """Show every change made in the workspace so far (new files included), as a git diff."""
    try:
        diff = await worktree_diff(ctx.root.resolve(), ctx.base or "HEAD")
    except WorkspaceError as exc:
        raise ToolError(f"git_diff failed: {exc}") from None
    return diff or "(no changes)"
