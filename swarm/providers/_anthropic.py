"""The Anthropic Messages API adapter (`/v1/messages`), streaming by default.

What differs from any `Endpoint`: our OpenAI-shaped messages become Anthropic's (system
messages become the top-level `system`, tool results become `tool_result` blocks in a user
turn, assistant tool calls become `tool_use` blocks); the event stream (`message_start`,
`content_block_*`, `message_delta`, `message_stop`) folds back into a reply; usage counts
cache reads and writes apart; quota comes in `anthropic-ratelimit-*` headers. Failures map
as for any endpoint (529 "overloaded" is retryable like any 5xx).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import httpx

from swarm.config import ProviderConfig
from swarm.errors import ReplyShapeError
from swarm.messages import ChatRequest, Message, RateLimitInfo, ToolCall, Usage
from swarm.model import FirstTokenCallback
from swarm.providers._endpoint import Endpoint, Reply, loads
from swarm.providers._exchange import error_from_response, rate_limit_info
from swarm.providers._sse import iter_sse_batches

__all__ = ["AnthropicProvider", "anthropic_rate_limit", "from_config", "to_anthropic"]

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
_MALFORMED = "malformed stream event"
_TOOL_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


_THINKING_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
"""Extended-thinking `budget_tokens` for each reasoning effort (1024 is the API's minimum)."""


def _add_settings(body: dict[str, Any], request: ChatRequest) -> None:
    """Model settings as the Messages API takes them: `top_p`, `thinking` with a token
    budget (max_tokens grows to leave room for an answer), `disable_parallel_tool_use`."""
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.reasoning_effort is not None:
        budget = _THINKING_BUDGET[request.reasoning_effort]
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = max(body["max_tokens"], budget + DEFAULT_MAX_TOKENS)
    if request.parallel_tool_calls is False and request.tools:
        choice = dict(body.get("tool_choice") or {"type": "auto"})
        choice["disable_parallel_tool_use"] = True
        body["tool_choice"] = choice


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


def _index(event: dict[str, Any]) -> int:
    """A tool-use block's `index` (a key of `Reply.calls`, sorted with the others)."""
    index = event.get("index", 0)
    if type(index) is not int or index < 0:
        raise ReplyShapeError(
            f"a content block's `index` must be a whole number, got {index!r:.40}"
        )
    return index


class _Events(Reply):
    """Folds Messages API events (or a whole message) in."""

    __slots__ = ()

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
                parts = self.calls.setdefault(_index(event), ["", ""])
                parts.append(delta.get("partial_json", ""))
            elif dkind == "thinking_delta":
                self.first()
                self.reasoning.append(delta.get("thinking", ""))
        elif kind == "content_block_start":
            block = event["content_block"]
            if block.get("type") == "tool_use":
                self.first()
                parts = [block.get("id", ""), block.get("name", "")]
                if block.get("input"):  # a non-streamed input arrives whole
                    parts.append(json.dumps(block["input"]))
                self.calls[_index(event)] = parts
            elif block.get("type") == "text" and block.get("text"):
                self.first()
                self.text.append(block["text"])
        elif kind == "message_start":
            message = event.get("message") or {}
            self.model = message.get("model") or ""
            self.usage.update(message.get("usage") or {})
        elif kind == "message_delta":
            self.finish = (event.get("delta") or {}).get("stop_reason") or self.finish
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if v})
        elif kind == "message_stop":
            self.done = True
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
                self.reasoning.append(block.get("thinking", ""))
        self.finish = body.get("stop_reason") or ""
        self.model = body.get("model") or ""
        self.usage = body.get("usage") or {}


class AnthropicProvider(Endpoint[_Events]):
    """Anthropic's Messages API; one pooled client per provider."""

    kind = "anthropic"
    default_base_url = "https://api.anthropic.com"

    def path(self) -> str:
        return "/messages" if self.base_url.endswith("/v1") else "/v1/messages"

    def fixed_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def auth_header(self, api_key: str, style: str | None) -> dict[str, str]:
        """`x-api-key` (the default), or `bearer`."""
        if style == "bearer":
            return {"authorization": f"Bearer {api_key}"}
        return {"x-api-key": api_key}

    def new_reply(self, on_first: FirstTokenCallback | None) -> _Events:
        return _Events(on_first)

    def payload(self, model: str, request: ChatRequest) -> bytes:
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
        _add_settings(body, request)
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    async def read_stream(self, response: httpx.Response, reply: _Events, model: str) -> None:
        async for batch in iter_sse_batches(response):
            for data in batch:
                try:
                    error = reply.add(self._event(data, response, model))
                except (KeyError, TypeError, AttributeError):
                    raise self.malformed(_MALFORMED, response, model) from None
                if error is not None:
                    raise error_from_response(response, self._peer, model, body=error)
            reply.progress()

    def read_whole(self, response: httpx.Response, reply: _Events, model: str) -> None:
        try:
            reply.add_message(self._event(response.content, response, model))
        except (KeyError, TypeError, AttributeError):
            raise self.malformed(_MALFORMED, response, model) from None

    def _event(self, data: bytes, response: httpx.Response, model: str) -> dict[str, Any]:
        try:
            event = loads(data)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            raise self.malformed(_MALFORMED, response, model)
        return event

    def usage(
        self, request: ChatRequest, reply: _Events, text: str, calls: list[ToolCall]
    ) -> Usage:
        u = reply.usage
        cached = u.get("cache_read_input_tokens") or 0
        # Anthropic counts cache reads and writes apart from input_tokens; ours includes them.
        input_tokens = (u.get("input_tokens") or 0) + cached
        input_tokens += u.get("cache_creation_input_tokens") or 0
        return Usage.model_construct(
            input_tokens=input_tokens,
            output_tokens=u.get("output_tokens") or 0,
            reasoning_tokens=0,
            cached_input_tokens=cached,
        )

    def finish_reason(self, reply: _Events, calls: list[ToolCall]) -> str:
        return _FINISH.get(reply.finish, reply.finish or "stop")

    def rate_limit(self, headers: httpx.Headers) -> RateLimitInfo | None:
        return anthropic_rate_limit(headers)


def from_config(name: str, config: ProviderConfig, api_key: str | None) -> AnthropicProvider:
    """The provider `[providers.NAME]` describes (`kind = "anthropic"`)."""
    return AnthropicProvider(
        name,
        config.base_url,
        api_key=api_key,
        query=config.query,
        headers=config.headers or None,
        connect_timeout_s=config.connect_timeout_s,
        stall_timeout_s=config.stall_timeout_s,
        token_timeout_s=config.token_timeout_s,
        total_timeout_s=config.total_timeout_s,
        first_token_timeout_s=config.first_token_timeout_s,
    )
