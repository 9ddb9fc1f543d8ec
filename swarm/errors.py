"""Every error swarm raises, in one tree.

```text
SwarmError
  ConfigError          bad config, task file or plan: the user fixes it; says file and field
  ProviderError        a model call failed (status, provider, model); `retryable` says if
    RateLimited        429, with the provider's Retry-After
    ContextWindowExceeded  the request is longer than the model's window (a 400)
  ModelBehaviorError   the model's output stayed invalid after the agent's bounded retries
  ToolError            a tool failed: the message goes back to the model
  WorkspaceError       a git worktree could not be made, patched or removed; or its
                       cluster node was lost (`node_lost`: the subtask restarts elsewhere)
  BudgetExceeded       steps, tokens, money or deadline ran out (says which and how much)
  UsageError           the library was called wrongly (the message says how to call it)
  McpError             an MCP server could not be started, reached or understood
```

One warning: `UnsandboxedWarning` (a `UserWarning`), once per process, when agents'
commands will run on the host unconfined (`NoSandbox`, chosen or the only one there is).

Constructors store fields and build the message; they have no side effects. Errors that
leave a task group arrive in an `ExceptionGroup`; catch them with `except*`.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceeded",
    "ConfigError",
    "ContextWindowExceeded",
    "McpError",
    "ModelBehaviorError",
    "ProviderError",
    "RateLimited",
    "SwarmError",
    "ToolError",
    "UnsandboxedWarning",
    "UsageError",
    "WorkspaceError",
]


class SwarmError(Exception):
    """The root of every error swarm raises on purpose."""


class ConfigError(SwarmError):
    """Bad configuration, task file or plan; the message names the place and the fix."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        where = ":".join(p for p in (path, key) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        """The file at fault, when there is one."""
        self.key = key
        """The key, field or line at fault (`tiers.speed.models`, `line 3`)."""


class ProviderError(SwarmError):
    """A model call failed: HTTP status, connection, stall or a malformed stream."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        model: str = "",
        status: int | None = None,
        kind: str = "http",
        retryable: bool = False,
    ) -> None:
        label = "/".join(p for p in (provider, model) if p)
        super().__init__(f"{label}: {message}" if label else message)
        self.provider = provider
        """Config name of the provider (`cerebras`)."""
        self.model = model
        """Model name as sent to the provider."""
        self.status = status
        """HTTP status, when the provider answered."""
        self.kind = kind
        """`http`, `connect`, `stall`, `malformed`, `timeout` or `budget`: what went wrong."""
        self.retryable = retryable
        """True when the same call may succeed if tried again (5xx, 429, drops, stalls)."""


class RateLimited(ProviderError):
    """The provider answered 429; `retry_after` is its Retry-After in seconds, if given."""

    def __init__(
        self,
        message: str = "rate limited (429)",
        *,
        provider: str = "",
        model: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(
            message, provider=provider, model=model, status=429, kind="http", retryable=True
        )
        self.retry_after = retry_after
        """Seconds the provider asked us to wait, from `Retry-After` or `x-ratelimit-reset-*`."""


class ContextWindowExceeded(ProviderError):
    """The prompt (plus `max_tokens`) is longer than the model's context window.

    Providers answer 400 (OpenAI-compatible: `code: context_length_exceeded`; Anthropic:
    `invalid_request_error`, "prompt is too long"). No retry or other candidate helps; the
    agent compacts its history and tries once more."""

    def __init__(
        self,
        message: str = "context window exceeded",
        *,
        provider: str = "",
        model: str = "",
        limit: int | None = None,
        requested: int | None = None,
    ) -> None:
        super().__init__(
            message, provider=provider, model=model, status=400, kind="http", retryable=False
        )
        self.limit = limit
        """The model's window in tokens, when the provider said."""
        self.requested = requested
        """Tokens the request needed (prompt plus `max_tokens`), when the provider said."""


class ModelBehaviorError(SwarmError):
    """The model's replies can't be used (output failing validation), even after retries.

    Raised once the agent has told the model what was wrong and run out of retries; the
    cause (`__cause__`) is the last validation error."""

    def __init__(self, problem: str, *, agent: str = "", attempts: int = 1) -> None:
        who = f"agent {agent}: " if agent else ""
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        super().__init__(f"{who}{problem} (after {tries})")
        self.problem = problem
        """What was wrong with the last reply."""
        self.agent = agent
        """The agent's name (its role: `planner`, `tester`)."""
        self.attempts = attempts
        """Replies the model gave that could not be used."""


class ToolError(SwarmError):
    """A tool refused or failed; the message is shown to the model as the tool's result."""

    def __init__(self, message: str, *, rejected: bool = False) -> None:
        super().__init__(message)
        self.rejected = rejected
        """The call itself was wrong (arguments that do not fit the tool), not its work."""


class WorkspaceError(SwarmError):
    """A git worktree could not be created, patched or removed; or the cluster node holding
    a remote workspace was lost (`node_lost`)."""

    def __init__(self, message: str, *, node_lost: bool = False) -> None:
        super().__init__(message)
        self.node_lost = node_lost
        """The workspace's node went away: its subtask may start again from its base."""


class BudgetExceeded(SwarmError):
    """A budget ran out: `kind` is steps, tokens, usd or deadline."""

    def __init__(self, kind: str, *, limit: float, spent: float, scope: str = "run") -> None:
        super().__init__(f"{scope} budget exceeded: {kind} spent {spent:g} of {limit:g}")
        self.kind = kind
        """What ran out: `steps`, `tokens`, `usd` or `deadline`."""
        self.limit = limit
        """The limit that was set."""
        self.spent = spent
        """What had been spent when the budget stopped the work."""
        self.scope = scope
        """Whose budget: `run`, a tier name (`tier speed`) or an agent."""


class UnsandboxedWarning(UserWarning):
    """Agents' commands will run on the host, unconfined (`swarm.sandbox.NoSandbox`); said
    once per process."""


class UsageError(SwarmError):
    """The library was called wrongly (an agent built or run in a way that cannot work);
    the message says what to do instead."""


class McpError(SwarmError):
    """An MCP server could not be started, reached or understood (`swarm.agent.mcp`)."""
