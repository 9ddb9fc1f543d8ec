"""swarm: an agent swarm orchestrator for large parallel coding tasks.

A map for newcomers, top to bottom as data flows:

- `messages`  Message, ToolCall, ChatRequest, ChatResult: what crosses every boundary
- `model`     the `Model` seam agents talk to and the `Provider` seam endpoints implement
- `providers` OpenAI-compatible and Anthropic adapters over httpx, the simulator, the catalog
- `config`, `routing`, `limits`  tiers, failover, hedging, rate and spend limits
- `agent`, `tool`, `toolbox`  the step loop, `@tool`, the built-in coding tools (tools/)
- `workspace` git worktrees per sub-agent; `check` runs a repository's tests in one
- `task`, `plan`, `coordinator`, `merge`, `solve`  `swarm solve`: plan/code/test/fix/merge
- `journal`   the SQLite run journal (resume, replay of model calls)
- `tracing`   OpenTelemetry spans for every call and every wait; `analysis`, `viewer`
- `testing`   ScriptedModel, FunctionModel and the pytest plugin that blocks real providers
- `errors`    the one error tree

Modules with a leading underscore are internal.
"""

from swarm.agent.loop import Agent, AgentResult
from swarm.agent.tool import Finish, Tool, ToolContext, tool
from swarm.agent.toolbox import coding_tools
from swarm.config import SwarmConfig, load_config
from swarm.errors import (
    BudgetExceeded,
    ConfigError,
    ModelBehaviorError,
    ProviderError,
    RateLimited,
    SwarmError,
    ToolError,
    WorkspaceError,
)
from swarm.messages import (
    ChatRequest,
    ChatResult,
    Message,
    RateLimitInfo,
    Timing,
    ToolCall,
    ToolSpec,
    Usage,
)
from swarm.model import Model, Provider
from swarm.routing.router import Need, Router
from swarm.run.workspace import Workspace

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentResult",
    "BudgetExceeded",
    "ChatRequest",
    "ChatResult",
    "ConfigError",
    "Finish",
    "Message",
    "Model",
    "ModelBehaviorError",
    "Need",
    "Provider",
    "ProviderError",
    "RateLimitInfo",
    "RateLimited",
    "Router",
    "SwarmConfig",
    "SwarmError",
    "Timing",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolSpec",
    "Usage",
    "Workspace",
    "WorkspaceError",
    "coding_tools",
    "load_config",
    "tool",
]
