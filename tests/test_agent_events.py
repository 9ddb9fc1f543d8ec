"""Agent events (order, content, streamed deltas), hooks, and model settings on the wire."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import anyio
import httpx
import pytest

from swarm import Agent, AgentResult, ChatRequest, ChatResult, ToolCall
from swarm.agent.events import (
    FinishEvent,
    ModelRequestEvent,
    ModelResponseEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
)
from swarm.agent.hooks import Hooks, StepInfo, Veto
from swarm.messages import ModelSettings
from swarm.model import Delta, DeltaSink, Model, Streamed, streamed
from swarm.providers._anthropic import AnthropicProvider
from swarm.providers._openai import OpenAIProvider
from swarm.testing import ScriptedModel, call
from tests.test_agent import add


async def test_iter_yields_typed_events_in_order() -> None:
    model = ScriptedModel([call("add", a=2, b=3), "five"])
    agent: Agent[str] = Agent("calc", model, tools=[add])
    kinds: list[str] = []
    async with agent.iter("add 2 and 3") as run:
        events = [e async for e in run]
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "ModelRequestEvent",
        "ModelResponseEvent",
        "ToolCallEvent",
        "ToolResultEvent",
        "ModelRequestEvent",
        "TextDelta",
        "ModelResponseEvent",
        "FinishEvent",
    ]
    result_event = events[3]
    assert isinstance(result_event, ToolResultEvent) and result_event.text == "5"
    assert isinstance(events[2], ToolCallEvent) and events[2].call.name == "add"
    assert isinstance(events[4], ModelRequestEvent) and events[4].step == 2
    assert events[4].request.messages[-1].content == "5"
    assert isinstance(events[5], TextDelta) and events[5].text == "five"
    last = events[-1]
    assert isinstance(last, FinishEvent) and last.result.output == "five"
    assert run.result is not None and run.result.stop_reason == "final_answer"


async def test_run_on_event_sees_the_same_events_as_iter() -> None:
    seen: list[object] = []
    agent: Agent[str] = Agent("calc", ScriptedModel([call("add", a=1, b=1), "two"]), tools=[add])
    result = await agent.run("1+1", on_event=seen.append)
    assert result.output == "two"
    assert [type(e).__name__ for e in seen][-1] == "FinishEvent"
    assert sum(isinstance(e, ModelResponseEvent) for e in seen) == 2


def _sse(*chunks: dict[str, object]) -> list[bytes]:
    return [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]


async def test_text_deltas_stream_to_the_caller_as_they_arrive() -> None:
    """The server sends its second chunk only after the caller has seen the first."""
    first_seen = anyio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield _sse({"model": "m", "choices": [{"delta": {"content": "Hel"}}]})[0]
        with anyio.fail_after(5):
            await first_seen.wait()
        for part in _sse(
            {"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        ):
            yield part
        yield b"data: [DONE]\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = OpenAIProvider("mock", "https://example.test/v1", client=client)
        agent: Agent[str] = Agent("greeter", _ProviderModel(provider))
        deltas: list[str] = []
        async with agent.iter("hi") as run:
            async for event in run:
                if isinstance(event, TextDelta):
                    deltas.append(event.text)
                    first_seen.set()
        await provider.aclose()
    assert deltas == ["Hel", "lo"]
    assert run.result is not None and run.result.output == "Hello"


class _ProviderModel(Model):
    """A provider as a model, without the router (the seam the test exercises is the wire)."""

    name = "provider"

    def __init__(self, provider: OpenAIProvider | AnthropicProvider) -> None:
        self.provider = provider

    def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        def call(sink: DeltaSink) -> Awaitable[ChatResult]:
            return self.provider.chat("m", request, on_delta=lambda k, t: sink(Delta(k, t)))

        return streamed(call)


class _Guard(Hooks):
    def __init__(self) -> None:
        self.models = 0

    async def before_tool(self, info: StepInfo, call: ToolCall) -> ToolCall | Veto | None:
        if call.name == "add" and json.loads(call.arguments)["a"] < 0:
            return Veto("negative numbers are not allowed")
        return None

    async def before_model(self, info: StepInfo, request: ChatRequest) -> ChatRequest | None:
        self.models += 1
        return request.model_copy(update={"temperature": 0.25})

    async def after_tool(self, info: StepInfo, call: ToolCall, text: str) -> str | None:
        return f"[{info.step}] {text}"


async def test_a_hook_vetoes_a_tool_call_and_rewrites_requests_and_results() -> None:
    model = ScriptedModel([[call("add", a=-1, b=2), call("add", a=1, b=2)], "done"])
    guard = _Guard()
    agent: Agent[str] = Agent("calc", model, tools=[add], hooks=[guard])
    result = await agent.run("add things")
    tool_texts = [m.content for m in result.messages if m.role == "tool"]
    assert tool_texts == [  # a refused call stops the rest of its reply, as a failed one does
        "[1] error: vetoed: negative numbers are not allowed",
        "[1] error: not run: `add` before it in your reply failed",
    ]
    assert guard.models == 2
    assert [r.temperature for r in model.requests] == [0.25, 0.25]


class _StopAfterOne(Hooks):
    async def on_step(self, info: StepInfo) -> Veto | None:
        return Veto("one step is enough") if info.step > 1 else None


async def test_on_step_can_end_the_run() -> None:
    model = ScriptedModel([call("add", a=1, b=2)])
    result: AgentResult[str] = await Agent("calc", model, tools=[add], hooks=[_StopAfterOne()]).run(
        "go"
    )
    assert (result.stop_reason, result.output, result.steps) == ("vetoed", "one step is enough", 1)
    assert not result.finished


SETTINGS = ModelSettings(
    temperature=0.2,
    top_p=0.9,
    max_tokens=3000,
    reasoning_effort="high",
    tool_choice="required",
    parallel_tool_calls=False,
)


def _capture(bodies: list[dict[str, object]], stream: list[bytes]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"".join(stream)
        )

    return httpx.MockTransport(handler)


async def test_model_settings_reach_the_openai_wire() -> None:
    bodies: list[dict[str, object]] = []
    stream = _sse(
        {"model": "m", "choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}
    )
    async with httpx.AsyncClient(transport=_capture(bodies, stream)) as client:
        provider = OpenAIProvider("mock", "https://example.test/v1", client=client)
        agent: Agent[str] = Agent("a", _ProviderModel(provider), tools=[add], settings=SETTINGS)
        assert (await agent.run("hi")).output == "ok"
        await provider.aclose()
    body = bodies[0]
    assert {k: body[k] for k in ("temperature", "top_p", "max_tokens")} == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 3000,
    }
    assert body["reasoning_effort"] == "high"
    assert body["tool_choice"] == "required"
    assert body["parallel_tool_calls"] is False


async def test_model_settings_reach_the_anthropic_wire() -> None:
    bodies: list[dict[str, object]] = []
    events = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ]
    stream = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
    async with httpx.AsyncClient(transport=_capture(bodies, stream)) as client:
        provider = AnthropicProvider("mock", api_key="k", client=client)
        agent: Agent[str] = Agent("a", _ProviderModel(provider), tools=[add], settings=SETTINGS)
        assert (await agent.run("hi")).output == "ok"
        await provider.aclose()
    body = bodies[0]
    assert body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 24576}
    assert body["max_tokens"] == 24576 + 4096  # room for an answer after the thinking
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


async def test_agent_max_tokens_and_settings_merge() -> None:
    model = ScriptedModel(["a", "b"])
    await Agent("a", model, max_tokens=50).run("x")
    await Agent("a", model, max_tokens=50, settings=ModelSettings(max_tokens=70)).run("x")
    assert [r.max_tokens for r in model.requests] == [50, 70]


@pytest.mark.parametrize("steps", [0, -1])
def test_bad_max_steps_is_a_usage_error(steps: int) -> None:
    from swarm.errors import UsageError

    with pytest.raises(UsageError, match="max_steps must be at least 1"):
        Agent("a", ScriptedModel([]), max_steps=steps)


def test_model_settings_per_role_come_from_the_config(tmp_path: Path) -> None:
    from swarm import load_config
    from swarm.errors import ConfigError

    path = tmp_path / "swarm.toml"
    path.write_text('[settings.coder]\ntemperature = 0.1\nreasoning_effort = "low"\n')
    cfg = load_config(path, env={})
    assert cfg.settings["coder"] == ModelSettings(temperature=0.1, reasoning_effort="low")
    path.write_text("[settings.coder]\ntemprature = 0.1\n")
    with pytest.raises(ConfigError, match="temprature"):
        load_config(path, env={})


async def test_iter_raises_the_run_error_itself_and_can_be_left_early() -> None:
    from pydantic import BaseModel

    from swarm import ModelBehaviorError

    class Out(BaseModel):
        n: int

    agent: Agent[Out] = Agent(
        "a", ScriptedModel(["x", "y", "z"]), output_type=Out, max_output_retries=1
    )
    seen: list[object] = []

    async def watch() -> None:
        async with agent.iter("go") as run:
            async for event in run:
                seen.append(event)

    with pytest.raises(ModelBehaviorError):
        await watch()
    assert len(seen) == 6  # two requests, texts and responses, then the error

    slow: Agent[str] = Agent("b", ScriptedModel([call("add", a=1, b=1)] * 5), tools=[add])
    async with slow.iter("go") as left:
        async for event in left:
            if isinstance(event, ToolResultEvent):
                break  # leaving early cancels the run
    assert left.result is None
