"""The simulator's OpenAI-compatible HTTP server, over real loopback HTTP."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam

from swarm.catalog import LatencyProfile
from swarm.errors import ConfigError
from swarm.providers.sim import Faults, SimEngine, default_script
from swarm.providers.sim._server import serve_sim

FAST = LatencyProfile(ttft_s=0.0, output_tps=1e9, prefill_tps=1e12, jitter=0.0)
# slow enough that a reply spans many 15 ms ticks
PACED = LatencyProfile(ttft_s=0.0, output_tps=400, prefill_tps=1e12, jitter=0.0)
TOOLS: list[ChatCompletionFunctionToolParam] = [
    {
        "type": "function",
        "function": {"name": "edit_file", "description": "edit", "parameters": {"type": "object"}},
    }
]
EDIT_ARGS = {"path": "src/app.py", "old": " ".join(["x"] * 40), "new": " ".join(["y"] * 40)}


@asynccontextmanager
async def sim_client(**engine: Any) -> AsyncIterator[httpx.AsyncClient]:
    engine.setdefault("profile", FAST)
    async with (
        serve_sim(SimEngine(**engine)) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as client,
    ):
        yield client


def body(**extra: Any) -> dict[str, Any]:
    """A request body; with `max_tokens`, the answer is asked to be that long (`sim.tokens`
    in OpenAI's `metadata`), as these tests need an exact length."""
    if extra.get("max_tokens") is not None and "metadata" not in extra:
        extra["metadata"] = {"sim.tokens": str(extra["max_tokens"])}
    return {"model": "sim-model", "messages": [{"role": "user", "content": "hi there"}], **extra}


async def sse_events(client: httpx.AsyncClient, payload: dict[str, Any]) -> list[str]:
    events = []
    async with client.stream("POST", "/chat/completions", json=payload) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    return events


async def test_non_stream_shape() -> None:
    async with sim_client() as client:
        resp = await client.post("/chat/completions", json=body(max_tokens=12))
    assert resp.status_code == 200
    data = resp.json()
    assert data["id"].startswith("chatcmpl-")
    assert (data["object"], data["model"]) == ("chat.completion", "sim-model")
    assert isinstance(data["created"], int)
    (choice,) = data["choices"]
    assert (choice["index"], choice["finish_reason"]) == (0, "stop")
    assert choice["message"]["role"] == "assistant"
    assert len(choice["message"]["content"].split()) == 12
    assert data["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 12,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


async def test_stream_shape_usage_and_pacing() -> None:
    async with sim_client(profile=PACED) as client:
        events = await sse_events(
            client, body(max_tokens=100, stream=True, stream_options={"include_usage": True})
        )
        no_usage = await sse_events(client, body(max_tokens=5, stream=True))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    *content, finish, usage = chunks
    assert content[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert len(text.split()) == 100
    # 100 tokens at 400 tok/s = 0.25 s: paced in ~15 ms ticks, not one chunk per token
    assert 5 <= len(content) <= 25
    assert finish["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 100
    assert all("usage" not in json.loads(e) for e in no_usage[:-1])


async def test_streamed_tool_call_arguments_reassemble() -> None:
    meta = {"sim.tool": "edit_file", "sim.args": json.dumps(EDIT_ARGS)}
    async with sim_client(profile=PACED) as client:
        events = await sse_events(client, body(stream=True, tools=TOOLS, metadata=meta))
    chunks = [json.loads(e) for e in events[:-1]]
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[:-1]]
    assert len(calls) > 3  # the arguments arrive split over several chunks
    assert calls[0]["id"] and calls[0]["function"]["name"] == "edit_file"
    assert all(c["index"] == 0 for c in calls)
    assert all("id" not in c for c in calls[1:])
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == EDIT_ARGS
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_profile_latency_per_model_name() -> None:
    slow = LatencyProfile(ttft_s=0.4, output_tps=1e9, jitter=0.0)
    async with sim_client(profile=slow) as client:
        start = time.perf_counter()
        await client.post("/chat/completions", json=body(max_tokens=5))
        default_s = time.perf_counter() - start
        start = time.perf_counter()
        await client.post(
            "/chat/completions", json=body(model="cerebras/llama-3.3-70b", max_tokens=5)
        )
        catalog_s = time.perf_counter() - start
    assert 0.35 < default_s < 3
    assert catalog_s < 0.35  # cerebras llama: ~0.15 s to first token


async def test_models_and_health() -> None:
    async with sim_client() as client:
        health = (await client.get("/../health")).json()
        models = (await client.get("/models")).json()
    assert health["status"] == "ok"
    ids = {m["id"] for m in models["data"]}
    assert {"cerebras/kimi-k2.6", "groq/llama-3.3-70b"} <= ids
    assert models["object"] == "list"


async def test_bad_request_is_a_400_in_openai_shape() -> None:
    async with sim_client() as client:
        resp = await client.post("/chat/completions", content=b"{nope")
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"


async def test_rate_limit_headers_when_configured() -> None:
    engine = SimEngine(profile=FAST)
    async with serve_sim(engine, remaining_requests=99, remaining_tokens=5000) as url:
        async with httpx.AsyncClient() as client:
            resp = await client.post(f"{url}/chat/completions", json=body())
    assert resp.headers["x-ratelimit-remaining-requests"] == "99"
    assert resp.headers["x-ratelimit-remaining-tokens"] == "5000"
    async with sim_client() as client:
        resp = await client.post("/chat/completions", json=body())
    assert "x-ratelimit-remaining-requests" not in resp.headers


async def test_http_error_faults() -> None:
    async with sim_client(faults=Faults(error_rate=1.0)) as client:
        resp = await client.post("/chat/completions", json=body(stream=True))
    assert resp.status_code == 500
    assert resp.json()["error"]["type"] == "server_error"
    async with sim_client(faults=Faults(rate_limit_rate=1.0, retry_after_s=3)) as client:
        resp = await client.post("/chat/completions", json=body())
    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "3"
    assert resp.json()["error"]["code"] == "rate_limit_exceeded"


async def test_dropped_connection_mid_stream() -> None:
    async with sim_client(profile=PACED, faults=Faults(drop_rate=1.0)) as client:
        with pytest.raises(httpx.TransportError):
            await sse_events(client, body(max_tokens=100, stream=True))
        with pytest.raises(httpx.TransportError):
            await client.post("/chat/completions", json=body(max_tokens=100))


async def test_stalled_stream_keeps_the_connection_open() -> None:
    async with sim_client(profile=PACED, faults=Faults(stall_rate=1.0)) as client:
        with pytest.raises(httpx.ReadTimeout):
            await read_stream(client, body(max_tokens=100, stream=True))


async def read_stream(client: httpx.AsyncClient, payload: dict[str, Any]) -> None:
    timeout = httpx.Timeout(5, read=0.3)
    async with client.stream("POST", "/chat/completions", json=payload, timeout=timeout) as r:
        async for _ in r.aiter_lines():
            pass


async def test_malformed_chunk() -> None:
    async with sim_client(profile=PACED, faults=Faults(malformed_rate=1.0)) as client:
        events = await sse_events(client, body(max_tokens=100, stream=True))
        resp = await client.post("/chat/completions", json=body())
    assert "{not json" in events
    with pytest.raises(json.JSONDecodeError):
        json.loads(resp.text)


async def test_openai_sdk_non_stream_and_stream() -> None:
    async with serve_sim(SimEngine(profile=PACED)) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="sim", max_retries=0)
        try:
            done = await client.chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=9
            )
            assert done.choices[0].message.content is not None
            assert len(done.choices[0].message.content.split()) == 9
            assert done.usage is not None and done.usage.completion_tokens == 9

            stream = await client.chat.completions.create(
                model="sim-model",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=30,
                stream=True,
                stream_options={"include_usage": True},
            )
            text, usage = "", None
            async for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                usage = chunk.usage or usage
            assert len(text.split()) == 30
            assert usage is not None and usage.completion_tokens == 30
            assert usage.completion_tokens_details is not None
            assert usage.completion_tokens_details.reasoning_tokens == 0
        finally:
            await client.close()


async def test_openai_sdk_tool_calls() -> None:
    meta = {"sim.tool": "edit_file", "sim.args": json.dumps(EDIT_ARGS)}
    async with serve_sim(SimEngine(profile=PACED)) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="sim", max_retries=0)
        try:
            done = await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "edit"}],
                tools=TOOLS,
                metadata=meta,
            )
            assert done.choices[0].finish_reason == "tool_calls"
            (call,) = done.choices[0].message.tool_calls or []
            assert call.type == "function"
            assert call.function.name == "edit_file"
            assert json.loads(call.function.arguments) == EDIT_ARGS

            async with client.chat.completions.stream(
                model="m",
                messages=[{"role": "user", "content": "edit"}],
                tools=TOOLS,
                metadata=meta,
            ) as stream:
                final = await stream.get_final_completion()
            (streamed,) = final.choices[0].message.tool_calls or []
            assert streamed.function.name == "edit_file"
            assert json.loads(streamed.function.arguments) == EDIT_ARGS
        finally:
            await client.close()


