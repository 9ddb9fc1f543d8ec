"""Hooks: code that watches and steers an agent's run at each step; and approval decisions.

Subclass `Hooks` and override what you need; every method may return None to change
nothing. `before_model` may replace the request; `after_model` the reply; `before_tool`
may replace the call or return a `Veto` (the model reads the reason as the tool's
result); `after_tool` may replace the result's text; `on_step` may return a `Veto` to
end the run (`stop_reason == "vetoed"`). Several hooks run in order, each seeing the
previous one's changes. An exception in a hook propagates: the run ends with it.

A tool built with `@tool(requires_approval=True)` pauses the run before it runs; the
caller answers with `approvals`, a mapping from tool-call id to True (run it), False or a
`Veto` (tell the model it was denied, and why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from swarm.messages import ChatRequest, ChatResult, Message, ToolCall

__all__ = ["Approvals", "Hooks", "StepInfo", "Veto"]


@dataclass(frozen=True, slots=True)
class Veto:
    """Refuse a tool call (or, from `on_step`, the rest of the run), saying why."""

    reason: str


Approvals = Mapping[str, "bool | Veto"]
"""Decisions on tool calls that need approval, by tool-call id."""


@dataclass(frozen=True, slots=True)
class StepInfo:
    """Where a run is: the agent, the step (model call number) and its conversation."""

    agent: str
    step: int
    messages: list[Message]
    """The live conversation: read it; change it only knowingly (it is what is sent)."""


class Hooks:
    """Override any of these to watch or steer a run; the defaults change nothing."""

    async def on_step(self, info: StepInfo) -> Veto | None:
        """Before each step's model call; a `Veto` ends the run."""
        return None

    async def before_model(self, info: StepInfo, request: ChatRequest) -> ChatRequest | None:
        """Before a model call; return a request to send instead."""
        return None

    async def after_model(self, info: StepInfo, result: ChatResult) -> ChatResult | None:
        """After a model call; return a result to use instead."""
        return None

    async def before_tool(self, info: StepInfo, call: ToolCall) -> ToolCall | Veto | None:
        """Before a tool call; return a call to run instead, or a `Veto`."""
        return None

    async def after_tool(self, info: StepInfo, call: ToolCall, text: str) -> str | None:
        """After a tool call; return the text the model should read instead."""
        return None
