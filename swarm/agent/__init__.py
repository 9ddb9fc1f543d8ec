"""Agents: the step loop, `@tool`, and the built-in coding tools.

`loop` (the `Agent`: run, iter, resume, run_sync), `steps` (one run's steps), `events`
(the result and the typed events of a run), `hooks` (hooks, vetoes, approvals), `tool`
(tool schemas from type hints, the tool context, `finish`), `toolbox` (the built-in coding
tools and the process-group runner), `mcp` (MCP servers' tools; imported on demand, as it
loads the `mcp` SDK), `compaction` and `context` (keeping the history inside the window).
"""

from swarm.agent.loop import Agent, AgentResult
from swarm.agent.tool import Finish, Tool, ToolContext, tool
from swarm.agent.toolbox import coding_tools, load_tools_from

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