async def test_openai_sdk_sees_rate_limits() -> None:
    engine = SimEngine(profile=FAST, faults=Faults(rate_limit_rate=1.0, retry_after_s=2))
    async with serve_sim(engine) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="sim", max_retries=0)
        try:
            with pytest.raises(openai.RateLimitError) as info:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
        finally:
            await client.close()
    assert info.value.response.headers["retry-after"] == "2"


def _serve_command() -> list[str]:
    args = ["sim", "serve", "--port", "0", "--profile", "groq/llama-3.3-70b", "--seed", "3"]
    args += ["--script", "swarm.providers.sim:default_script", "--time-scale", "0.5"]
    if all(importlib.util.find_spec(f"swarm._commands.{m}") for m in ("ask", "providers")):
        return [sys.executable, "-m", "swarm", *args]
    # until the sibling commands exist, drive this module's parser directly
    boot = (
        "import argparse, sys, anyio; from swarm._commands import sim; "
        "p = argparse.ArgumentParser(prog='swarm'); sim.register(p.add_subparsers()); "
        "a = p.parse_args(sys.argv[1:]); sys.exit(anyio.run(a.func, a))"
    )
    return [sys.executable, "-c", boot, *args]


async def test_swarm_sim_serve_subprocess() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    root = Path(__file__).resolve().parents[1]
    process = await anyio.open_process(_serve_command(), cwd=root, env=env, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(15):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive()
        text = line.decode().strip()
        prefix = "swarm sim: serving groq/llama-3.3-70b on "
        assert text.startswith(prefix), text
        url = text[len(prefix) :]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert not url.endswith(":0/v1")
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            resp = await client.post("/chat/completions", json=body(max_tokens=4))
        assert resp.status_code == 200
        assert len(resp.json()["choices"][0]["message"]["content"].split()) == 4
        process.terminate()
        with anyio.fail_after(10):
            code = await process.wait()
        assert code == 0
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.move_on_after(5, shield=True):
                await process.wait()
        await process.aclose()


def test_bad_script_spec_is_a_config_error() -> None:
    from swarm._commands.sim import _load_script

    assert _load_script("swarm.providers.sim:default_script") is default_script
    for spec in ("nocolon", "swarm.providers.sim:missing", "no_such_module_xyz:f"):
        with pytest.raises(ConfigError, match="--script"):
            _load_script(spec)


async def test_empty_reply_still_streams_a_role_chunk() -> None:
    async with sim_client() as client:
        events = await sse_events(client, body(max_tokens=0, stream=True))
    first = json.loads(events[0])["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": ""}
    assert json.loads(events[1])["choices"][0]["finish_reason"] == "stop"


async def test_quota_sends_x_ratelimit_headers_then_429_with_retry_after() -> None:
    from swarm.providers._exchange import rate_limit_info, retry_after_s

    # 2 input + 100 output tokens a call; 240 tokens/min refill 4 tokens/s
    async with sim_client(faults=Faults(quota_tpm=240)) as client:
        resp = await client.post("/chat/completions", json=body(max_tokens=100))
        assert resp.status_code == 200
        info = rate_limit_info(resp.headers)
        assert info is not None and info.remaining_tokens == 138
        assert info.reset_tokens_s == pytest.approx(102 / 4, rel=0.01)
        events = await sse_events(client, body(max_tokens=100, stream=True))
        assert events[-1] == "[DONE]"
        resp = await client.post("/chat/completions", json=body(max_tokens=100))
    assert resp.status_code == 429
    # 36 remaining, 66 short at 4 tokens/s: 16.5 s
    assert retry_after_s(resp.headers) == pytest.approx(66 / 4, abs=0.1)
    assert resp.headers["retry-after"] == "17"
    assert resp.json()["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.parametrize(
    ("payload", "param", "code"),
    [
        ({"model": "m", "messages": []}, "messages", "empty_array"),
        ({"model": "m"}, "messages", "missing_required_parameter"),
        ({"model": "m", "messages": [{"role": "bot"}]}, "messages[0].role", "invalid_value"),
        ({"model": "m", "messages": ["hi"]}, "messages[0].role", "invalid_value"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "tool"}]},
            "messages[1].tool_call_id",
            "missing_required_parameter",
        ),
        ({"messages": [{"role": "user", "content": "x"}]}, None, None),
    ],
)
async def test_requests_openai_refuses_are_400s_in_its_error_shape(
    payload: dict[str, Any], param: str | None, code: str | None
) -> None:
    async with sim_client() as client:
        resp = await client.post("/chat/completions", json=payload)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert error["message"]


async def test_developer_role_is_accepted_as_openai_does() -> None:
    messages = [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}]
    async with sim_client() as client:
        resp = await client.post("/chat/completions", json=body(messages=messages, max_tokens=3))
    assert resp.status_code == 200
    assert len(resp.json()["choices"][0]["message"]["content"].split()) == 3
