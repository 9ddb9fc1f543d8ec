"""The agent step loop: ask the model, run the tools it asks for, feed results back.

An `Agent` ends when the model calls `finish`, when it gives a final answer (validated
against `output_type` when one is set), or when its step budget runs out. Tool failures,
unknown tools and malformed arguments go back to the model as tool results; output that
still fails validation after `max_output_retries` raises `ModelBehaviorError`; a crash in
swarm's own code propagates. Several tool calls in one reply run concurrently.

Before each call the history is fitted to the model's window (`compaction`, a
`ContextPolicy`; see `swarm.agent.compaction`), and a provider's `ContextWindowExceeded`
leads to one compaction and one retry of the call rather than a failure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, cast

import anyio
from opentelemetry.trace import Span, SpanContext, Status, StatusCode
from pydantic import TypeAdapter, ValidationError

from swarm._tokens import TOKENS_PER_TOOL
from swarm.agent.compaction import Compactor, ContextPolicy
from swarm.agent.tool import Finish, Tool, ToolContext
from swarm.errors import ContextWindowExceeded, ModelBehaviorError, ToolError
from swarm.messages import ChatRequest, ChatResult, Message, ToolCall, Usage
from swarm.model import Model
from swarm.tracing import semconv as sc
from swarm.tracing.setup import tracer
from swarm.tracing.waits import depends_on

__all__ = ["Agent", "AgentResult"]

T = TypeVar("T")

StopReason = Literal["finish", "final_answer", "max_steps"]

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


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

    @property
    def finished(self) -> bool:
        """True unless the step budget ran out first."""
        return self.stop_reason != "max_steps"


@dataclass
class _Outcome:
    message: Message
    finish: str | None = None


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
    """Validate a final answer as this type (JSON in the reply); invalid → retry."""
    max_output_retries: int = 2
    max_tokens: int | None = None
    agent_id: str | None = None
    """Instance id for traces (`coder-7`); defaults to the name."""
    subtask_id: str | None = None
    depends_on: Sequence[SpanContext] = ()
    """Spans this agent's work waited for (other subtasks' merges): `depends_on` links."""
    compaction: ContextPolicy | None = field(default_factory=ContextPolicy)
    """How the history is kept inside the window; None never compacts (a request over
    the window then fails with `ContextWindowExceeded`)."""
    _by_name: dict[str, Tool] = field(init=False, repr=False)
    _specs: list[Any] = field(init=False, repr=False)
    _adapter: TypeAdapter[T] | None = field(init=False, repr=False)
    _metadata: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {t.name: t for t in self.tools}
        self._specs = [t.spec for t in self.tools]
        self._adapter = TypeAdapter(self.output_type) if self.output_type is not None else None
        self._metadata = {"role": self.name, "agent": self.agent_id or self.name}
        if self.subtask_id:
            self._metadata["subtask"] = self.subtask_id

    async def run(self, prompt: str, *, history: Sequence[Message] = ()) -> AgentResult[T]:
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
            result = await self._loop(prompt, history)
            span.set_attribute(sc.AGENT_STEPS, result.steps)
            span.set_attribute(sc.AGENT_STOP_REASON, result.stop_reason)
            span.set_attribute(sc.AGENT_COST_USD, result.cost_usd)
            span.set_attribute(sc.AGENT_OUTPUT_TOKENS, result.usage.output_tokens)
            return result

    async def _loop(self, prompt: str, history: Sequence[Message]) -> AgentResult[T]:
        messages: list[Message] = []
        if self.instructions:
            messages.append(Message.system(self.instructions))
        messages.extend(history)
        messages.append(Message.user(prompt))
        usage, cost, tool_calls, bad_outputs = Usage(), 0.0, 0, 0
        requires_finish = "finish" in self._by_name
        keeper = None
        if self.compaction is not None:
            fixed = TOKENS_PER_TOOL * len(self._specs)
            keeper = Compactor(self.compaction, self.model, self.name, fixed)

        def result(output: T | str | None, reason: StopReason, steps: int) -> AgentResult[T]:
            if keeper is None:
                return AgentResult(output, reason, steps, usage, cost, messages, tool_calls)
            return AgentResult(
                output,
                reason,
                steps,
                usage + keeper.usage,
                cost + keeper.cost_usd,
                messages,
                tool_calls,
                keeper.compactions,
            )

        for step in range(1, self.max_steps + 1):
            if keeper is not None:
                messages[:] = await keeper.fit(messages, step)
            reply = await self._ask(messages, step, keeper)
            usage, cost = usage + reply.usage, cost + reply.cost_usd
            messages.append(reply.message)
            calls = reply.message.tool_calls
            if calls:
                tool_calls += len(calls)
                outcomes = await self._run_tools(calls, step)
                messages.extend(o.message for o in outcomes)
                summaries = [o.finish for o in outcomes if o.finish is not None]
                if summaries:
                    return result(summaries[0], "finish", step)
                continue
            text = reply.text
            if requires_finish:
                messages.append(Message.user("Use a tool, or call `finish(summary)` when done."))
                continue
            if self._adapter is None:
                return result(text, "final_answer", step)
            try:
                return result(self._parse_output(text), "final_answer", step)
            except ValidationError as exc:
                bad_outputs += 1
                if bad_outputs > self.max_output_retries:
                    raise self._behavior_error(exc, bad_outputs) from exc
                messages.append(Message.user(f"Your answer did not validate:\n{exc}\nTry again."))
        return result(None, "max_steps", self.max_steps)

    def _request(self, messages: list[Message], step: int) -> ChatRequest:
        return ChatRequest.model_construct(
            messages=list(messages),
            tools=self._specs,
            max_tokens=self.max_tokens,
            temperature=None,
            tool_choice=None,
            stream=True,
            metadata={**self._metadata, "step": str(step)},
        )

    async def _ask(
        self, messages: list[Message], step: int, keeper: Compactor | None
    ) -> ChatResult:
        """One model call; over the window, one compaction (in place) and one retry."""
        try:
            reply = await self.model.chat(self._request(messages, step))
        except ContextWindowExceeded as exc:
            compacted = None if keeper is None else await keeper.recover(messages, step, exc)
            if compacted is None:
                raise
            messages[:] = compacted
            reply = await self.model.chat(self._request(messages, step))
        if keeper is not None:
            keeper.observe(messages, reply.usage.input_tokens)
        return reply

    def _behavior_error(self, exc: ValidationError, attempts: int) -> ModelBehaviorError:
        kind = getattr(self.output_type, "__name__", str(self.output_type))
        problem = f"output is not a valid {kind}"
        for first in exc.errors()[:1]:
            where = ".".join(str(p) for p in first["loc"]) or "the reply"
            problem += f" ({exc.error_count()} errors; first at {where}: {first['msg']})"
        return ModelBehaviorError(problem, agent=self.name, attempts=attempts)

    def _parse_output(self, text: str) -> T:
        assert self._adapter is not None
        fenced = _FENCE.search(text)
        raw = fenced.group(1) if fenced else text
        if self.output_type is str:
            return cast(T, raw.strip())
        return self._adapter.validate_json(raw.strip())

    async def _run_tools(self, calls: Sequence[ToolCall], step: int) -> list[_Outcome]:
        outcomes: list[_Outcome | None] = [None] * len(calls)

        async def run_one(i: int, call: ToolCall) -> None:
            outcomes[i] = await self._run_tool(call, step)

        if len(calls) == 1:
            await run_one(0, calls[0])
        else:
            async with anyio.create_task_group() as tg:
                for i, call in enumerate(calls):
                    tg.start_soon(run_one, i, call, name=f"tool:{call.name}")
        return [o for o in outcomes if o is not None]

    async def _run_tool(self, call: ToolCall, step: int) -> _Outcome:
        attrs: dict[str, Any] = {
            sc.OPERATION: sc.OP_TOOL,
            sc.TOOL_NAME: call.name,
            sc.TOOL_CALL_ID: call.id,
            sc.ROLE: self.name,
            sc.STEP: step,
        }
        with tracer().start_as_current_span(f"{sc.OP_TOOL} {call.name}", attributes=attrs) as span:
            tool = self._by_name.get(call.name)
            if tool is None:
                known = ", ".join(sorted(self._by_name)) or "none"
                return _error(span, call, f"unknown tool {call.name!r}; available: {known}")
            if tool.takes_context and self.context is None:
                return _error(span, call, f"{call.name} needs a workspace; this agent has none")
            try:
                text = await tool.run(call.arguments, self.context)
            except Finish as done:
                return _Outcome(Message.tool(call, "finished"), finish=done.summary)
            except ToolError as exc:  # failures and bad arguments go back to the model
                return _error(span, call, str(exc))
            return _Outcome(Message.tool(call, text))


def _error(span: Span, call: ToolCall, text: str) -> _Outcome:
    span.set_status(Status(StatusCode.ERROR, text[:200]))
    span.set_attribute(sc.ERROR_TYPE, "tool_error")
    return _Outcome(Message.tool(call, f"error: {text}"))
