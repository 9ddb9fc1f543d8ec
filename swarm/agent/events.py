"""What an agent run reports as it goes: `AgentResult` at the end, typed events on the way.

`Agent.iter` streams these events; `Agent.run(on_event=...)` hands them to a callback. The
order for one step is `ModelRequestEvent`, any `ThinkingDelta`/`TextDelta` as the reply
streams in (a `ReplyRestart` between them when the call started over with another
attempt: forget the step's text so far), `ModelResponseEvent`, then a `ToolCallEvent`
and its `ToolResultEvent` per tool call. `CompactionEvent` comes before the request it
made room for; `ApprovalEvent` when the run pauses for a decision; `FinishEvent`, carrying
the result, always last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from swarm.messages import ChatRequest, ChatResult, Message, ToolCall, Usage

__all__ = [
    "AgentEvent",
    "AgentResult",
    "ApprovalEvent",
    "CallCounts",
    "CompactionEvent",
    "FinishEvent",
    "ModelRequestEvent",
    "ModelResponseEvent",
    "ReplyRestart",
    "StopReason",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallEvent",
    "ToolResultEvent",
]

T = TypeVar("T", default=str)

StopReason = Literal["finish", "final_answer", "max_steps", "approval_required", "vetoed", "stuck"]
"""Why a run ended: `finish` called, a final answer given, the step budget spent, a tool
call waiting for approval (`AgentResult.pending`), a hook's `on_step` vetoed going on, or
the model kept sending the same reply (`AgentResult.repeated`)."""


@dataclass
class CallCounts:
    """How one run's tool calls came and what the agent had to tell the model."""

    native: int = 0
    """Calls that came in the API's own `tool_calls` field."""
    parsed: int = 0
    """Calls read from the reply's text (a model or server that wrote them as text)."""
    repaired: int = 0
    """Calls that needed a repair to run: arguments read from broken text, or a call under
    a name that is no tool's whose arguments fit exactly one tool."""
    rejected: int = 0
    """Calls refused: an unknown tool, arguments that do not fit, text that could not be read."""
    nudges: int = 0
    """Replies with no call, answered with the format to use."""
    truncated: int = 0
    """Replies cut by `max_tokens`, or stopped because they looped on themselves."""
    escalated: bool = False
    """The agent repeated itself and was moved to its fallback model."""

    def count(self, reply: ChatResult) -> None:
        """Count one reply's calls by how they came."""
        n = len(reply.message.tool_calls)
        if not n:
            return
        parsed = reply.text_tool_calls
        if not parsed and reply.tool_call_format not in ("native", ""):
            parsed = n  # a reply journaled before `text_tool_calls` was recorded
        self.native += n - parsed
        self.parsed += parsed
        self.repaired += reply.repaired_tool_calls


@dataclass
class AgentResult(Generic[T]):
    """What one agent run produced and what it cost."""

    output: T | str | None
    """The finish summary, the final answer, or the validated output object."""
    stop_reason: StopReason
    steps: int
    """Model calls made."""
    usage: Usage
    cost_usd: float
    messages: list[Message]
    """The conversation as it ended (compacted, if it was), for a follow-up run."""
    tool_calls: int = 0
    compactions: int = 0
    """Times the history was compacted to fit the window."""
    pending: list[ToolCall] = field(default_factory=list)
    """With `stop_reason == "approval_required"`: the calls waiting for a decision; answer
    them with `Agent.resume(result, approvals)`."""
    calls: CallCounts = field(default_factory=CallCounts)
    """How the tool calls came (native or read from text) and which were refused."""
    repeated: str = ""
    """With `stop_reason == "stuck"`: the reply (or failing call) the model kept sending."""

    @property
    def finished(self) -> bool:
        """True when the agent ended on its own (finish or final answer)."""
        return self.stop_reason in ("finish", "final_answer")


@dataclass(frozen=True, slots=True)
class ModelRequestEvent:
    """A model call is about to be made (after hooks changed the request)."""

    step: int
    request: ChatRequest


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text, as it streamed in."""

    step: int
    text: str
    attempt: int = 1
    """The call's attempt it came from (a `ReplyRestart` comes before a new one's)."""


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A piece of the model's reasoning, as it streamed in."""

    step: int
    text: str
    attempt: int = 1
    """The call's attempt it came from (a `ReplyRestart` comes before a new one's)."""


@dataclass(frozen=True, slots=True)
class ReplyRestart:
    """The step's model call started over with another attempt (a retry after a dropped
    stream, a hedge that won): the text and reasoning streamed so far are void."""

    step: int
    attempt: int


@dataclass(frozen=True, slots=True)
class ModelResponseEvent:
    """A model call finished."""

    step: int
    result: ChatResult


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A tool is about to run (after hooks and approval let it)."""

    step: int
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolResultEvent:
    """A tool call's result, as the model will read it."""

    step: int
    call: ToolCall
    text: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """The history was compacted to fit the model's window."""

    step: int
    messages_before: int
    messages_after: int


@dataclass(frozen=True, slots=True)
class ApprovalEvent:
    """The run paused: these tool calls need a decision (`Agent.resume`)."""

    step: int
    calls: list[ToolCall]


@dataclass(frozen=True, slots=True)
class FinishEvent:
    """The run ended; always the last event."""

    result: AgentResult[Any]


AgentEvent = (
    ModelRequestEvent
    | TextDelta
    | ThinkingDelta
    | ReplyRestart
    | ModelResponseEvent
    | ToolCallEvent
    | ToolResultEvent
    | CompactionEvent
    | ApprovalEvent
    | FinishEvent
)
"""Any event of an agent run."""
