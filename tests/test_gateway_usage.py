"""Usage and timing read from the chunk shapes OpenAI-compatible gateways really send.

Each file in `fixtures/gateways` is a stream recorded in the shape one gateway or server
sends (LiteLLM proxy, OpenRouter, vLLM, Ollama, llama.cpp, Groq); a loopback server replays
it event by event and the OpenAI adapter must report the counts the stream carried, not an
estimate. Tokens per second only where the tokens really arrived over time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from aiohttp import web

from swarm._serve import serve_app
from swarm.messages import ChatRequest, Message
from swarm.providers._anthropic import AnthropicProvider
from swarm.providers._openai import OpenAIProvider

FIXTURES = Path(__file__).parent / "fixtures" / "gateways"

# gateway -> (input, output, reasoning, cached) the recorded stream carries
EXPECTED = {
    "litellm": (8, 14, 0, 0),
    "openrouter": (14404, 2891, 2670, 12288),
    "vllm": (31, 6, 0, 0),
    "ollama": (26, 9, 0, 0),
    "llamacpp": (18, 9, 0, 0),
    "groq": (40, 12, 0, 0),
}
TEXT = {"openrouter": "Paris.", "vllm": "Paris.", "litellm": "Paris is the capital of France."}


async def replay(request: web.Request) -> web.StreamResponse:
    """The recorded stream named by the request's model, an event per network write."""
    body = await request.json()
    events = (FIXTURES / f"{body['model']}.sse").read_bytes().split(b"\n\n")
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for event in events:
        if event.strip():
            await response.write(event + b"\n\n")
            await anyio.sleep(0.005)
    return response


async def whole_message(request: web.Request) -> web.Response:
    """An Anthropic message sent whole although the request asked for a stream."""
    await request.read()
    message = {
        "id": "msg_01XyZ",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Paris is the capital of France."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 21, "output_tokens": 3698, "cache_read_input_tokens": 0},
    }
    return web.json_response(message)


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", replay)
    app.router.add_post("/v1/messages", whole_message)
    async with serve_app(app) as url:
        yield f"{url}/v1"


def ask() -> ChatRequest:
    return ChatRequest(messages=[Message.user("What is the capital of France?")])


@pytest.mark.parametrize("gateway", sorted(EXPECTED))
async def test_usage_is_read_from_each_gateways_stream(base_url: str, gateway: str) -> None:
    provider = OpenAIProvider(gateway, base_url, api_key="sk-test")
    try:
        result = await provider.chat(gateway, ask())
    finally:
        await provider.aclose()
    u = result.usage
    got = (u.input_tokens, u.output_tokens, u.reasoning_tokens, u.cached_input_tokens)
    assert got == EXPECTED[gateway]
    assert result.text == TEXT.get(gateway, "Paris is the capital.")
    assert result.finish_reason == "stop"
    assert result.timing.timed and result.tokens_per_s > 0


async def test_provider_figures_are_kept(base_url: str) -> None:
    provider = OpenAIProvider("gw", base_url)
    try:
        groq = await provider.chat("groq", ask())
        llamacpp = await provider.chat("llamacpp", ask())
        openrouter = await provider.chat("openrouter", ask())
    finally:
        await provider.aclose()
    assert groq.extras["x_groq"]["queue_time"] == 0.021
    assert llamacpp.extras["timings"]["predicted_per_second"] == 80.14
    assert openrouter.extras["reasoning"] == "The user asks for a capital."


async def test_a_whole_reply_to_a_streamed_request_has_no_decode_rate(base_url: str) -> None:
    provider = AnthropicProvider("anthropic", base_url, api_key="sk-ant-test")
    firsts: list[int] = []
    try:
        result = await provider.chat(
            "claude-sonnet-4-5", ask(), on_first_token=lambda: firsts.append(1)
        )
    finally:
        await provider.aclose()
    assert result.text == "Paris is the capital of France." and firsts == [1]
    assert result.usage.output_tokens == 3698
    assert not result.timing.timed
    assert result.timing.ttft_s == result.timing.duration_s  # the first token came at the end
    assert result.tokens_per_s == 0.0


def test_the_fixtures_are_json_event_streams() -> None:
    for name in EXPECTED:
        for event in (FIXTURES / f"{name}.sse").read_text().split("\n\n"):
            data = [line[6:] for line in event.splitlines() if line.startswith("data: ")]
            if data and data[0] != "[DONE]":
                assert isinstance(json.loads("\n".join(data)), dict), (name, event)
