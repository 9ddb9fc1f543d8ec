"""swarm: an agent swarm orchestrator for large parallel coding tasks.

A map for newcomers: a package per layer, lowest first; a module imports only from its
own layer or the ones below (tests/test_layers.py checks it).

- ground      `errors` (the one error tree), `messages` (what crosses every boundary),
              `model` (the Model and Provider seams), `config/` (every section, loading,
              wire checks, durations, secrets), `budget` (the one Budget), `catalog`
              (providers, models, prices, latency profiles), and the private helpers
              `_tokens` and `_serve`
- `tracing`   span names and attributes (`semconv`), the run's tracer and trace file,
              every wait as a span (`waits`)
- `providers` one job per module: the HTTP exchange, SSE, the OpenAI-compatible and
              Anthropic adapters on a shared endpoint, the simulator, a registry of kinds
- `routing`   the router: tiers, failover, retries, hedging, breaker, limits and AIMD
- `sandbox`   where commands run: the `Sandbox` seam, bubblewrap and none, running one
              command confined (`run_confined`), git hooks inside it
- `agent`     the step loop and its events, hooks and approvals, `@tool`, the built-in
              coding tools, MCP servers' tools (`swarm.agent.mcp`)
- `run`       a solve run: the `Run`, task, plan, coordinator, workspaces, checks, merge
              queue, journal, report; `swarm solve` and `swarm resume`
- `cluster`   workspaces on a Ray cluster: an actor per workspace holding a clone, the
              tools and checks routed to it (`--cluster`; Ray only when asked for)
- `simulate`  a simulated world plugged into the same `Run` (`swarm simulate`)
- `analysis`, `viewer`  traces: critical path, ledger, what-if; the local web viewer
- on top      `cli` and `_commands`, `testing` (ScriptedModel, FunctionModel) and its
              pytest plugin `pytest_plugin`

Modules with a leading underscore are internal.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the names are, for type checkers and the API reference
    from swarm._routing.router import Need, Router
    from swarm._sandbox.base import Sandbox
    from swarm._sandbox.none import NoSandbox
    from swarm._tracing.setup import run_tracing
    from swarm.agent._loop import Agent, AgentResult, AgentRun
    from swarm.agent._tool import Finish, Tool, ToolContext, tool
    from swarm.agent._toolbox import coding_tools
    from swarm.agent.events import AgentEvent
    from swarm.agent.hooks import Hooks, StepInfo, Veto
    from swarm.config import SwarmConfig, load_config
    from swarm.errors import (
        BudgetExceeded,
        ConfigError,
        ContextWindowExceeded,
        MalformedReply,
        McpError,
        ModelBehaviorError,
        ProviderError,
        RateLimited,
        SwarmError,
        ToolError,
        UsageError,
        WorkspaceError,
    )
    from swarm.messages import (
        ChatRequest,
        ChatResult,
        Message,
        ModelSettings,
        RateLimitInfo,
        Timing,
        ToolCall,
        ToolSpec,
        Usage,
    )
    from swarm.model import Model, Provider
    from swarm.run._replay import ReplayModel
    from swarm.run._workspace import Workspace

_EXPORTS = {
    "Agent": "swarm.agent._loop",
    "AgentEvent": "swarm.agent.events",
    "AgentResult": "swarm.agent._loop",
    "AgentRun": "swarm.agent._loop",
    "BudgetExceeded": "swarm.errors",
    "ChatRequest": "swarm.messages",
    "ChatResult": "swarm.messages",
    "ConfigError": "swarm.errors",
    "ContextWindowExceeded": "swarm.errors",
    "Finish": "swarm.agent._tool",
    "Hooks": "swarm.agent.hooks",
    "MalformedReply": "swarm.errors",
    "McpError": "swarm.errors",
    "Message": "swarm.messages",
    "Model": "swarm.model",
    "ModelBehaviorError": "swarm.errors",
    "ModelSettings": "swarm.messages",
    "Need": "swarm._routing.router",
    "NoSandbox": "swarm._sandbox.none",
    "Provider": "swarm.model",
    "ProviderError": "swarm.errors",
    "RateLimitInfo": "swarm.messages",
    "RateLimited": "swarm.errors",
    "ReplayModel": "swarm.run._replay",
    "Sandbox": "swarm._sandbox.base",
    "Router": "swarm._routing.router",
    "StepInfo": "swarm.agent.hooks",
    "SwarmConfig": "swarm.config",
    "SwarmError": "swarm.errors",
    "Timing": "swarm.messages",
    "Tool": "swarm.agent._tool",
    "ToolCall": "swarm.messages",
    "ToolContext": "swarm.agent._tool",
    "ToolError": "swarm.errors",
    "ToolSpec": "swarm.messages",
    "Usage": "swarm.messages",
    "UsageError": "swarm.errors",
    "Veto": "swarm.agent.hooks",
    "Workspace": "swarm.run._workspace",
    "WorkspaceError": "swarm.errors",
    "coding_tools": "swarm.agent._toolbox",
    "load_config": "swarm.config",
    "run_tracing": "swarm._tracing.setup",
    "tool": "swarm.agent._tool",
}
"""Where each public name lives: imported on first use (PEP 562), so `import swarm` and
`swarm --version` do not load the whole library (aiohttp, pydantic models, OTel, ...)."""


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'swarm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentResult",
    "AgentRun",
    "BudgetExceeded",
    "ChatRequest",
    "ChatResult",
    "ConfigError",
    "ContextWindowExceeded",
    "Finish",
    "Hooks",
    "MalformedReply",
    "McpError",
    "Message",
    "Model",
    "ModelBehaviorError",
    "ModelSettings",
    "Need",
    "NoSandbox",
    "Provider",
    "ProviderError",
    "RateLimitInfo",
    "RateLimited",
    "ReplayModel",
    "Router",
    "Sandbox",
    "StepInfo",
    "SwarmConfig",
    "SwarmError",
    "Timing",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolSpec",
    "Usage",
    "UsageError",
    "Veto",
    "Workspace",
    "WorkspaceError",
    "coding_tools",
    "load_config",
    "run_tracing",
    "tool",
]
