"""Hostile replies: every malformed shape is a typed ProviderError that fails over.

A tiny aiohttp server answers each shape of the corpus at `/{shape}/v1`; a router whose
tier holds it first and the simulator's HTTP server second must answer every call from
the second. Slow and keep-alive-only streams end by the token and total clocks.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from aiohttp import web

from swarm._routing.router import Router
from swarm._serve import serve_app
from swarm.config import ProviderConfig, RoutingConfig, SwarmConfig, TierConfig
from swarm.errors import ProviderError
from swarm.messages import ChatRequest, Message
from swarm.providers._openai import OpenAIProvider
from swarm.providers.sim import SimEngine
from swarm.providers.sim._server import serve_sim


def _chunk(delta: Any = None, **fields: Any) -> bytes:
    body = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}], **fields}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _whole(message: Any = None, **fields: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"id": "c", "model": "m", "choices": [choice], **fields}


OK_MESSAGE = {"role": "assistant", "content": "hi"}
TEXT = _chunk({"content": "hi"})
DONE = b"data: [DONE]\n\n"
FINISH = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'

WHOLE: dict[str, Any] = {
    "not-json": b"{not json",
    "a-list": [],
    "null": None,
    "choices-null": {"choices": None},
    "choices-empty": {"choices": []},
    "choices-string": {"choices": "x"},
    "choice-null": {"choices": [None]},
    "message-string": _whole("hello"),
    "content-int": _whole({"role": "assistant", "content": 5}),
    "tool-calls-dict": _whole({"role": "assistant", "tool_calls": {"id": "a"}}),
    "tool-call-function-null": _whole({"role": "assistant", "tool_calls": [{"function": None}]}),
    "tool-call-name-int": _whole(
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": 7}}]}
    ),
    "tool-call-args-object": _whole(
        {
            "role": "assistant",
            "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {"a": 1}}}],
        }
    ),
    "usage-string": _whole(OK_MESSAGE, usage="lots"),
    "usage-count-string": _whole(OK_MESSAGE, usage={"prompt_tokens": "12"}),
    "usage-negative": _whole(OK_MESSAGE, usage={"prompt_tokens": 1, "completion_tokens": -5}),
    "model-object": _whole(OK_MESSAGE, model={"name": "m"}),
}
STREAM: dict[str, list[bytes]] = {
    "sse-not-json": [b"data: {not json\n\n", DONE],
    "sse-chunk-list": [b"data: [1, 2]\n\n", DONE],
    "sse-delta-string": [_chunk("hello"), FINISH, DONE],
    "sse-content-int": [_chunk({"content": 5}), FINISH, DONE],
    "sse-tool-calls-dict": [_chunk({"tool_calls": {"index": 0}}), FINISH, DONE],
    "sse-tool-call-index-list": [_chunk({"tool_calls": [{"index": [0]}]}), FINISH, DONE],
    "sse-finish-int": [TEXT, _chunk({}, choices=[{"delta": {}, "finish_reason": 3}]), DONE],
    "sse-error-string": [TEXT, b'data: {"error": "boom"}\n\n'],
    "sse-cut-off": [TEXT, TEXT],  # neither finish_reason nor [DONE]: not complete
    "sse-empty": [],
    "sse-huge-event": [b"data: " + b"x" * (17 * 1024 * 1024)],
}


HITS = web.AppKey("hits", list[str])


async def _serve_shape(request: web.Request) -> web.StreamResponse:
    shape = request.match_info["shape"]
    request.app[HITS].append(shape)
    if shape in WHOLE:
        body = WHOLE[shape]
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return web.Response(body=raw, content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if shape == "keep-alive":
        for _ in range(200):
            await resp.write(b": keep-alive\n\n")
            await anyio.sleep(0.05)
    elif shape == "slow-tokens":
        for _ in range(200):
            await resp.write(TEXT)
            await anyio.sleep(0.3)
    for part in STREAM.get(shape, []):
        await resp.write(part)
    await resp.write_eof()
    return resp


@asynccontextmanager
async def hostile() -> AsyncIterator[tuple[str, list[str]]]:
    app = web.Application()
    hits: list[str] = []
    app[HITS] = hits
    app.router.add_post("/{shape}/v1/chat/completions", _serve_shape)
    async with serve_app(app) as url:
        yield url, hits


def ask(stream: bool) -> ChatRequest:
    return ChatRequest(messages=[Message.user("hi")], max_tokens=8, stream=stream)


CORPUS = [(shape, False) for shape in WHOLE] + [(shape, True) for shape in STREAM]


def test_the_corpus_is_large() -> None:
    assert len(CORPUS) >= 21


@pytest.mark.parametrize(("shape", "stream"), CORPUS)
async def test_every_hostile_shape_is_a_malformed_provider_error(shape: str, stream: bool) -> None:
    async with hostile() as (url, _):
        provider = OpenAIProvider("bad", f"{url}/{shape}/v1", stall_timeout_s=5)
        try:
            with pytest.raises(ProviderError) as info:
                await provider.chat("m", ask(stream))
        finally:
            await provider.aclose()
    # a reply over the size bounds would be as large again: it fails over, not retried
    assert info.value.retryable is ("huge" not in shape)
    assert info.value.kind in ("malformed", "http")  # an error event is the server's own


async def test_every_hostile_shape_fails_over_to_the_healthy_provider() -> None:
    async with hostile() as (url, hits), serve_sim(SimEngine(time_scale=0)) as good_url:
        providers = {
            shape: ProviderConfig(kind="openai", base_url=f"{url}/{shape}/v1")
            for shape, _ in CORPUS
        }
        providers["good"] = ProviderConfig(kind="openai", base_url=good_url)
        routing = RoutingConfig(max_attempts=1, hedge=False)
        for shape, stream in CORPUS:
            config = SwarmConfig(
                providers=providers,
                tiers={"speed": TierConfig(models=[f"{shape}/m", "good/m"])},
                routing=routing,
            )
            async with Router(config, env={}) as router:
                result = await router.chat(ask(stream))
            assert result.provider == "good", shape
    assert hits == [shape for shape, _ in CORPUS]  # each hostile server got its one call


@pytest.mark.parametrize(("shape", "kind"), [("keep-alive", "stall"), ("slow-tokens", "timeout")])
async def test_slow_streams_end_by_the_token_and_total_clocks(shape: str, kind: str) -> None:
    async with hostile() as (url, _):
        provider = OpenAIProvider(
            "slow", f"{url}/{shape}/v1", stall_timeout_s=5, token_timeout_s=0.5, total_timeout_s=1.5
        )
        try:
            with anyio.fail_after(10), pytest.raises(ProviderError) as info:
                await provider.chat("m", ask(True))
        finally:
            await provider.aclose()
    assert (info.value.kind, info.value.retryable) == (kind, True)


def _event(body: Any) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


START = _event({"type": "message_start", "message": {"model": "m", "usage": {}}})
STOP = _event({"type": "message_stop"})
ANTHROPIC: dict[str, list[bytes]] = {
    "delta-null": [START, _event({"type": "content_block_delta", "delta": None}), STOP],
    "text-int": [
        START,
        _event({"type": "content_block_delta", "delta": {"type": "text_delta", "text": 5}}),
        STOP,
    ],
    "message-string": [_event({"type": "message_start", "message": "m"}), STOP],
    "block-missing": [START, _event({"type": "content_block_start", "index": 0}), STOP],
    "usage-list": [START, _event({"type": "message_delta", "usage": [1]}), STOP],
    "tool-name-null": [
        START,
        _event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "t", "name": None},
            }
        ),
        STOP,
    ],
    "tool-index-string": [
        START,
        _event(
            {
                "type": "content_block_start",
                "index": "zero",
                "content_block": {"type": "tool_use", "id": "t", "name": "f"},
            }
        ),
        STOP,
    ],
    "event-list": [b"data: [1]\n\n"],
    "no-stop": [
        START,
        _event({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}}),
    ],
}


@pytest.mark.parametrize("shape", list(ANTHROPIC))
async def test_hostile_anthropic_events_are_malformed_provider_errors(shape: str) -> None:
    from swarm.providers._anthropic import AnthropicProvider

    async def messages(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in ANTHROPIC[shape]:
            await resp.write(part)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    async with serve_app(app) as url:
        provider = AnthropicProvider("bad", url, api_key="k", stall_timeout_s=5)
        try:
            with pytest.raises(ProviderError) as info:
                await provider.chat("m", ask(True))
        finally:
            await provider.aclose()
    assert (info.value.kind, info.value.retryable) == ("malformed", True)
