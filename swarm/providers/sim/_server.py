"""The simulator as an OpenAI-compatible HTTP server (aiohttp, so always on asyncio).

`POST /v1/chat/completions` (streaming and not), `GET /v1/models` and `GET /health`. Any
model name is accepted; catalog refs (`groq/llama-3.3-70b`) get that profile's latency.
Faults look like the real thing: a 500 JSON error, a 429 with `Retry-After`, a connection
aborted mid-stream, a stream that stops while the connection stays open, a garbage chunk.

Streams are paced in ticks of about 15 ms, each carrying the text decoded since the last
one, so hundreds of concurrent streams cost little CPU. Request bodies are read with
`json.loads` and `model_construct`: no validation on the hot path.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from aiohttp import web

from swarm.catalog import all_models
from swarm.errors import WireError
from swarm.providers._exchange import SIMULATED_HEADER
from swarm.providers.sim._context import context_error_body
from swarm.providers.sim._engine import FAULT_CONTEXT, SimEngine, SimPlan
from swarm.providers.sim._reply import Reply
from swarm.providers.sim._wire import to_request, usage_of

__all__ = ["create_app", "serve_sim"]

TICK_S = 0.015
"""Shortest gap between two chunks of one stream."""
_DONE = b"data: [DONE]\n\n"
_STALL_MAX_S = 300.0


def _error(status: int, message: str, kind: str, code: str | None, **headers: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers or None)


def _quota_headers(fixed: dict[str, str], plan: SimPlan) -> dict[str, str]:
    """The server's fixed headers plus what the engine's quota says after this call."""
    info = plan.rate_limit
    if info is None:
        return fixed
    headers = dict(fixed)
    if info.remaining_tokens is not None:
        headers["x-ratelimit-remaining-tokens"] = str(info.remaining_tokens)
        headers["x-ratelimit-reset-tokens"] = f"{info.reset_tokens_s or 0.0:.3f}s"
    if info.remaining_requests is not None:
        headers["x-ratelimit-remaining-requests"] = str(info.remaining_requests)
        headers["x-ratelimit-reset-requests"] = f"{info.reset_requests_s or 0.0:.3f}s"
    return headers


async def _stall(request: web.Request) -> None:
    """Send nothing more; hold the connection until the client gives up (aiohttp then
    cancels the handler: `serve_sim` turns on handler_cancellation) or at most 5 minutes."""
    await anyio.sleep(_STALL_MAX_S)
    _abort(request)


def _abort(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()


async def _sleep_until(at: float) -> None:
    """Sleep until anyio's clock reads `at`; return at once if it already has."""
    wait = at - anyio.current_time()
    if wait > 0:
        await anyio.sleep(wait)


