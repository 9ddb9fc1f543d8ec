"""OpenAIProvider against a loopback server that streams exactly as OpenAI does.

The server's behaviour is picked by the model name (`text`, `tools`, `429`, `stall`, ...);
it records each request so tests can check what was sent.
"""

from __future__ import annotations

import gzip
import http.server
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from email.utils import formatdate
from typing import Any

import anyio
import httpx
import pytest
import trio
from aiohttp import web
from opentelemetry.sdk.trace import TracerProvider

from swarm._serve import serve_app
from swarm.catalog import LatencyProfile
from swarm.config._duration import parse_duration_s
from swarm.errors import ProviderError, RateLimited
from swarm.messages import ChatRequest, Message, ToolCall, ToolSpec
from swarm.providers._openai import OpenAIProvider
from swarm.providers._sse import iter_sse_batches
from swarm.providers.sim import Reply, SimEngine
from swarm.providers.sim._server import serve_sim

SECRET = "sk-test-very-secret-0123456789"


class State:
    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, str], dict[str, Any]]] = []
        """(headers, query, json body) of each request."""
        self.released = anyio.Event()
        """The client dropped a stream the server was still sending."""


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "served-model",
        "system_fingerprint": "fp_1",
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = {
    "prompt_tokens": 50,
    "completion_tokens": 12,
    "total_tokens": 62,
    "prompt_tokens_details": {"cached_tokens": 32},
    "completion_tokens_details": {"reasoning_tokens": 4},
}
DONE = b"data: [DONE]\n\n"


def text_stream(with_usage: bool = True) -> list[bytes]:
    parts = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "hmm"}),
        chunk({"content": "Hello"}),
        chunk({"content": ", world"}),
        chunk({}, finish="stop"),
    ]
    if with_usage:
        parts.append(chunk(None, usage=USAGE, x_groq={"id": "r", "usage": {"queue_time": 0.01}}))
    return [*parts, DONE]


def tool_stream() -> list[bytes]:
    def call(index: int, **fields: Any) -> bytes:
        return chunk({"tool_calls": [{"index": index, **fields}]})

    return [
        chunk({"role": "assistant", "content": None}),
        call(0, id="call_a", type="function", function={"name": "read_file", "arguments": ""}),
        call(0, function={"arguments": '{"path": '}),
        call(1, id="call_b", type="function", function={"name": "list_dir", "arguments": ""}),
        call(0, function={"arguments": '"a.py"}'}),
        call(1, function={"arguments": '{"path": "."}'}),
        chunk({}, finish="tool_calls"),
        chunk(None, usage=USAGE),
        DONE,
    ]


