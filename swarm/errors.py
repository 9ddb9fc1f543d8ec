"""Every error swarm raises, in one tree.

```text
SwarmError
  ConfigError          bad config, task file or plan: the user fixes it; says file and field
    PlanError          a plan that cannot be used, every problem listed
  ProviderError        a model call failed (status, provider, model); `retryable` says if
    RateLimited        429, with the provider's Retry-After
    ContextWindowExceeded  the request is longer than the model's window (a 400)
    MalformedReply     a reply that breaks its API's shape, or too large (says where)
  ModelBehaviorError   the model's output stayed invalid after the agent's bounded retries
  GaveUp               a subtask's agents could not make its check pass (it fails alone)
  ToolError            a tool failed: the message goes back to the model
  WorkspaceError       a git worktree could not be made, patched or removed; its cluster
                       node was lost (`node_lost`: the subtask restarts elsewhere); or the
                       cluster could not be reached
    NodeLost           the cluster node holding a workspace went away (which node, doing
                       what: placing, cloning, a tool call, a check, returning the patch)
  BudgetExceeded       steps, tokens, money or deadline ran out (says which and how much)
  UsageError           the library was called wrongly (the message says how to call it)
  McpError             an MCP server could not be started, reached or understood
  WireError            a request OpenAI would refuse (the simulator's 400s); a ValueError
  NetworkBlocked       a test reached for a non-loopback address (`swarm.testing`)
ServerGone             (internal, an OSError) the sandbox's spawn server died: a command
                       is started another way; it never reaches a user
ReplyShapeError        (internal, a ValueError) an adapter found a reply off its API's
                       shape; it reaches a user as a `MalformedReply`
ReplyTooLarge          (internal, a ValueError) a reply over the size bounds; it reaches a
                       user as a `MalformedReply` that is not retried
```

One warning: `UnsandboxedWarning` (a `UserWarning`), once per process, when agents'
commands will run on the host unconfined (`NoSandbox`, chosen or the only one there is).

Constructors store fields and build the message; they have no side effects. Errors that
leave a task group arrive in an `ExceptionGroup`; catch them with `except*`. Where swarm
runs a task group of its own behind a plain call (`mcp_tools`, `Model.stream`), the one
error inside leaves as itself (`alone`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "BudgetExceeded",
    "ConfigError",
    "ContextWindowExceeded",
    "GaveUp",
    "MalformedReply",
    "McpError",
    "ModelBehaviorError",
    "NetworkBlocked",
    "NodeLost",
    "PlanError",
    "ProviderError",
    "RateLimited",
    "StillRed",
    "SwarmError",
    "ToolError",
    "UnsandboxedWarning",
    "UsageError",
    "WireError",
    "WorkspaceError",
    "alone",
]


def alone(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside `group`'s nesting, if there is just one (raise it as
    itself: `raise alone(group) from ...`); None when it holds several."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup):
        if len(inner.exceptions) != 1:
            return None
        inner = inner.exceptions[0]
    return inner


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


class MalformedReply(ProviderError):
    """A reply that cannot be read: not its API's shape (`tool_calls` an object, a tool
    call's `index` not a number, a chunk that is not JSON) or over the size bounds.

    Retryable unless it is too large (the same server sends the same again); either way
    the router fails over to the next candidate."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        model: str = "",
        status: int | None = None,
        retryable: bool = True,
    ) -> None:
        super().__init__(
            message,
            provider=provider,
            model=model,
            status=status,
            kind="malformed",
            retryable=retryable,
        )


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
    """A git worktree could not be created, patched or removed; the cluster node holding
    a remote workspace was lost (`node_lost`); or the cluster could not be reached."""

    def __init__(self, message: str, *, node_lost: bool = False, sigkilled: bool = False) -> None:
        super().__init__(message)
        self.node_lost = node_lost
        """The workspace's node went away: its subtask may start again from its base."""
        self.sigkilled = sigkilled
        """Its `setup:` was killed by SIGKILL: on a cluster node, most often the node
        being lost under it (else the OOM killer)."""


class NodeLost(WorkspaceError):
    """The cluster node holding a workspace went away (its actor, its worker process or
    an object it held, lost): the subtask starts again from its base on a live node."""

    def __init__(self, message: str, *, node: str = "", during: str = "") -> None:
        super().__init__(message, node_lost=True)
        self.node = node
        """The Ray node id ('' when Ray had not said where yet)."""
        self.during = during
        """What the workspace was doing: placing, cloning, a tool call, a check, patch."""


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
    """Agents' commands will run on the host, unconfined (`swarm._sandbox.NoSandbox`); said
    once per process."""


class UsageError(SwarmError):
    """The library was called wrongly (an agent built or run in a way that cannot work);
    the message says what to do instead."""


class McpError(SwarmError):
    """An MCP server could not be started, reached or understood (`swarm.agent.mcp`)."""


class PlanError(ConfigError):
    """A plan that cannot be used; `problems` lists every reason, one sentence each.

    `PlanError(problems=[...])` renders the list; `PlanError("summary", problems=[...])`
    puts a summary first (e.g. "no valid plan after 3 attempts").
    """

    def __init__(
        self, message: str | None = None, *, problems: Sequence[str] = (), source: str = "plan"
    ) -> None:
        self.problems = list(problems)
        """Each problem, naming the subtask (`subtasks[2] ('c')`) and the fix."""
        listed = "\n".join(f"- {p}" for p in self.problems)
        if message is None:
            n = len(self.problems)
            message = self.problems[0] if n == 1 else f"{n} problems:\n{listed}"
        elif listed:
            message = f"{message}:\n{listed}"
        super().__init__(message, path=source)


class GaveUp(SwarmError):
    """A subtask's agents could not make its check pass: it fails, the run goes on."""


class StillRed(GaveUp):
    """A subtask's check still failing after its fix rounds: the command and its last
    output go with it, for the coder that starts the subtask afresh."""

    def __init__(self, rounds: int, command: str, output: str) -> None:
        super().__init__(f"check still failing after {rounds} fix rounds")
        self.command, self.output = command, output


class WireError(SwarmError, ValueError):
    """A request OpenAI would refuse with a 400 `invalid_request_error`."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param, self.code = param, code

    def body(self) -> dict[str, Any]:
        """OpenAI's error object for this refusal."""
        error = {"message": str(self), "type": "invalid_request_error"}
        return {"error": {**error, "param": self.param, "code": self.code}}


class NetworkBlocked(SwarmError, RuntimeError):
    """A test tried to connect somewhere other than loopback (`swarm.testing`)."""


class ServerGone(OSError):
    """The sandbox's spawn server has died (its socket is closed): the command was not
    started, and may be started another way. Internal: it never reaches a user."""


class ReplyShapeError(ValueError):
    """A reply that breaks its API's shape where an adapter checks it; the message says
    where (`tool_calls` must be a list, got an object). Internal: `Endpoint.chat` turns it
    into a `MalformedReply`."""


class ReplyTooLarge(ValueError):
    """A reply went over `MAX_EVENT_BYTES` or `MAX_REPLY_BYTES`; the message says which.
    Internal: `Endpoint.chat` turns it into a `MalformedReply` that is not retried."""
