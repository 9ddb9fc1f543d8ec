"""The OpenAI-compatible chat-completions adapter (OpenAI, Azure, Groq, Cerebras, sim, ...).

What differs from any `Endpoint`: the `/chat/completions` body, `Authorization: Bearer`
(or Azure's `api-key`), streamed chunks whose deltas carry text, reasoning and pieces of
tool calls, and OpenAI's `usage` object (estimated when a server sends none).

Chunk folding is the hot path of every real model call: per-chunk work is kept to a dict
lookup or two, and a network read's chunks are parsed in one `loads`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from swarm._tokens import estimate_input_tokens, estimate_tokens
from swarm.config import ProviderConfig
from swarm.errors import ReplyShapeError
from swarm.messages import ChatRequest, Message, ToolCall, Usage
from swarm.model import FirstTokenCallback
from swarm.providers._endpoint import Endpoint, Reply, loads
from swarm.providers._exchange import error_from_response
from swarm.providers._repetition import REPETITION, LoopWatch
from swarm.providers._sse import iter_sse_batches
from swarm.providers._tool_text import result_text

__all__ = ["OpenAIProvider", "from_config", "usage_from_openai"]


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


def _messages_json(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as OpenAI takes them; an assistant turn whose calls were read from its
    text is sent as written, and its calls' results as user turns (`Message.written`)."""
    out: list[dict[str, Any]] = []
    in_text: dict[str, str] = {}  # id -> tool name, of the calls sent back as text
    for m in messages:
        if m.written is not None:
            out.append({"role": "assistant", "content": m.written})
            in_text.update((c.id, c.name) for c in m.tool_calls)
        elif m.role == "tool" and m.tool_call_id in in_text:
            tool = in_text[m.tool_call_id]
            out.append({"role": "user", "content": result_text(tool, m.content)})
        else:
            out.append(_message_json(m))
    return out


def _add_settings(body: dict[str, Any], request: ChatRequest) -> None:
    """The model settings beyond temperature and max_tokens, as OpenAI names them."""
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.reasoning_effort is not None:
        body["reasoning_effort"] = request.reasoning_effort
    if request.parallel_tool_calls is not None and request.tools:
        body["parallel_tool_calls"] = request.parallel_tool_calls


def _looped(reply: Reply, text_loop: LoopWatch, arguments_loop: LoopWatch) -> bool:
    """Does the reply's text, or its last tool call's arguments, loop on itself? If so,
    it is cut after the loop's first round and ends as `finish_reason: "repetition"`."""
    kept = text_loop.cut(reply.text)
    if kept is not None:
        reply.text[:] = [kept]
    elif reply.calls:
        parts = reply.calls[max(reply.calls)]  # [id, name, argument pieces...]
        kept = arguments_loop.cut(parts, skip=2)
        if kept is not None:
            parts[2:] = [kept]
    if kept is None:
        return False
    reply.finish = REPETITION
    return True


class _Stream(Reply):
    """Folds streamed chunks in, a network read's batch at a time."""

    __slots__ = ()

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
                elif self.model and not chunk.get("usage"):
                    continue  # gateways (LiteLLM, OpenRouter) put usage beside a delta
            elif "error" in chunk:
                return chunk
            # first, last and usage-only chunks: the fields that come once
            if not self.model:
                self.model = chunk.get("model") or ""
            usage = chunk.get("usage")
            if usage:
                self.usage = usage
            self.add_figures(chunk)
        return None

    def add_figures(self, chunk: dict[str, Any]) -> None:
        """The provider figures that ride on the last chunks (Groq, Cerebras, llama.cpp)."""
        x_groq = chunk.get("x_groq")
        if x_groq and x_groq.get("usage"):
            self.extras["x_groq"] = x_groq["usage"]
        for key in ("time_info", "timings"):
            if chunk.get(key):
                self.extras[key] = chunk[key]

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
        if type(deltas) is not list:
            raise ReplyShapeError(f"`tool_calls` must be a list, got {_json_kind(deltas)}")
        for d in deltas:
            if type(d) is not dict:
                raise ReplyShapeError(
                    f"a `tool_calls` entry must be an object, got {_json_kind(d)}"
                )
            idx = d.get("index", 0)
            if type(idx) is not int or idx < 0:
                raise ReplyShapeError(
                    f"a tool call's `index` must be a whole number, got {idx!r:.40}"
                )
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


