"""The `Agent`: a model, instructions and tools, run as a loop until done.

An `Agent` ends when the model calls `finish`, when it gives a final answer (validated
against `output_type` when one is set; with a `finish` tool, its summary is), when its
step budget runs out, or when a tool call needs approval (the run pauses; `resume`
answers it). Tool failures, unknown tools and malformed arguments go back to the model as
tool results; output that still fails validation after `max_output_retries` raises
`ModelBehaviorError`; a crash in swarm's own code propagates. Several tool calls in one
reply run concurrently. The steps themselves are in `swarm.agent._steps`.

Before each call the history is fitted to the model's window (`compaction`, a
`ContextPolicy`; see `swarm.agent.compaction`), and a provider's `ContextWindowExceeded`
leads to one compaction and one retry of the call rather than a failure.

Watch a run with `iter` (typed events from `swarm.agent.events`, text as it streams) or
`run(on_event=...)`; steer it with `hooks` (`swarm.agent.hooks`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, cast

import anyio
import sniffio
from opentelemetry.trace import SpanContext
from pydantic import TypeAdapter, ValidationError
from pydantic.errors import PydanticSchemaGenerationError
from typing_extensions import TypeVar

from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm._tracing.waits import depends_on
from swarm.agent._steps import Emit, Steps
from swarm.agent._tool import Tool, ToolContext
from swarm.agent.compaction import ContextPolicy
from swarm.agent.events import AgentEvent, AgentResult
from swarm.agent.hooks import Approvals, Hooks
from swarm.errors import ModelBehaviorError, UsageError
from swarm.messages import ChatRequest, Message, ModelSettings
from swarm.model import Model

__all__ = ["Agent", "AgentResult", "AgentRun"]

T = TypeVar("T", default=str)
"""What an agent outputs: `output_type`, or text when none is set."""

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_NO_SETTINGS = ModelSettings()


@dataclass
class Agent(Generic[T]):
    """A model, instructions and tools, run as a loop until done."""

    name: str
    """Role, low cardinality (`coder`, `fixer`): becomes `gen_ai.agent.name`."""
    model: Model
    instructions: str = ""
    tools: Sequence[Tool] = ()
    context: ToolContext | None = None
    """Where tools act (the workspace); tools that need it fail without one (the model is
    told), while `finish` and tools without a `ToolContext` parameter still work."""
    max_steps: int = 30
    output_type: type[T] | None = None
    """Validate a final answer (or, with a `finish` tool, its summary) as this type, from
    JSON; invalid → the model is told and tries again."""
    max_output_retries: int = 2
    max_tokens: int | None = None
    """Shorthand for `settings.max_tokens` (the settings win when both are set)."""
    settings: ModelSettings | None = None
    """Temperature, top_p, reasoning effort, tool choice...: sent with every call."""
    hooks: Sequence[Hooks] = ()
    """Called around every step, model call and tool call, in order (`swarm.agent.hooks`)."""
    agent_id: str | None = None
    """Instance id for traces (`coder-7`); defaults to the name."""
    subtask_id: str | None = None
    depends_on: Sequence[SpanContext] = ()
    """Spans this agent's work waited for (other subtasks' merges): `depends_on` links."""
    fallback_model: Model | None = None
    """Where the agent moves, once, when it starts repeating itself (the coordinator
    gives its agents the reasoning tier); None: it is only warned."""
    stuck_after: int = 3
    """The same reply (or the same failing call) this many times in a row stops the run
    as `stuck`; one repeat earlier the model is warned and moved to `fallback_model`."""
    compaction: ContextPolicy | None = field(default_factory=ContextPolicy)
    """How the history is kept inside the window; None never compacts (a request over
    the window then fails with `ContextWindowExceeded`)."""
    _by_name: dict[str, Tool] = field(init=False, repr=False)
    _specs: list[Any] = field(init=False, repr=False)
    _adapter: TypeAdapter[T] | None = field(init=False, repr=False)
    _metadata: dict[str, str] = field(init=False, repr=False)
    _settings: ModelSettings = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise UsageError(f"agent {self.name}: max_steps must be at least 1")
        if self.stuck_after < 2:
            raise UsageError(f"agent {self.name}: stuck_after must be at least 2")
        self._by_name = {t.name: t for t in self.tools}
        if len(self._by_name) != len(self.tools):
            names = sorted(t.name for t in self.tools)
            twice = sorted({n for n in names if names.count(n) > 1})
            raise UsageError(
                f"agent {self.name}: two tools are named {', '.join(twice)} (give an MCP "
                "server's tools a prefix: McpServer(..., prefix='mcp_'))"
            )
        self._specs = [t.spec for t in self.tools]
        self._adapter = _adapter_for(self.name, self.output_type)
        self._metadata = {"role": self.name, "agent": self.agent_id or self.name}
        if self.subtask_id:
            self._metadata["subtask"] = self.subtask_id
        base = ModelSettings(max_tokens=self.max_tokens) if self.max_tokens else _NO_SETTINGS
        self._settings = base.merged(self.settings)
        if self._adapter is not None and self.requires_finish and self.output_type is not str:
            schema = json.dumps(self._adapter.json_schema())
            self.instructions += (
                "\n\nWhen done, call `finish` with `summary` set to a JSON value matching "
                f"this schema: {schema}"
            )

    @property
    def requires_finish(self) -> bool:
        """True when the agent has a `finish` tool: plain replies do not end the run."""
        return "finish" in self._by_name

    @property
    def output_adapter(self) -> TypeAdapter[T] | None:
        """The validator of `output_type`, if one is set."""
        return self._adapter

    def tool_named(self, name: str) -> Tool | None:
        """The agent's tool called `name`, if it has one."""
        return self._by_name.get(name)

    async def run(
        self,
        prompt: str,
        *,
        history: Sequence[Message] = (),
        approvals: Approvals | None = None,
        on_event: Emit | None = None,
    ) -> AgentResult[T]:
        """Run the agent on `prompt` until it finishes, pauses or runs out of steps.

        `history` goes before the prompt (a follow-up); `approvals` decides tool calls
        that need approval by call id (a run replayed from the journal reaches the same
        ids); `on_event` is told every event as it happens (`swarm.agent.events`).
        """
        messages: list[Message] = []
        if self.instructions:
            messages.append(Message.system(self.instructions))
        messages.extend(history)
        messages.append(Message.user(prompt))
        steps = Steps(self, messages, on_event, approvals or {})
        return await self._traced(steps, 1, ())

    async def resume(
        self, paused: AgentResult[T], approvals: Approvals, *, on_event: Emit | None = None
    ) -> AgentResult[T]:
        """Go on with a run paused for approval, `approvals` deciding its pending calls.

        A call left undecided pauses the run again."""
        if paused.stop_reason != "approval_required":
            raise UsageError(
                f"agent {self.name}: only a run paused for approval can be resumed "
                f"(this one ended with {paused.stop_reason})"
            )
        unknown = sorted(set(approvals) - {c.id for c in paused.pending})
        if unknown:
            raise UsageError(f"agent {self.name}: no pending tool call has id {unknown[0]!r}")
        steps = Steps(self, list(paused.messages), on_event, approvals, paused.pending)
        steps.usage, steps.cost = paused.usage, paused.cost_usd
        steps.tool_calls = paused.tool_calls
        return await self._traced(steps, paused.steps + 1, paused.messages[-1].tool_calls)

    @asynccontextmanager
    async def iter(
        self, prompt: str, *, history: Sequence[Message] = (), approvals: Approvals | None = None
    ) -> AsyncIterator[AgentRun[T]]:
        """Run the agent, streaming its events: `async with agent.iter(p) as run:` then
        `async for event in run:`; `run.result` once a `FinishEvent` came. Leaving the
        block early cancels the run; an error that ends the run is raised on leaving it."""
        send, receive = anyio.create_memory_object_stream[AgentEvent](math.inf)
        handle: AgentRun[T] = AgentRun(receive)
        failed: list[Exception] = []

        async def drive() -> None:
            with send:
                try:
                    handle.result = await self.run(
                        prompt, history=history, approvals=approvals, on_event=send.send_nowait
                    )
                except Exception as exc:  # raised to the caller as itself, not in a group
                    failed.append(exc)

        with receive:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drive, name=f"agent:{self.name}")
                try:
                    yield handle
                finally:
                    if handle.result is None and not failed:
                        tg.cancel_scope.cancel()
        if failed:
            raise failed[0]

    def run_sync(
        self, prompt: str, *, history: Sequence[Message] = (), approvals: Approvals | None = None
    ) -> AgentResult[T]:
        """`run`, from code that is not async (a script, a notebook cell without a loop)."""
        try:
            sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            return anyio.run(partial(self.run, prompt, history=history, approvals=approvals))
        raise UsageError(f"agent {self.name}: run_sync inside an event loop; await run()")

    async def _traced(self, steps: Steps[T], first: int, pending: Sequence[Any]) -> AgentResult[T]:
        attrs: dict[str, Any] = {
            sc.OPERATION: sc.OP_AGENT,
            sc.AGENT_NAME: self.name,
            sc.AGENT_ID: self.agent_id or self.name,
            sc.ROLE: self.name,
        }
        if self.subtask_id:
            attrs[sc.SUBTASK_ID] = self.subtask_id
        with tracer().start_as_current_span(
            f"{sc.OP_AGENT} {self.name}", attributes=attrs, links=depends_on(self.depends_on)
        ) as span:
            result = await steps.loop(first, pending)
            span.set_attribute(sc.AGENT_STEPS, result.steps)
            span.set_attribute(sc.AGENT_STOP_REASON, result.stop_reason)
            span.set_attribute(sc.AGENT_COST_USD, result.cost_usd)
            span.set_attribute(sc.AGENT_OUTPUT_TOKENS, result.usage.output_tokens)
            c = result.calls
            span.set_attributes(
                {
                    sc.TOOL_CALLS_NATIVE: c.native,
                    sc.TOOL_CALLS_PARSED: c.parsed,
                    sc.TOOL_CALLS_REPAIRED: c.repaired,
                    sc.TOOL_CALLS_REJECTED: c.rejected,
                    sc.AGENT_NUDGES: c.nudges,
                    sc.AGENT_TRUNCATED: c.truncated,
                    sc.AGENT_ESCALATED: c.escalated,
                }
            )
            if result.repeated:
                span.set_attribute(sc.AGENT_REPEATED, result.repeated[:500])
            return result

    def request(self, messages: list[Message], step: int) -> ChatRequest:
        """The request for `step`: the conversation, the tools and the model settings."""
        s = self._settings
        return ChatRequest.model_construct(
            messages=list(messages),
            tools=self._specs,
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            tool_choice=s.tool_choice,
            top_p=s.top_p,
            reasoning_effort=s.reasoning_effort,
            parallel_tool_calls=s.parallel_tool_calls,
            stream=True,
            metadata={**self._metadata, "step": str(step)},
        )

    def behavior_error(self, exc: ValidationError, attempts: int) -> ModelBehaviorError:
        """The error for output that stayed invalid after `attempts` tries."""
        kind = getattr(self.output_type, "__name__", str(self.output_type))
        problem = f"output is not a valid {kind}"
        for first in exc.errors()[:1]:
            where = ".".join(str(p) for p in first["loc"]) or "the reply"
            problem += f" ({exc.error_count()} errors; first at {where}: {first['msg']})"
        return ModelBehaviorError(problem, agent=self.name, attempts=attempts)

    def parse_output(self, text: str) -> T:
        """`text` (JSON, fenced or not) as `output_type`; raises `ValidationError`."""
        assert self._adapter is not None
        fenced = _FENCE.search(text)
        raw = fenced.group(1) if fenced else text
        if self.output_type is str:
            return cast(T, raw.strip())
        return self._adapter.validate_json(raw.strip())


@dataclass
class AgentRun(Generic[T]):
    """A run under way (`Agent.iter`): iterate it for events; `result` when it is over."""

    _events: anyio.abc.ObjectReceiveStream[AgentEvent]
    result: AgentResult[T] | None = None
    """The run's result, once its `FinishEvent` came."""

    def __aiter__(self) -> AsyncIterator[AgentEvent]:
        return self._events.__aiter__()


def _adapter_for(agent: str, output_type: Any) -> TypeAdapter[Any] | None:
    if output_type is None:
        return None
    try:
        return TypeAdapter(output_type)
    except PydanticSchemaGenerationError as exc:
        raise UsageError(
            f"agent {agent}: output_type {output_type!r} cannot be validated: {exc}"
        ) from exc