class _Frames:
    """One stream's SSE chunks: the visible output cut into ticks, framed as chunk events."""

    def __init__(self, cid: str, model: str, reply: Reply) -> None:
        self.cid, self.model, self.reply = cid, model, reply
        head = json.dumps(self._head())[:-1]
        self.prefix = f'data: {head}, "choices": [{{"index": 0, "delta": '.encode()
        self.suffix = b', "logprobs": null, "finish_reason": null}]}\n\n'
        # the visible output as segments: None for text, else the tool-call index
        self.segments: list[tuple[int | None, str]] = []
        if reply.text:
            self.segments.append((None, reply.text))
        self.segments.extend((i, c.arguments or "{}") for i, c in enumerate(reply.tool_calls))
        self.total = sum(len(s) for _, s in self.segments)

    def _head(self) -> dict[str, Any]:
        return {
            "id": self.cid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
        }

    def tick(self, i: int, ticks: int) -> bytes:
        """Tick `i` of `ticks`: the output decoded since the last tick (an empty delta if none)."""
        chunk = self._deltas(i * self.total // ticks, (i + 1) * self.total // ticks, i == 0)
        return chunk or self.prefix + b'{"role": "assistant", "content": ""}' + self.suffix

    def _deltas(self, a: int, b: int, first: bool) -> bytes:
        out = []
        offset = 0
        for index, text in self.segments:
            lo, hi = max(a, offset), min(b, offset + len(text))
            if lo < hi:
                delta = self._delta(index, text[lo - offset : hi - offset], lo == offset)
                if first:
                    delta = {"role": "assistant", **delta}
                    first = False
                out.append(self.prefix + json.dumps(delta).encode() + self.suffix)
            offset += len(text)
        return b"".join(out)

    def _delta(self, index: int | None, piece: str, opens: bool) -> dict[str, Any]:
        if index is None:
            return {"content": piece}
        if not opens:
            return {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
        c = self.reply.tool_calls[index]  # the call's first chunk names it
        fn = {"name": c.name, "arguments": piece}
        return {"tool_calls": [{"index": index, "id": c.id, "type": "function", "function": fn}]}

    def tail(self, plan: SimPlan, include_usage: bool) -> bytes:
        """The finish chunk, the usage chunk if asked for, and `[DONE]`."""
        finish = f', "logprobs": null, "finish_reason": "{plan.finish_reason}"}}]}}\n\n'
        tail = [self.prefix + b"{}" + finish.encode()]
        if include_usage:
            usage = {**self._head(), "choices": [], "usage": usage_of(plan)}
            tail.append(b"data: " + json.dumps(usage).encode() + b"\n\n")
        tail.append(_DONE)
        return b"".join(tail)


class _SimHandlers:
    def __init__(self, engine: SimEngine, headers: dict[str, str]) -> None:
        self.engine = engine
        self.headers = headers
        self._ids = itertools.count(1)

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "profile": self.engine.profile_name})

    async def models(self, request: web.Request) -> web.Response:
        refs = [self.engine.profile_name, *(m.ref for m in all_models())]
        data = [
            {"id": ref, "object": "model", "created": 0, "owned_by": ref.split("/")[0]}
            for ref in dict.fromkeys(refs)
        ]
        return web.json_response({"object": "list", "data": data})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
            chat = to_request(body)
            model = str(body["model"])
        except WireError as exc:
            return web.json_response(exc.body(), status=400)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return _error(400, f"invalid request: {exc!r}", "invalid_request_error", None)
        plan = await self.engine.plan(model, chat)
        if plan.fault == FAULT_CONTEXT:
            return web.json_response(context_error_body(plan), status=400)
        if plan.fault == "rate_limit":
            retry = plan.retry_after_s
            return _error(
                429,
                "Rate limit reached (simulated)",
                "rate_limit_error",
                "rate_limit_exceeded",
                **{
                    **self.headers,
                    "Retry-After": str(math.ceil(retry)),  # HTTP allows whole seconds only
                    "retry-after-ms": str(math.ceil(retry * 1000)),
                },
            )
        if plan.fault == "error":
            return _error(500, "The server had an error (simulated)", "server_error", None)
        if plan.fault in ("hang", "refuse"):  # no reply: held open (at most 5 min), or cut
            with anyio.move_on_after(_STALL_MAX_S if plan.fault == "hang" else 0):
                await anyio.sleep_forever()
            _abort(request)
            return web.Response(status=500)  # never reaches the client
        cid = f"chatcmpl-sim-{next(self._ids)}"
        headers = _quota_headers(self.headers, plan)
        if chat.stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, cid, model, plan, include_usage, headers)
        return await self._complete(request, cid, model, plan, headers)

    async def _complete(
        self, request: web.Request, cid: str, model: str, plan: SimPlan, headers: dict[str, str]
    ) -> web.StreamResponse:
        if plan.fault is None:
            await anyio.sleep(plan.ttft_s + plan.think_s + plan.decode_s)
        else:
            await anyio.sleep(plan.ttft_s + plan.think_s + plan.decode_s * plan.fault_at)
            if plan.fault == "drop":
                _abort(request)
                return web.Response(status=500)  # never reaches the client
            if plan.fault == "stall":
                await _stall(request)
                return web.Response(status=500)
            return web.Response(text="{not json", content_type="application/json", headers=headers)
        reply = plan.reply
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments or "{}"},
                }
                for c in reply.tool_calls
            ]
        body = {
            "id": cid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": plan.finish_reason,
                }
            ],
            "usage": usage_of(plan),
        }
        return web.json_response(body, headers=headers)

    async def _stream(
        self,
        request: web.Request,
        cid: str,
        model: str,
        plan: SimPlan,
        include_usage: bool,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **headers}
        )
        await resp.prepare(request)
        frames = _Frames(cid, model, plan.reply)
        ticks = max(1, min(math.ceil(plan.decode_s / TICK_S), frames.total))
        fault_tick = int(plan.fault_at * ticks) if plan.fault else -1
        await anyio.sleep(plan.ttft_s)
        if plan.think_s:
            await self._stream_thinking(resp, frames.prefix, frames.suffix, plan.think_s)
        start = anyio.current_time()
        step = plan.decode_s / ticks
        for i in range(ticks):
            await _sleep_until(start + i * step)
            if i == fault_tick:
                return await self._stream_fault(request, resp, plan)
            await resp.write(frames.tick(i, ticks))
        await _sleep_until(start + plan.decode_s)
        await resp.write(frames.tail(plan, include_usage))
        await resp.write_eof()
        return resp

    async def _stream_thinking(
        self, resp: web.StreamResponse, prefix: bytes, suffix: bytes, think_s: float
    ) -> None:
        """Stream `reasoning_content` chunks while the model thinks (at most ~20 chunks)."""
        ticks = max(1, min(20, math.ceil(think_s / TICK_S)))
        start = anyio.current_time()
        first = prefix + b'{"role": "assistant", "reasoning_content": "Thinking."}' + suffix
        more = prefix + b'{"reasoning_content": " ..."}' + suffix
        for i in range(ticks):
            await _sleep_until(start + i * think_s / ticks)
            await resp.write(first if i == 0 else more)
        await _sleep_until(start + think_s)

    async def _stream_fault(
        self, request: web.Request, resp: web.StreamResponse, plan: SimPlan
    ) -> web.StreamResponse:
        if plan.fault == "drop":
            _abort(request)
        elif plan.fault == "stall":
            await _stall(request)
        else:
            await resp.write(b"data: {not json\n\n" + _DONE)
            await resp.write_eof()
        return resp


