"""The Anthropic Messages API provider (`/v1/messages`), streaming by default.

Translates our OpenAI-shaped messages to Anthropic's (system messages become the top-level
`system`, tool results become `tool_result` blocks in a user turn, assistant tool calls
become `tool_use` blocks), reads the event stream (`message_start`, `content_block_*`,
`message_delta`, `message_stop`) back into a `ChatResult`, and maps failures exactly as
the OpenAI adapter does (529 "overloaded" is retryable like any 5xx). One attempt per
call; the router retries.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from swarm.errors import ProviderError
from swarm.messages import (
    ChatRequest,
    ChatResult,
    Message,
    RateLimitInfo,
    Timing,
    ToolCall,
    Usage,
)
from swarm.model import FirstTokenCallback
from swarm.providers._sse import (
    error_from_response,
    iter_sse_batches,
    loads,
    malformed,
    rate_limit_info,
)
from swarm.providers._transport import Sender

__all__ = ["AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "pause_turn": "stop",
    "refusal": "content_filter",
}
_TOOL_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}


def to_anthropic(messages: list[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system, messages) in Anthropic's shape; consecutive user-side turns are merged."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            system.append(m.content or "")
            continue
        if m.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c.arguments)}
                for c in m.tool_calls
            )
            out.append({"role": "assistant", "content": blocks or ""})
            continue
        if m.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.content or "",
            }
        else:
            block = {"type": "text", "text": m.content or ""}
        last = out[-1] if out else None
        if last is not None and last["role"] == "user":
            if isinstance(last["content"], str):
                last["content"] = [{"type": "text", "text": last["content"]}]
            last["content"].append(block)
        elif m.role == "user":
            out.append({"role": "user", "content": m.content or ""})
        else:
            out.append({"role": "user", "content": [block]})
    return ("\n\n".join(system) if system else None), out


def _reset_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, datetime.fromisoformat(value).timestamp() - time.time())
    except ValueError:
        return None


def anthropic_rate_limit(headers: httpx.Headers) -> RateLimitInfo | None:
    """Quota from `anthropic-ratelimit-*` headers (resets are RFC 3339 times)."""
    requests = headers.get("anthropic-ratelimit-requests-remaining")
    tokens = headers.get("anthropic-ratelimit-tokens-remaining")
    if requests is None and tokens is None:
        return rate_limit_info(headers)
    return RateLimitInfo.model_construct(
        remaining_requests=int(requests) if requests and requests.isdigit() else None,
        remaining_tokens=int(tokens) if tokens and tokens.isdigit() else None,
        reset_requests_s=_reset_s(headers.get("anthropic-ratelimit-requests-reset")),
        reset_tokens_s=_reset_s(headers.get("anthropic-ratelimit-tokens-reset")),
    )


class _Reply:
    """Accumulates one Messages API reply from its events."""

    def __init__(self, on_first: FirstTokenCallback | None) -> None:
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: dict[int, list[str]] = {}  # block index -> [id, name, json parts...]
        self.usage: dict[str, Any] = {}
        self.stop_reason = ""
        self.model = ""
        self.first_at = 0.0
        self.on_first = on_first

    def first(self) -> None:
        if not self.first_at:
            self.first_at = time.perf_counter()
            if self.on_first is not None:
                self.on_first()

    def add(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """Fold one event in; returns the error object of an `error` event."""
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event["delta"]
            dkind = delta.get("type")
            if dkind == "text_delta":
                self.first()
                self.text.append(delta["text"])
            elif dkind == "input_json_delta":
                parts = self.calls.setdefault(event.get("index", 0), ["", ""])
                parts.append(delta.get("partial_json", ""))
            elif dkind == "thinking_delta":
                self.first()
                self.thinking.append(delta.get("thinking", ""))
        elif kind == "content_block_start":
            block = event["content_block"]
            if block.get("type") == "tool_use":
                self.first()
                parts = [block.get("id", ""), block.get("name", "")]
                if block.get("input"):  # a non-streamed input arrives whole
                    parts.append(json.dumps(block["input"]))
                self.calls[event["index"]] = parts
            elif block.get("type") == "text" and block.get("text"):
                self.first()
                self.text.append(block["text"])
        elif kind == "message_start":
            message = event.get("message") or {}
            self.model = message.get("model") or ""
            self.usage.update(message.get("usage") or {})
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if v})
        elif kind == "error":
            return event
        return None

    def add_message(self, body: dict[str, Any]) -> None:
        """A whole (non-streamed) reply."""
        self.first()
        for i, block in enumerate(body.get("content") or ()):
            if block.get("type") == "text":
                self.text.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                self.calls[i] = [block["id"], block["name"], json.dumps(block.get("input", {}))]
            elif block.get("type") == "thinking":
                self.thinking.append(block.get("thinking", ""))
        self.stop_reason = body.get("stop_reason") or ""
        self.model = body.get("model") or ""
        self.usage = body.get("usage") or {}


class AnthropicProvider:
    """Anthropic's Messages API; one pooled client per provider."""

    kind = "anthropic"

    def __init__(
        self,
        name: str,
        base_url: str = "https://api.anthropic.com",
        *,
        api_key: str | None = None,
        auth_style: Literal["x-api-key", "bearer"] = "x-api-key",
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        connect_timeout_s: float = 10.0,
        stall_timeout_s: float = 30.0,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.address = urlsplit(self.base_url).netloc
        path = "/messages" if self.base_url.endswith("/v1") else "/v1/messages"
        self._url = httpx.URL(self.base_url + path, params=dict(query or {}))
        base = {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        base.update(headers or {})
        if api_key:
            if auth_style == "bearer":
                base["authorization"] = f"Bearer {api_key}"
            else:
                base["x-api-key"] = api_key
        self._headers = base
        self._secret = api_key or ""
        self._timeout = httpx.Timeout(
            connect=connect_timeout_s, read=stall_timeout_s, write=stall_timeout_s, pool=None
        )
        self._sender = Sender(client, self._timeout)

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, base_url={self.base_url!r})"

    def _payload(self, model: str, request: ChatRequest) -> bytes:
        system, messages = to_anthropic(request.messages)
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "stream": request.stream,
        }
        if system is not None:
            body["system"] = system
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        if request.tool_choice is not None:
            body["tool_choice"] = _TOOL_CHOICE[request.tool_choice]
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
    ) -> ChatResult:
        body = self._payload(model, request)
        reply = _Reply(on_first_token)
        started = time.perf_counter()
        async with self._sender.exchange(
            self._url, dict(self._headers), body, stream=request.stream, provider=self, model=model
        ) as response:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                async for batch in iter_sse_batches(response):
                    for data in batch:
                        try:
                            error = reply.add(self._event(data, response, model))
                        except (KeyError, TypeError, AttributeError):
                            raise self._malformed(response, model) from None
                        if error is not None:
                            raise error_from_response(response, self, model, body=error)
            else:
                await response.aread()
                try:
                    reply.add_message(self._event(response.content, response, model))
                except (KeyError, TypeError, AttributeError):
                    raise self._malformed(response, model) from None
        return self._result(model, reply, response, started, time.perf_counter())

    def _event(self, data: bytes, response: httpx.Response, model: str) -> dict[str, Any]:
        try:
            event = loads(data)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            raise self._malformed(response, model)
        return event

    def _malformed(self, response: httpx.Response, model: str) -> ProviderError:
        return malformed("malformed stream event", self, model, response)

    def _result(
        self, model: str, reply: _Reply, response: httpx.Response, started: float, ended: float
    ) -> ChatResult:
        calls = [
            ToolCall.model_construct(id=p[0], name=p[1], arguments="".join(p[2:]) or "{}")
            for _, p in sorted(reply.calls.items())
        ]
        u = reply.usage
        cached = u.get("cache_read_input_tokens") or 0
        # Anthropic counts cache reads and writes apart from input_tokens; ours includes them.
        input_tokens = (u.get("input_tokens") or 0) + cached
        input_tokens += u.get("cache_creation_input_tokens") or 0
        extras: dict[str, Any] = {}
        if reply.thinking:
            extras["reasoning"] = "".join(reply.thinking)
        text = "".join(reply.text)
        return ChatResult.model_construct(
            message=Message.model_construct(
                role="assistant",
                content=text or None,
                tool_calls=calls,
                tool_call_id=None,
                name=None,
            ),
            finish_reason=_FINISH.get(reply.stop_reason, reply.stop_reason or "stop"),
            usage=Usage.model_construct(
                input_tokens=input_tokens,
                output_tokens=u.get("output_tokens") or 0,
                reasoning_tokens=0,
                cached_input_tokens=cached,
            ),
            timing=Timing.model_construct(
                ttft_s=(reply.first_at or ended) - started, duration_s=ended - started
            ),
            provider=self.name,
            model=reply.model or model,
            cost_usd=0.0,
            attempts=1,
            simulated=False,
            rate_limit=anthropic_rate_limit(response.headers),
            extras=extras,
        )

    async def aclose(self) -> None:
        """Close the HTTP client, if this provider made it."""
        await self._sender.aclose()
