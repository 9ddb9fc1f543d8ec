"""Agents: the step loop, `@tool`, and the built-in coding tools.

`loop` (the `Agent` and its step loop), `tool` (tool schemas from type hints, the tool
context, `finish`), `toolbox` (the built-in coding tools and the process-group runner).
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