def make_app(state: State) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state.requests.append((dict(request.headers), dict(request.query), body))
        scenario = body["model"]
        if scenario in ("429", "429-ms", "429-date", "429-reset"):
            headers = {
                "429": {"retry-after": "7"},
                "429-ms": {"retry-after-ms": "1500"},
                "429-date": {"retry-after": formatdate(time.time() + 60, usegmt=True)},
                "429-reset": {
                    "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-reset-requests": "6m0s",
                },
            }[scenario]
            error = {"error": {"message": "Rate limit reached", "type": "requests"}}
            return web.json_response(error, status=429, headers=headers)
        if scenario.isdigit():
            error = {"error": {"message": f"boom {scenario}", "type": "invalid_request_error"}}
            return web.json_response(error, status=int(scenario))
        if scenario == "echo-key":
            return web.Response(status=401, text=f"bad key {request.headers['authorization']}")
        if not body.get("stream"):
            if scenario == "slow-whole":
                await anyio.sleep(0.8)  # longer than the provider's stall timeout
            return web.json_response(
                {
                    "id": "chatcmpl-2",
                    "object": "chat.completion",
                    "model": "served-model",
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": None,
                                "tool_calls": [
                                    {
                                        "id": "call_x",
                                        "type": "function",
                                        "function": {"name": "git_diff", "arguments": "{}"},
                                    }
                                ],
                            },
                            "finish_reason": "tool_calls",
                        }
                    ],
                    "usage": USAGE,
                }
            )
        resp = web.StreamResponse(
            headers={
                "content-type": "text/event-stream; charset=utf-8",
                "x-ratelimit-remaining-requests": "99",
                "x-ratelimit-remaining-tokens": "12000",
                "x-ratelimit-reset-requests": "1s",
                "x-ratelimit-reset-tokens": "250ms",
            }
        )
        await resp.prepare(request)
        if scenario == "stall":
            await resp.write(chunk({"content": "a"}))
            await anyio.sleep(30)
        elif scenario == "malformed":
            await resp.write(chunk({"content": "a"}) + b"data: {not json\n\n")
        elif scenario == "error-event":
            await resp.write(chunk({"content": "a"}))
            await resp.write(b'data: {"error": {"message": "overloaded", "type": "server"}}\n\n')
        elif scenario in ("looping", "looping-call"):  # as a small model's sampling loops
            try:
                if scenario == "looping":
                    await resp.write(chunk({"content": "Here is the file:\n"}))
                    piece: dict[str, Any] = {"content": "    total += line\n"}
                else:
                    call = {"index": 0, "id": "c1", "function": {"name": "write_file"}}
                    await resp.write(chunk({"tool_calls": [call]}))
                    start = '{"path": "a.py", "content": "'
                    await resp.write(
                        chunk({"tool_calls": [{"index": 0, "function": {"arguments": start}}]})
                    )
                    piece = {"tool_calls": [{"index": 0, "function": {"arguments": "x = 1\\n"}}]}
                for _ in range(100_000):
                    await resp.write(chunk(piece))
            except (ConnectionError, OSError):
                state.released.set()
        elif scenario == "endless":
            try:
                await resp.write(chunk({"content": "first"}))
                while True:
                    await anyio.sleep(0.02)
                    await resp.write(chunk({"content": "more"}))
            except (ConnectionError, OSError):
                state.released.set()
        else:
            parts = {"text": text_stream(), "no-usage": text_stream(False), "tools": tool_stream()}
            for part in parts[scenario]:  # one write per event, as the network delivers them
                await resp.write(part)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    async with serve_app(app) as url:
        yield f"{url}/v1"


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, State]]:
    state = State()
    async with serve(make_app(state)) as url:
        yield url, state


@pytest.fixture
async def provider(server: tuple[str, State]) -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider("local", server[0], api_key=SECRET, stall_timeout_s=0.5)
    try:
        yield p
    finally:
        await p.aclose()


def ask(text: str = "hi", **kw: Any) -> ChatRequest:
    return ChatRequest(messages=[Message.system("be brief"), Message.user(text)], **kw)


async def test_streams_text_usage_and_timing(
    provider: OpenAIProvider, server: tuple[str, State]
) -> None:
    firsts: list[float] = []
    result = await provider.chat("text", ask(), on_first_token=lambda: firsts.append(1))
    assert result.text == "Hello, world"
    assert result.finish_reason == "stop"
    assert result.message.tool_calls == []
    assert result.usage.model_dump() == {
        "input_tokens": 50,
        "output_tokens": 12,
        "reasoning_tokens": 4,
        "cached_input_tokens": 32,
    }
    assert firsts == [1]
    assert 0 < result.timing.ttft_s <= result.timing.duration_s
    assert result.provider == "local" and result.model == "served-model"
    assert result.extras["x_groq"] == {"queue_time": 0.01}
    assert result.extras["reasoning"] == "hmm"
    assert result.rate_limit is not None
    assert result.rate_limit.model_dump() == {
        "remaining_requests": 99,
        "remaining_tokens": 12000,
        "reset_requests_s": 1.0,
        "reset_tokens_s": 0.25,
    }
    headers, _, body = server[1].requests[-1]
    assert headers["Authorization"] == f"Bearer {SECRET}"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert "tools" not in body and "max_tokens" not in body