def create_app(
    engine: SimEngine,
    *,
    remaining_requests: int | None = None,
    remaining_tokens: int | None = None,
) -> web.Application:
    """The server's routes; `remaining_*` adds fixed `x-ratelimit-remaining-*` headers."""
    headers = {SIMULATED_HEADER: "1"}
    if remaining_requests is not None:
        headers["x-ratelimit-remaining-requests"] = str(remaining_requests)
    if remaining_tokens is not None:
        headers["x-ratelimit-remaining-tokens"] = str(remaining_tokens)
    handlers = _SimHandlers(engine, headers)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handlers.chat)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_get("/health", handlers.health)
    return app


_BACKLOG = 4096
"""Connections the kernel may queue before they are accepted (it caps this at somaxconn)."""


@asynccontextmanager
async def serve_sim(
    engine: SimEngine,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    remaining_requests: int | None = None,
    remaining_tokens: int | None = None,
) -> AsyncIterator[str]:
    """Serve `engine` on loopback (asyncio only); yields the base URL, `http://host:port/v1`."""
    app = create_app(
        engine, remaining_requests=remaining_requests, remaining_tokens=remaining_tokens
    )
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.25)
    await runner.setup()
    try:
        # a swarm connects hundreds of agents at once: aiohttp's default backlog of 128
        # drops the rest of the wave's SYNs, and each dropped one waits a 1 s retransmit
        site = web.TCPSite(runner, host, port, backlog=_BACKLOG)
        await site.start()
        bound_port = runner.addresses[0][1]
        shown = f"[{host}]" if ":" in host else host
        yield f"http://{shown}:{bound_port}/v1"
    finally:
        with anyio.move_on_after(5, shield=True):
            await runner.cleanup()