def _json_kind(value: Any) -> str:
    """What a JSON value is, as its API's docs would say it."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return kinds.get(type(value), "null" if value is None else "a number")


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
    # the fall-backs: `input_tokens` / `output_tokens` (Responses-style gateways),
    # DeepSeek's `prompt_cache_hit_tokens`, a top-level `reasoning_tokens`
    return Usage.model_construct(
        input_tokens=raw.get("prompt_tokens") or raw.get("input_tokens") or 0,
        output_tokens=raw.get("completion_tokens") or raw.get("output_tokens") or 0,
        reasoning_tokens=completion_details.get("reasoning_tokens")
        or raw.get("reasoning_tokens")
        or 0,
        cached_input_tokens=prompt_details.get("cached_tokens")
        or raw.get("prompt_cache_hit_tokens")
        or 0,
    )


class OpenAIProvider(Endpoint[_Stream]):
    """An OpenAI-compatible `/chat/completions` endpoint; one pooled client per provider."""

    kind = "openai"

    def path(self) -> str:
        return "/chat/completions"

    def auth_header(self, api_key: str, style: str | None) -> dict[str, str]:
        """`bearer` (the default), or Azure's `api-key`."""
        if style == "api-key":
            return {"api-key": api_key}
        return {"authorization": f"Bearer {api_key}"}

    def new_reply(self, on_first: FirstTokenCallback | None) -> _Stream:
        return _Stream(on_first)

    def payload(self, model: str, request: ChatRequest) -> bytes:
        body: dict[str, Any] = {
            "model": model,
            "messages": _messages_json(request.messages),
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
        _add_settings(body, request)
        return orjson.dumps(body)  # compact UTF-8, as json.dumps(separators, ensure_ascii=False)

    async def read_stream(self, response: httpx.Response, reply: _Stream, model: str) -> None:
        text_loop, arguments_loop = LoopWatch(), LoopWatch()
        async for batch in iter_sse_batches(response):
            if b"[DONE]" in batch:
                reply.done = True
            error = reply.add_batch(self._decode(batch, response, model))
            if error is not None:
                raise error_from_response(response, self._peer, model, body=error)
            reply.progress()
            if _looped(reply, text_loop, arguments_loop):
                return  # closing the stream stops the server's generation too

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
                raise self.malformed("malformed stream chunk (not a JSON object)", response, model)
            out.append(chunk)
        return out

    def read_whole(self, response: httpx.Response, reply: _Stream, model: str) -> None:
        """A non-streamed reply: one JSON body holding the whole message."""
        try:
            body = loads(response.content)
            choice = body["choices"][0]
            msg = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            raise self.malformed("malformed response body", response, model) from None
        reply.first()
        if msg.get("content"):
            reply.text.append(msg["content"])
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        if reasoning:
            reply.reasoning.append(reasoning)
        calls = msg.get("tool_calls") or []
        if type(calls) is not list:
            raise ReplyShapeError(f"`tool_calls` must be a list, got {_json_kind(calls)}")
        for i, c in enumerate(calls):
            if type(c) is not dict:
                raise ReplyShapeError(
                    f"a `tool_calls` entry must be an object, got {_json_kind(c)}"
                )
            fn = c.get("function") or {}
            reply.calls[i] = [c.get("id") or "", fn.get("name") or "", fn.get("arguments") or ""]
        reply.finish = choice.get("finish_reason") or ""
        reply.model = body.get("model") or ""
        reply.usage = body.get("usage") or {}
        reply.add_figures(body)

    def usage(
        self, request: ChatRequest, reply: _Stream, text: str, calls: list[ToolCall]
    ) -> Usage:
        # Groq's counts may come only inside `x_groq`
        counts = reply.usage or reply.extras.get("x_groq")
        if counts:
            return usage_from_openai(counts, estimate_out=0, estimate_in=0)
        return usage_from_openai(
            None,
            estimate_out=estimate_tokens(text, reply.extras.get("reasoning"), calls),
            estimate_in=estimate_input_tokens(request),
        )


def from_config(name: str, config: ProviderConfig, api_key: str | None) -> OpenAIProvider:
    """The provider `[providers.NAME]` describes (`kind = "openai"`)."""
    return OpenAIProvider(
        name,
        config.base_url,
        api_key=api_key,
        auth_style=config.auth_style,
        query=config.query,
        headers=config.headers or None,
        connect_timeout_s=config.connect_timeout_s,
        stall_timeout_s=config.stall_timeout_s,
        token_timeout_s=config.token_timeout_s,
        total_timeout_s=config.total_timeout_s,
        first_token_timeout_s=config.first_token_timeout_s,
    )
