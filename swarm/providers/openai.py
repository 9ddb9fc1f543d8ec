"""The OpenAI-compatible chat-completions provider (OpenAI, Azure, Groq, Cerebras, sim, ...).

One attempt per `chat`: it streams the reply (SSE), measures time to first token, reads
usage and rate-limit headers, assembles streamed tool calls, and turns every failure into
a `ProviderError` (or `RateLimited`) whose `retryable` tells the router what to do. It
never retries itself.

This is the hot path of every real model call, so results are built with
`model_construct` and per-chunk work is kept to a dict lookup or two.
The HTTP error mapping here is shared with `swarm.providers.anthropic`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from swarm.messages import ChatRequest, ChatResult, Message, Timing, ToolCall, Usage
from swarm.model import FirstTokenCallback
from swarm.providers._sse import (
    SIMULATED_HEADER,
    error_from_response,
    estimate_tokens,
    iter_sse_batches,
    loads,
    malformed,
    rate_limit_info,
)
from swarm.providers._transport import Sender

__all__ = ["OpenAIProvider"]


def _message_json(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
    return out


class _Stream:
    """Accumulates one streamed reply, chunk by chunk."""

    __slots__ = (
        "calls",
        "extras",
        "finish",
        "first_at",
        "model",
        "on_first",
        "reasoning",
        "text",
        "usage",
    )

    def __init__(self, on_first: FirstTokenCallback | None) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]
        self.finish = ""
        self.model = ""
        self.usage: dict[str, Any] | None = None
        self.extras: dict[str, Any] = {}
        self.first_at = 0.0
        self.on_first = on_first

    def first(self) -> None:
        self.first_at = time.perf_counter()
        if self.on_first is not None:
            self.on_first()

    def add_batch(self, chunks: list[Any]) -> dict[str, Any] | None:
        """Fold parsed chunks in; returns an in-stream error object if one came."""
        append = self.text.append
        for chunk in chunks:
            if type(chunk) is not dict:
                return {"error": {"message": "stream chunk is not a JSON object"}}
            choices = chunk.get("choices")
            if choices:
                choice = choices[0]
                delta = choice.get("delta")
                if delta:
                    content = delta.get("content")
                    if content:
                        if not self.first_at:
                            self.first()
                        append(content)
                        if len(delta) > 1:  # role, or null reasoning fields, ride along
                            self._add_other(delta)
                    else:
                        self._add_other(delta)
                finish = choice.get("finish_reason")
                if finish:
                    self.finish = finish
                elif self.model:
                    continue
            elif "error" in chunk:
                return chunk
            # first, last and usage-only chunks: the fields that come once
            if not self.model:
                self.model = chunk.get("model") or ""
            usage = chunk.get("usage")
            if usage:
                self.usage = usage
            x_groq = chunk.get("x_groq")
            if x_groq and "usage" in x_groq:
                self.extras["x_groq"] = x_groq["usage"]
            time_info = chunk.get("time_info")
            if time_info:
                self.extras["time_info"] = time_info
        return None

    def _add_other(self, delta: dict[str, Any]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            if not self.first_at:
                self.first()
            self.reasoning.append(reasoning)
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            if not self.first_at:
                self.first()
            self._add_calls(tool_calls)

    def _add_calls(self, deltas: list[dict[str, Any]]) -> None:
        for d in deltas:
            idx = d.get("index", 0)
            parts = self.calls.get(idx)
            if parts is None:
                parts = self.calls[idx] = ["", ""]
            if d.get("id"):
                parts[0] = d["id"]
            fn = d.get("function")
            if fn:
                if fn.get("name"):
                    parts[1] += fn["name"]
                args = fn.get("arguments")
                if args:
                    parts.append(args)

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall.model_construct(
                id=p[0] or f"call_{i}", name=p[1], arguments="".join(p[2:]) or "{}"
            )
            for i, p in sorted(self.calls.items())
        ]


def usage_from_openai(
    raw: Mapping[str, Any] | None, *, estimate_out: int, estimate_in: int
) -> Usage:
    """Our `Usage` from an OpenAI `usage` object; estimates when the server sent none."""
    if not raw:
        return Usage.model_construct(
            input_tokens=estimate_in,
            output_tokens=estimate_out,
            reasoning_tokens=0,
            cached_input_tokens=0,
        )
    prompt_details = raw.get("prompt_tokens_details") or {}
    completion_details = raw.get("completion_tokens_details") or {}
    return Usage.model_construct(
        input_tokens=raw.get("prompt_tokens") or 0,
        output_tokens=raw.get("completion_tokens") or 0,
        reasoning_tokens=completion_details.get("reasoning_tokens") or 0,
        cached_input_tokens=prompt_details.get("cached_tokens") or 0,
    )


class OpenAIProvider:
    """An OpenAI-compatible `/chat/completions` endpoint; one pooled client per provider."""

    kind = "openai"

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        auth_style: Literal["bearer", "api-key"] = "bearer",
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        connect_timeout_s: float = 10.0,
        stall_timeout_s: float = 30.0,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.address = urlsplit(self.base_url).netloc
        # parsed once: httpx re-parses a str URL (and params) on every request
        self._url = httpx.URL(f"{self.base_url}/chat/completions", params=dict(query or {}))
        base = {"content-type": "application/json", **(headers or {})}
        if api_key:
            if auth_style == "api-key":
                base["api-key"] = api_key
            else:
                base["authorization"] = f"Bearer {api_key}"
        self._headers = base
        self._secret = api_key or ""
        self._timeout = httpx.Timeout(
            connect=connect_timeout_s, read=stall_timeout_s, write=stall_timeout_s, pool=None
        )
        self._stall_timeout_s = stall_timeout_s
        self._sender = Sender(client, self._timeout)

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, base_url={self.base_url!r})"

    def _payload(self, model: str, request: ChatRequest) -> bytes:
        body: dict[str, Any] = {
            "model": model,
            "messages": [_message_json(m) for m in request.messages],
            "stream": request.stream,
        }
        if request.stream:
            body["stream_options"] = {"include_usage": True}
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
    ) -> ChatResult:
        body = self._payload(model, request)
        state = _Stream(on_first_token)
        started = time.perf_counter()
        async with self._sender.exchange(
            self._url, dict(self._headers), body, stream=request.stream, provider=self, model=model
        ) as response:
            content_type = response.headers.get("content-type", "")
            if request.stream and content_type.startswith("text/event-stream"):
                async for batch in iter_sse_batches(response):
                    error = state.add_batch(self._decode(batch, response, model))
                    if error is not None:
                        raise error_from_response(response, self, model, body=error)
            else:
                await response.aread()
                self._add_whole(state, response, model)
        ended = time.perf_counter()
        return self._result(model, request, state, response, started, ended)

    def _decode(self, batch: list[bytes], response: httpx.Response, model: str) -> list[Any]:
        """The JSON chunks of one network read (`[DONE]` dropped), parsed in one go."""
        if batch[-1] == b"[DONE]":
            batch = batch[:-1]
        try:
            chunks: list[Any] = loads(b"[" + b",".join(batch) + b"]")
            if len(chunks) == len(batch):
                return chunks
        except ValueError:
            pass
        # something in the batch is off: find it event by event
        out: list[dict[str, Any]] = []
        for data in batch:
            try:
                chunk = loads(data) if data != b"[DONE]" else None
            except ValueError:
                chunk = False
            if chunk is None:
                continue
            if not isinstance(chunk, dict):
                raise malformed("malformed stream chunk (not a JSON object)", self, model, response)
            out.append(chunk)
        return out

    def _add_whole(self, state: _Stream, response: httpx.Response, model: str) -> None:
        """A non-streamed reply: one JSON body holding the whole message."""
        try:
            body = json.loads(response.content)
            choice = body["choices"][0]
            msg = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            raise malformed("malformed response body", self, model, response) from None
        state.first()
        if msg.get("content"):
            state.text.append(msg["content"])
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        if reasoning:
            state.reasoning.append(reasoning)
        for i, c in enumerate(msg.get("tool_calls") or ()):
            fn = c.get("function") or {}
            state.calls[i] = [c.get("id") or "", fn.get("name") or "", fn.get("arguments") or ""]
        state.finish = choice.get("finish_reason") or ""
        state.model = body.get("model") or ""
        state.usage = body.get("usage")
        if body.get("x_groq", {}).get("usage"):
            state.extras["x_groq"] = body["x_groq"]["usage"]
        if body.get("time_info"):
            state.extras["time_info"] = body["time_info"]

    def _result(
        self,
        model: str,
        request: ChatRequest,
        state: _Stream,
        response: httpx.Response,
        started: float,
        ended: float,
    ) -> ChatResult:
        text = "".join(state.text)
        calls = state.tool_calls() if state.calls else []
        if state.reasoning:
            state.extras["reasoning"] = "".join(state.reasoning)
        usage = state.usage
        out_estimate = in_estimate = 0
        if not usage:
            out_estimate = estimate_tokens(text, state.extras.get("reasoning"), calls)
            in_estimate = sum(estimate_tokens(m.content) for m in request.messages)
        finish = state.finish or ("tool_calls" if calls else "stop")
        return ChatResult.model_construct(
            message=Message.model_construct(
                role="assistant",
                content=text or None,
                tool_calls=calls,
                tool_call_id=None,
                name=None,
            ),
            finish_reason=finish,
            usage=usage_from_openai(usage, estimate_out=out_estimate, estimate_in=in_estimate),
            timing=Timing.model_construct(
                ttft_s=(state.first_at or ended) - started, duration_s=ended - started
            ),
            provider=self.name,
            model=state.model or model,
            cost_usd=0.0,
            attempts=1,
            simulated=SIMULATED_HEADER in response.headers,
            rate_limit=rate_limit_info(response.headers),
            extras=state.extras,
        )

    async def aclose(self) -> None:
        """Close the HTTP client, if this provider made it."""
        await self._sender.aclose()