async def test_assembles_streamed_tool_calls(
    provider: OpenAIProvider, server: tuple[str, State]
) -> None:
    call = ToolCall(id="call_0", name="run", arguments='{"command": "ls"}')
    request = ChatRequest(
        messages=[
            Message.user("go"),
            Message.assistant(None, [call]),
            Message.tool(call, "a.py"),
        ],
        tools=[ToolSpec(name="read_file", description="Read a file")],
        tool_choice="auto",
        max_tokens=100,
        temperature=0.0,
    )
    result = await provider.chat("tools", request)
    assert result.finish_reason == "tool_calls"
    assert result.message.content is None
    assert result.message.tool_calls == [
        ToolCall(id="call_a", name="read_file", arguments='{"path": "a.py"}'),
        ToolCall(id="call_b", name="list_dir", arguments='{"path": "."}'),
    ]
    body = server[1].requests[-1][2]
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "content": "a.py", "tool_call_id": "call_0"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert (body["tool_choice"], body["max_tokens"], body["temperature"]) == ("auto", 100, 0.0)


async def test_non_streamed_reply(provider: OpenAIProvider, server: tuple[str, State]) -> None:
    firsts: list[int] = []
    result = await provider.chat(
        "whole", ask(stream=False), on_first_token=lambda: firsts.append(1)
    )
    assert result.message.tool_calls == [ToolCall(id="call_x", name="git_diff", arguments="{}")]
    assert result.finish_reason == "tool_calls"
    assert result.usage.output_tokens == 12
    assert firsts == [1]
    body = server[1].requests[-1][2]
    assert body["stream"] is False and "stream_options" not in body


async def test_whole_reply_slower_than_stall_timeout_is_not_cut_off(
    provider: OpenAIProvider,
) -> None:
    result = await provider.chat("slow-whole", ask(stream=False))
    assert result.finish_reason == "tool_calls"
    assert result.timing.duration_s >= 0.5


async def test_estimates_usage_when_server_sends_none(provider: OpenAIProvider) -> None:
    result = await provider.chat("no-usage", ask("x" * 400))
    assert result.text == "Hello, world"
    assert result.usage.output_tokens > 0
    assert result.usage.input_tokens >= 100


async def test_sends_traceparent_of_current_span(
    provider: OpenAIProvider, server: tuple[str, State]
) -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("chat") as span:
        await provider.chat("text", ask())
    trace_id = format(span.get_span_context().trace_id, "032x")
    traceparent = server[1].requests[-1][0]["traceparent"]
    assert traceparent.split("-")[1] == trace_id


async def test_azure_api_key_header_and_api_version(server: tuple[str, State]) -> None:
    azure = OpenAIProvider(
        "azure",
        server[0],
        api_key=SECRET,
        auth_style="api-key",
        query={"api-version": "2024-10-21"},
        headers={"x-extra": "1"},
    )
    try:
        await azure.chat("text", ask())
    finally:
        await azure.aclose()
    headers, query, _ = server[1].requests[-1]
    assert headers["api-key"] == SECRET
    assert "Authorization" not in headers
    assert headers["x-extra"] == "1"
    assert query == {"api-version": "2024-10-21"}


@pytest.mark.parametrize(
    ("scenario", "low", "high"),
    [("429", 7, 7), ("429-ms", 1.5, 1.5), ("429-date", 30, 61), ("429-reset", 360, 360)],
)
async def test_429_is_rate_limited_with_retry_after(
    provider: OpenAIProvider, scenario: str, low: float, high: float
) -> None:
    with pytest.raises(RateLimited) as info:
        await provider.chat(scenario, ask())
    err = info.value
    assert err.retryable and err.status == 429
    assert err.retry_after is not None and low <= err.retry_after <= high
    assert "Rate limit reached" in str(err)


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(500, True), (503, True), (408, True), (409, True), (400, False), (404, False)],
)
async def test_http_errors_say_if_retryable(
    provider: OpenAIProvider, status: int, retryable: bool
) -> None:
    with pytest.raises(ProviderError) as info:
        await provider.chat(str(status), ask())
    err = info.value
    assert (err.status, err.retryable, err.kind) == (status, retryable, "http")
    assert f"boom {status}" in str(err)
    assert err.provider == "local" and err.model == str(status)


