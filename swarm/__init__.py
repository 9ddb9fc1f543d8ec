"""swarm: an agent swarm orchestrator for large parallel coding tasks.

A map for newcomers, top to bottom as data flows:

- `messages`  Message, ToolCall, ChatRequest, ChatResult: what crosses every boundary
- `model`     the `Model` seam agents talk to and the `Provider` seam endpoints implement
- `providers` OpenAI-compatible and Anthropic adapters over httpx, the simulator, the catalog
- `config`, `routing`, `limits`  tiers, failover, hedging, rate and spend limits
- `tracing`   OpenTelemetry spans for every call and every wait
- `errors`    the one error tree

Modules with a leading underscore are internal.
"""

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

__version__ = "0.1.0"

__all__ = [
    "BudgetExceeded",
    "ChatRequest",
    "ChatResult",
    "ConfigError",
    "Message",
    "Model",
    "ModelBehaviorError",
    "Provider",
    "ProviderError",
    "RateLimitInfo",
    "RateLimited",
    "SwarmError",
    "Timing",
    "ToolCall",
    "ToolError",
    "ToolSpec",
    "Usage",
    "WorkspaceError",
]
