"""The finish tool: the agent says it is done. Loaded as `swarm._builtin_tools.finish`.

It takes no `ToolContext`, so an agent without a workspace can still finish.
"""

from __future__ import annotations

from swarm.agent._tool import Finish, tool


@tool
async def finish(summary: str) -> str:
    """Finish the task: call this once the work is done (or cannot be done).

    Args:
        summary: What you changed and why, or why the task cannot be done.
    """
    raise Finish(summary)