async def test_connection_refused_is_retryable_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = OpenAIProvider("gone", f"http://127.0.0.1:{port}/v1", api_key=SECRET)
    try:
        with pytest.raises(ProviderError) as info:
            await p.chat("m", ask())
    finally:
        await p.aclose()
    assert (info.value.kind, info.value.retryable) == ("connect", True)
    assert SECRET not in str(info.value)


async def test_stalled_stream_is_retryable_stall(provider: OpenAIProvider) -> None:
    started = time.perf_counter()
    with pytest.raises(ProviderError) as info:
        await provider.chat("stall", ask())
    assert (info.value.kind, info.value.retryable) == ("stall", True)
    assert time.perf_counter() - started < 10  # stall_timeout_s is 0.5; the server waits 30


async def test_malformed_chunk_is_retryable_malformed(provider: OpenAIProvider) -> None:
    with pytest.raises(ProviderError) as info:
        await provider.chat("malformed", ask())
    assert (info.value.kind, info.value.retryable) == ("malformed", True)


async def test_error_event_mid_stream_is_retryable(provider: OpenAIProvider) -> None:
    with pytest.raises(ProviderError) as info:
        await provider.chat("error-event", ask())
    assert info.value.retryable and "overloaded" in str(info.value)


async def test_cancellation_mid_stream_releases_the_connection(
    provider: OpenAIProvider, server: tuple[str, State]
) -> None:
    first = anyio.Event()

    async def call() -> None:
        await provider.chat("endless", ask(), on_first_token=first.set)

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await first.wait()
            scope.cancel()
    with anyio.fail_after(5):
        await server[1].released.wait()
    # the provider still works afterwards
    assert (await provider.chat("text", ask())).text == "Hello, world"


async def test_a_reply_that_loops_is_stopped_and_says_so(
    provider: OpenAIProvider, server: tuple[str, State]
) -> None:
    reply = await provider.chat("looping", ask())
    assert reply.finish_reason == "repetition"
    assert reply.text == "Here is the file:\n    total += line\n"  # one round kept
    with anyio.fail_after(5):
        await server[1].released.wait()  # the server was told to stop writing


async def test_a_tool_call_whose_arguments_loop_is_stopped_too(provider: OpenAIProvider) -> None:
    reply = await provider.chat("looping-call", ask(tools=[ToolSpec(name="write_file")]))
    assert reply.finish_reason == "repetition"
    (call,) = reply.message.tool_calls
    assert call.arguments == '{"path": "a.py", "content": "x = 1\\n'


async def test_secret_never_in_errors_or_repr(provider: OpenAIProvider) -> None:
    with pytest.raises(ProviderError) as info:
        await provider.chat("echo-key", ask())
    assert info.value.status == 401 and not info.value.retryable
    assert SECRET not in str(info.value) and "bad key" in str(info.value)
    assert SECRET not in repr(provider)


async def test_shape_via_mock_transport_and_borrowed_client_stays_open() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=b"".join(text_stream()),
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    p = OpenAIProvider("mock", "https://example.test/v1/", client=client)
    result = await p.chat("m", ask())
    await p.aclose()
    assert not client.is_closed  # not ours to close
    await client.aclose()
    assert result.text == "Hello, world"
    request = seen[0]
    assert str(request.url) == "https://example.test/v1/chat/completions"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["accept"] == "text/event-stream"
    assert "authorization" not in request.headers
    assert p.address == "example.test" and p.kind == "openai"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("250ms", 0.25),
        ("1h2m3.5s", 3723.5),
        ("0.5", 0.5),
        ("soon", None),
        ("", None),
    ],
)
def test_parse_reset_durations(text: str, seconds: float | None) -> None:
    assert parse_duration_s(text) == seconds


def _sim_script(request: ChatRequest) -> Reply:
    """Call read_file once when offered, then answer in prose."""
    if request.tools and request.messages[-1].role != "tool":
        call = ToolCall(id="call_sim", name="read_file", arguments='{"path": "src/app.py"}')
        return Reply(tool_calls=(call,))
    return Reply(text="the file defines main " * 10)


