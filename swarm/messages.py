"""The values that cross every boundary: messages, tool calls, requests, results.

These are pydantic models because they cross process, file and network boundaries (the
simulator server, the journal, traces). Hot paths build them with `model_construct` where
the data is already known to be valid.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChatRequest",
    "ChatResult",
    "Message",
    "ModelSettings",
    "RateLimitInfo",
    "Timing",
    "ToolCall",
    "ToolSpec",
    "Usage",
]

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel, frozen=True):
    """A model's request to run one tool."""

    id: str
    """Provider-assigned id; the tool's result message refers to it."""
    name: str
    """Tool name, e.g. `read_file`."""
    arguments: str = "{}"
    """Arguments as the model wrote them: a JSON object, not yet validated."""


class Message(BaseModel):
    """One chat message, in the OpenAI shape (providers translate to their own)."""

    role: Role
    content: str | None = None
    """Text content; None for an assistant turn that only calls tools."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls made by an assistant turn."""
    tool_call_id: str | None = None
    """For `role="tool"`: which call this is the result of."""
    name: str | None = None
    """For `role="tool"`: the tool's name (Anthropic and some servers want it)."""
    written: str | None = None
    """For an assistant turn whose tool calls were read from its text: that text, as the
    model wrote it. It is sent back so, with the calls' results as user turns: a model
    shown its calls in the API's own form starts writing that form (an open model behind
    a server that does not parse it then answers with an empty call)."""

    @classmethod
    def system(cls, text: str) -> Message:
        """A system prompt."""
        return cls.model_construct(role="system", content=text, tool_calls=[])

    @classmethod
    def user(cls, text: str) -> Message:
        """A user turn."""
        return cls.model_construct(role="user", content=text, tool_calls=[])

    @classmethod
    def assistant(
        cls, text: str | None, tool_calls: list[ToolCall] | None = None, written: str | None = None
    ) -> Message:
        """A model's turn: its text (None when it only calls tools) and tool calls; with
        `written`, the text the calls were read from."""
        return cls.model_construct(
            role="assistant", content=text, tool_calls=tool_calls or [], written=written
        )

    @classmethod
    def tool(cls, call: ToolCall, text: str) -> Message:
        """The result of `call`, as the model reads it (an error's text too)."""
        return cls.model_construct(
            role="tool", content=text, tool_calls=[], tool_call_id=call.id, name=call.name
        )


class ToolSpec(BaseModel, frozen=True):
    """A tool as offered to a model: name, description and a JSON schema for arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON schema of the arguments object."""


ReasoningEffort = Literal["minimal", "low", "medium", "high"]


class ModelSettings(BaseModel):
    """Sampling and tool-use settings for an agent's model calls; None leaves the
    provider's default. Each adapter sends them as its API expects."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    tool_choice: Literal["auto", "required", "none"] | None = None
    parallel_tool_calls: bool | None = None

    def merged(self, override: ModelSettings | None) -> ModelSettings:
        """These settings with every field `override` sets taken from it."""
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))


class ChatRequest(BaseModel):
    """What a caller asks of a model. The model name is chosen by the router, not here."""

    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tokens: int | None = None
    """Upper bound on output tokens (the simulator's default script honours it exactly)."""
    temperature: float | None = None
    tool_choice: Literal["auto", "required", "none"] | None = None
    top_p: float | None = None
    reasoning_effort: ReasoningEffort | None = None
    """How hard a reasoning model thinks (OpenAI's `reasoning_effort`; Anthropic's
    extended-thinking budget)."""
    parallel_tool_calls: bool | None = None
    """False asks for at most one tool call per reply."""
    stream: bool = True
    """Stream the reply (SSE); needed to measure time to first token."""
    metadata: dict[str, str] = Field(default_factory=dict)
    """Free-form labels for scripts and traces (role, subtask id); never sent upstream."""


class Usage(BaseModel):
    """Token counts as the provider reported them (estimated when it did not)."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    """Output tokens spent thinking before the answer (included in output_tokens)."""
    cached_input_tokens: int = 0
    """Input tokens served from the provider's prompt cache (included in input_tokens)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage.model_construct(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )


class Timing(BaseModel):
    """Where one call's time went, in seconds, measured by the client."""

    ttft_s: float = 0.0
    """Request sent → first content or tool-call chunk received."""
    duration_s: float = 0.0
    """Request sent → last byte received."""
    timed: bool = True
    """The tokens arrived over time (two network reads or more), so a decode rate means
    something; False for a whole reply (even to a streamed request) or a one-read stream."""

    @property
    def decode_s(self) -> float:
        """Time spent streaming after the first token."""
        return max(0.0, self.duration_s - self.ttft_s)


class RateLimitInfo(BaseModel):
    """What a provider's `x-ratelimit-*` headers said about the remaining quota."""

    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None


class ChatResult(BaseModel):
    """A finished model call: the assistant message plus how it went."""

    message: Message
    finish_reason: str = "stop"
    """`stop`, `length`, `tool_calls` (OpenAI vocabulary; adapters translate)."""
    usage: Usage = Field(default_factory=Usage)
    timing: Timing = Field(default_factory=Timing)
    provider: str = ""
    """Config name of the provider that answered (`cerebras`, `sim`)."""
    model: str = ""
    """Model name the provider reported (or was sent)."""
    cost_usd: float = 0.0
    """Filled by the router from catalog/config prices."""
    attempts: int = 1
    """HTTP attempts the router made for this call, retries and hedges included."""
    simulated: bool = False
    """True when the simulator produced the reply (reports label such runs)."""
    rate_limit: RateLimitInfo | None = None
    extras: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific figures worth keeping (e.g. Groq's `x_groq` timing fields)."""
    tool_call_format: str = ""
    """How the reply's tool calls came: `native` (the API's own field), the text format
    they were read from (`hermes`, `json`, `llama3`, `mistral`, `function`), both
    (`native+hermes`), or "" when it made none."""
    text_tool_calls: int = 0
    """Of the reply's calls, those read from its text (a reply may hold both kinds: the
    server parsed one call and missed another the model wrote in its text)."""
    repaired_tool_calls: int = 0
    """Calls read from text whose arguments needed a repair (raw newlines, a Python dict)."""
    tool_call_problem: str = ""
    """Why text that starts a tool call could not be read ("" when nothing was amiss)."""

    @property
    def tokens_per_s(self) -> float:
        """Achieved decode rate: output tokens over the time after the first token (0 when
        the reply was not timed as a stream)."""
        decode = self.timing.decode_s
        timed = decode > 0 and self.timing.timed
        return self.usage.output_tokens / decode if timed else 0.0

    @property
    def text(self) -> str:
        """The reply's text ("" when it only called tools)."""
        return self.message.content or ""
