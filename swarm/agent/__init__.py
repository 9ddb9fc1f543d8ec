"""Agents: the step loop, `@tool`, and the built-in coding tools.

`_loop` (the `Agent`: run, iter, resume, run_sync), `_steps` (one run's steps), `events`
(the result and the typed events of a run), `hooks` (hooks, vetoes, approvals), `_tool`
(tool schemas from type hints, the tool context, `finish`), `_toolbox` (the built-in coding
tools and the process-group runner), `mcp` (MCP servers' tools; imported on demand, as it
loads the `mcp` SDK), `compaction` and `context` (keeping the history inside the window).
"""

from swarm.agent._loop import Agent, AgentResult
from swarm.agent._tool import Finish, Tool, ToolContext, tool
from swarm.agent._toolbox import coding_tools, load_tools_from

__all__ = [
    "Agent",
    "AgentResult",
    "Finish",
    "Tool",
    "ToolContext",
    "coding_tools",
    "load_tools_from",
    "tool",
]