async def test_against_the_simulator_server() -> None:
    profile = LatencyProfile(ttft_s=0.02, output_tps=2000.0, jitter=0.0)
    engine = SimEngine(profile=profile, script=_sim_script, seed=1)
    async with serve_sim(engine) as url:
        provider = OpenAIProvider("sim", url)
        try:
            tools = [ToolSpec(name="read_file", description="Read a file")]
            first = await provider.chat(
                "speedy", ChatRequest(messages=[Message.user("read it")], tools=tools)
            )
            assert first.finish_reason == "tool_calls"
            assert first.simulated  # the server says so; reports label such runs
            [call] = first.message.tool_calls
            assert (call.name, json.loads(call.arguments)) == ("read_file", {"path": "src/app.py"})
            assert 0.02 <= first.timing.ttft_s <= first.timing.duration_s

            messages = [Message.user("read it"), first.message, Message.tool(call, "def main()")]
            second = await provider.chat(
                "speedy", ChatRequest(messages=messages, tools=tools, max_tokens=30)
            )
            assert second.message.tool_calls == []
            assert second.text.split() == ("the file defines main " * 10).split()[:30]
            assert second.finish_reason == "length"
            assert second.usage.output_tokens == 30 and second.usage.input_tokens > 0
        finally:
            await provider.aclose()


class _Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


@pytest.mark.parametrize(
    "raw",
    [
        b"data: a\n\ndata: b\n\n",
        b"data: a\r\n\r\ndata:b\r\n\r\n",
        b": keep-alive\nevent: x\nid: 1\ndata: a\n\ndata: b",
        b"data: a\rdata: \r\rdata: b\r\r",
    ],
)
async def test_sse_events_survive_any_split(raw: bytes) -> None:
    expected = [b"a", b"b"] if b"data: \r" not in raw else [b"a\n", b"b"]
    for cut in range(len(raw) + 1):
        response = httpx.Response(200, stream=_Pieces([raw[:cut], raw[cut:]]))
        got = [data async for batch in iter_sse_batches(response) for data in batch]
        assert got == expected, cut


async def test_gzipped_stream_is_decoded() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = gzip.compress(b"".join(text_stream()))
        headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
        return httpx.Response(200, headers=headers, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        p = OpenAIProvider("mock", "https://example.test/v1", client=client)
        assert (await p.chat("m", ask())).text == "Hello, world"


def test_provider_made_client_works_under_trio() -> None:
    body = b"".join(text_stream())

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    async def main(url: str) -> str:
        provider = OpenAIProvider("trio", url)
        try:
            return (await provider.chat("m", ask())).text
        finally:
            await provider.aclose()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        assert trio.run(main, f"http://127.0.0.1:{httpd.server_address[1]}/v1") == "Hello, world"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_a_slow_servers_deadlines_follow_its_speed() -> None:
    """A CPU server reads a 2,000-token prompt for over a minute, and every stream it
    serves waits while it reads another's: both deadlines grow with the prompt and speed."""
    from swarm.providers._endpoint import FirstTokenDeadline

    deadlines = FirstTokenDeadline(None, 30.0)
    assert deadlines.seconds("m", 1000) == (30.0, "stall_timeout_s")  # speed unknown
    deadlines.expect("m", None, None)  # a server the catalog does not know: 25 tok/s
    seconds, why = deadlines.seconds("m", 1000)
    assert seconds == pytest.approx(4 * (2 + 1000 / 25))
    assert "first_token_timeout_s unset" in str(why) and "1,000 prompt tokens" in str(why)
    assert deadlines.gap("m", 30.0) == pytest.approx(4 * 2048 / 25)
    deadlines.observe("m", 2000, 2 + 2000 / 10)  # measured: slower than assumed
    assert deadlines.seconds("m", 1000)[0] > 4 * (2 + 1000 / 25)
    fixed = FirstTokenDeadline(45.0, 30.0)
    fixed.expect("m", None, None)
    assert fixed.seconds("m", 10_000) == (45.0, "first_token_timeout_s")
