"""AnthropicProvider against a loopback server that streams as the Messages API does."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from aiohttp import web

from swarm._serve import serve_app as serve
from swarm.errors import ProviderError, RateLimited
from swarm.messages import ChatRequest, Message, ToolCall, ToolSpec
from swarm.providers._anthropic import AnthropicProvider, to_anthropic

SECRET = "sk-ant-test-very-secret-42"


def event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def start(input_tokens: int = 20, cached: int = 100) -> bytes:
    usage = {"input_tokens": input_tokens, "cache_read_input_tokens": cached, "output_tokens": 1}
    return event(
        "message_start",
        message={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-served",
            "stop_reason": None,
            "usage": usage,
        },
    )


def stop(reason: str, output_tokens: int) -> list[bytes]:
    return [
        event(
            "message_delta",
            delta={"stop_reason": reason, "stop_sequence": None},
            usage={"output_tokens": output_tokens},
        ),
        event("message_stop"),
    ]


TEXT = [
    start(),
    event("ping"),
    event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hello"}),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "!"}),
    event("content_block_stop", index=0),
    *stop("end_turn", 15),
]
TOOLS = [
    start(),
    event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Reading."}),
    event("content_block_stop", index=0),
    event(
        "content_block_start",
        index=1,
        content_block={"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}},
    ),
    event("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ""}),
    event(
        "content_block_delta",
        index=1,
        delta={"type": "input_json_delta", "partial_json": '{"path": "a'},
    ),
    event(
        "content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '.py"}'}
    ),
    event("content_block_stop", index=1),
    *stop("tool_use", 30),
]


class State:
    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []


def make_app(state: State) -> web.Application:
    async def messages(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state.requests.append((dict(request.headers), body))
        scenario = body["model"]
        if scenario == "429":
            error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
            return web.json_response(error, status=429, headers={"retry-after": "3"})
        if scenario.isdigit():
            error = {"type": "error", "error": {"type": "x_error", "message": f"boom {scenario}"}}
            return web.json_response(error, status=int(scenario))
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "msg_2",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-served",
                    "content": [{"type": "text", "text": "Whole."}],
                    "stop_reason": "max_tokens",
                    "usage": {"input_tokens": 5, "output_tokens": 7},
                },
                headers={
                    "anthropic-ratelimit-requests-remaining": "49",
                    "anthropic-ratelimit-tokens-remaining": "1000",
                },
            )
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        if scenario == "stall":
            await resp.write(TEXT[0])
            await anyio.sleep(30)
        elif scenario == "overloaded":
            await resp.write(TEXT[0])
            await resp.write(event("error", error={"type": "overloaded_error", "message": "busy"}))
        elif scenario == "malformed":
            await resp.write(TEXT[0] + b"event: ping\ndata: {oops\n\n")
        else:
            for part in TOOLS if scenario == "tools" else TEXT:
                await resp.write(part)
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    return app


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, State]]:
    state = State()
    async with serve(make_app(state)) as url:
        yield url, state


@pytest.fixture
async def provider(server: tuple[str, State]) -> AsyncIterator[AnthropicProvider]:
    p = AnthropicProvider("anthropic", server[0], api_key=SECRET, stall_timeout_s=0.5)
    try:
        yield p
    finally:
        await p.aclose()


def ask(**kw: Any) -> ChatRequest:
    return ChatRequest(messages=[Message.system("be brief"), Message.user("hi")], **kw)


async def test_streams_text_with_usage(
    provider: AnthropicProvider, server: tuple[str, State]
) -> None:
    firsts: list[int] = []
    result = await provider.chat("claude", ask(), on_first_token=lambda: firsts.append(1))
    assert result.text == "Hello!"
    assert result.finish_reason == "stop"
    assert result.usage.model_dump() == {
        "input_tokens": 120,  # ours counts cache reads in input_tokens; Anthropic's does not
        "output_tokens": 15,
        "reasoning_tokens": 0,
        "cached_input_tokens": 100,
    }
    assert firsts == [1]
    assert 0 < result.timing.ttft_s <= result.timing.duration_s
    assert result.model == "claude-served"
    headers, body = server[1].requests[-1]
    assert headers["x-api-key"] == SECRET
    assert headers["anthropic-version"] == "2023-06-01"
    assert body["system"] == "be brief"
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 4096 and body["stream"] is True


async def test_tool_use_and_tool_translation(
    provider: AnthropicProvider, server: tuple[str, State]
) -> None:
    call = ToolCall(id="toolu_0", name="run", arguments='{"command": "ls"}')
    request = ChatRequest(
        messages=[
            Message.user("go"),
            Message.assistant("Running.", [call]),
            Message.tool(call, "a.py"),
        ],
        tools=[ToolSpec(name="read_file", description="Read a file")],
        tool_choice="required",
        max_tokens=256,
    )
    result = await provider.chat("tools", request)
    assert result.finish_reason == "tool_calls"
    assert result.text == "Reading."
    assert result.message.tool_calls == [
        ToolCall(id="toolu_1", name="read_file", arguments='{"path": "a.py"}')
    ]
    assert result.usage.output_tokens == 30
    body = server[1].requests[-1][1]
    assert body["tools"] == [
        {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}
    ]
    assert body["tool_choice"] == {"type": "any"}
    assert body["max_tokens"] == 256
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running."},
                {"type": "tool_use", "id": "toolu_0", "name": "run", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "a.py"}],
        },
    ]


def test_consecutive_tool_results_and_user_text_share_one_user_turn() -> None:
    a = ToolCall(id="t1", name="x")
    b = ToolCall(id="t2", name="y")
    system, messages = to_anthropic(
        [
            Message.system("s1"),
            Message.system("s2"),
            Message.assistant(None, [a, b]),
            Message.tool(a, "ra"),
            Message.tool(b, "rb"),
            Message.user("next"),
        ]
    )
    assert system == "s1\n\ns2"
    assert [m["role"] for m in messages] == ["assistant", "user"]
    assert [blk["type"] for blk in messages[1]["content"]] == ["tool_result", "tool_result", "text"]


async def test_non_streamed_reply(provider: AnthropicProvider) -> None:
    result = await provider.chat("whole", ask(stream=False))
    assert result.text == "Whole."
    assert result.finish_reason == "length"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (5, 7)
    assert result.rate_limit is not None
    assert (result.rate_limit.remaining_requests, result.rate_limit.remaining_tokens) == (49, 1000)


async def test_429_is_rate_limited(provider: AnthropicProvider) -> None:
    with pytest.raises(RateLimited) as info:
        await provider.chat("429", ask())
    assert info.value.retry_after == 3 and "slow down" in str(info.value)


@pytest.mark.parametrize(("status", "retryable"), [(529, True), (500, True), (400, False)])
async def test_http_errors(provider: AnthropicProvider, status: int, retryable: bool) -> None:
    with pytest.raises(ProviderError) as info:
        await provider.chat(str(status), ask())
    assert (info.value.status, info.value.retryable) == (status, retryable)
    assert f"boom {status}" in str(info.value)


async def test_overloaded_event_mid_stream_is_retryable(provider: AnthropicProvider) -> None:
    with pytest.raises(ProviderError) as info:
        await provider.chat("overloaded", ask())
    assert info.value.retryable and "busy" in str(info.value)


async def test_stall_and_malformed(provider: AnthropicProvider) -> None:
    started = time.perf_counter()
    with pytest.raises(ProviderError) as stalled:
        await provider.chat("stall", ask())
    assert stalled.value.kind == "stall" and time.perf_counter() - started < 10
    with pytest.raises(ProviderError) as malformed:
        await provider.chat("malformed", ask())
    assert (malformed.value.kind, malformed.value.retryable) == ("malformed", True)


async def test_connection_refused_and_secret_kept_out() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = AnthropicProvider("a", f"http://127.0.0.1:{port}", api_key=SECRET)
    try:
        with pytest.raises(ProviderError) as info:
            await p.chat("claude", ask())
    finally:
        await p.aclose()
    assert (info.value.kind, info.value.retryable) == ("connect", True)
    assert SECRET not in str(info.value) and SECRET not in repr(p)


async def test_default_base_url_and_headers_via_mock_transport() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"".join(TEXT)
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    p = AnthropicProvider("anthropic", api_key=SECRET, client=client)
    assert (await p.chat("claude", ask())).text == "Hello!"
    await p.aclose()
    await client.aclose()
    assert str(seen[0].url) == "https://api.anthropic.com/v1/messages"
    assert seen[0].headers["x-api-key"] == SECRET
    assert p.address == "api.anthropic.com" and p.kind == "anthropic"
