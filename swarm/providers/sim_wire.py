"""The simulator server's side of the OpenAI wire format: a request body read into a
`ChatRequest` (leniently, as endpoints do), and a plan's `usage` object (`usage_of`)."""

from __future__ import annotations

from typing import Any, Literal

from swarm.messages import ChatRequest, Message, ToolCall, ToolSpec
from swarm.providers.sim_engine import SimPlan

__all__ = ["to_request", "usage_of"]

_TOOL_CHOICES: dict[Any, Literal["auto", "required", "none"]] = {
    c: c for c in ("auto", "required", "none")
}


def _content(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return "".join(p.get("text", "") for p in value if isinstance(p, dict))  # content parts


def to_request(body: dict[str, Any]) -> ChatRequest:
    messages = []
    for m in body["messages"]:
        calls = [
            ToolCall.model_construct(
                id=c.get("id", ""),
                name=c["function"]["name"],
                arguments=c["function"].get("arguments") or "{}",
            )
            for c in m.get("tool_calls") or ()
        ]
        messages.append(
            Message.model_construct(
                role=m["role"],
                content=_content(m.get("content")),
                tool_calls=calls,
                tool_call_id=m.get("tool_call_id"),
                name=m.get("name"),
            )
        )
    tools = [
        ToolSpec.model_construct(
            name=t["function"]["name"],
            description=t["function"].get("description", ""),
            parameters=t["function"].get("parameters") or {"type": "object"},
        )
        for t in body.get("tools") or ()
    ]
    metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
    choice = body.get("tool_choice")
    if isinstance(choice, dict):  # {"type": "function", "function": {"name": ...}}
        metadata.setdefault("sim.tool", choice.get("function", {}).get("name", ""))
        choice = "required"
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    return ChatRequest.model_construct(
        messages=messages,
        tools=tools,
        max_tokens=int(max_tokens) if max_tokens is not None else None,
        temperature=body.get("temperature"),
        tool_choice=_TOOL_CHOICES.get(choice) if isinstance(choice, str) else None,
        stream=bool(body.get("stream", False)),
        metadata=metadata,
    )


def usage_of(plan: SimPlan) -> dict[str, Any]:
    completion = plan.output_tokens + plan.reasoning_tokens
    return {
        "prompt_tokens": plan.input_tokens,
        "completion_tokens": completion,
        "total_tokens": plan.input_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
    }
