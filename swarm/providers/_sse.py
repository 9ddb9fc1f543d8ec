"""Reading a provider's HTTP response: SSE data, error statuses, rate-limit headers.

Shared by the OpenAI-compatible and Anthropic adapters.

- `iter_sse_batches` yields the `data` of server-sent events. It follows the same rules
  as httpx-sse's decoder (fields, `data` lines joined by newlines, comments skipped) but
  works on bytes straight from `aiter_bytes` and hands over a batch per network read:
  on the hot path (hundreds of one-token events per call) that is a fraction of the CPU
  of decoding text and yielding one event object at a time.
- `loads` is orjson's parser: stream chunks are the hot path.
- `error_from_response` / `error_from_exception` turn HTTP statuses and httpx failures into
  `ProviderError` / `RateLimited` with `retryable` set for the router.
- `rate_limit_info` and `retry_after_s` read `x-ratelimit-*` and `Retry-After`.
Error text never includes the API key (it is scrubbed if a server echoes it).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import httpx
import orjson

from swarm.errors import ProviderError, RateLimited
from swarm.messages import RateLimitInfo, ToolCall

__all__ = [
    "error_from_exception",
    "error_from_response",
    "estimate_tokens",
    "iter_sse_batches",
    "loads",
    "malformed",
    "parse_duration_s",
    "rate_limit_info",
    "retry_after_s",
]


class _Named(Protocol):
    name: str
    _secret: str


async def iter_sse_batches(response: httpx.Response) -> AsyncIterator[list[bytes]]:
    """The `data` of the SSE events in `response`, a list per network read.

    Batching per read keeps the per-event cost to a few byte operations: a fast provider
    sends dozens of one-token events in one TCP segment.
    """
    pending = b""
    async for chunk in _body(response):
        if pending:
            chunk = pending + chunk
        if b"\r" in chunk:
            chunk = _normalise_newlines(chunk)
        events = chunk.split(b"\n\n")
        pending = events.pop()
        batch: list[bytes] = []
        for event in events:
            if event[:6] == b"data: " and b"\n" not in event:
                batch.append(event[6:])  # the common case: one `data: ` line
            else:
                data = _event_data(event)
                if data is not None:
                    batch.append(data)
        if batch:
            yield batch
    data = _event_data(pending.rstrip(b"\r\n"))
    if data is not None:
        yield [data]


def _body(response: httpx.Response) -> AsyncIterable[bytes]:
    """The body's chunks as they arrive: straight from the transport's stream when there
    is no Content-Encoding to undo, which skips two generator layers per network read."""
    if response.headers.get("content-encoding", "identity") == "identity":
        stream = response.stream
        if isinstance(stream, httpx.AsyncByteStream):
            return stream
    return response.aiter_bytes()


def _normalise_newlines(chunk: bytes) -> bytes:
    """CRLF and CR line ends as LF; a trailing CR stays (its LF may be in the next read)."""
    tail = chunk[-1:] == b"\r"
    if tail:
        chunk = chunk[:-1]
    chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return chunk + b"\r" if tail else chunk


def _event_data(event: bytes) -> bytes | None:
    """The joined `data` lines of one event (None if it has none), per the SSE rules."""
    data: list[bytes] = []
    for line in event.split(b"\n"):
        if line[:5] == b"data:":
            data.append(line[6:] if line[5:6] == b" " else line[5:])
        # `event:`, `id:`, `retry:` and `:` comments carry nothing we use
    return b"\n".join(data) if data else None


loads: Callable[[bytes | str], Any] = orjson.loads
"""Parse exactly one JSON value (orjson: 2-3x the stdlib on stream chunks); raises
ValueError (orjson.JSONDecodeError) on anything else."""


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration_s(value: str | None) -> float | None:
    """Seconds in `1s`, `6m0s`, `250ms`, `1h2m3.5s` or a bare number; None if unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def rate_limit_info(headers: httpx.Headers) -> RateLimitInfo | None:
    """The quota a provider reported in `x-ratelimit-*` headers, or None if it sent none."""
    found: dict[bytes, str] = {}
    for key, value in headers.raw:  # one pass; Headers.get scans the list per lookup
        key = key.lower()
        if key.startswith(b"x-ratelimit-"):
            found[key[12:]] = value.decode("latin-1")
    if not found:
        return None
    return RateLimitInfo.model_construct(
        remaining_requests=_int(found.get(b"remaining-requests")),
        remaining_tokens=_int(found.get(b"remaining-tokens")),
        reset_requests_s=parse_duration_s(found.get(b"reset-requests")),
        reset_tokens_s=parse_duration_s(found.get(b"reset-tokens")),
    )


def retry_after_s(headers: httpx.Headers) -> float | None:
    """How long a 429 asks us to wait: Retry-After (seconds or date), -ms, or reset headers."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
            except (TypeError, ValueError, IndexError):
                pass
    info = rate_limit_info(headers)
    if info is None:
        return None
    if info.remaining_requests == 0 and info.reset_requests_s is not None:
        return info.reset_requests_s
    if info.remaining_tokens == 0 and info.reset_tokens_s is not None:
        return info.reset_tokens_s
    resets = [r for r in (info.reset_requests_s, info.reset_tokens_s) if r is not None]
    return max(resets) if resets else None


def _scrub(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


def _server_message(response: httpx.Response, body: Any) -> str:
    """The server's own error message from a JSON error body, else a snippet of the text."""
    if body is None:
        try:
            body = json.loads(response.content)
        except ValueError:
            text = response.text.strip()
            return text[:300] or (response.reason_phrase or "")
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("type") or json.dumps(err)[:300]
            return str(msg)
        if isinstance(err, str):
            return err
    return str(body)[:300]


def error_from_response(
    response: httpx.Response, provider: _Named, model: str, *, body: Any = None
) -> ProviderError:
    """The error an HTTP error status (or an in-stream error event) means for the router."""
    status = response.status_code
    message = _scrub(_server_message(response, body), provider._secret)
    if status == 429 or (body is not None and _is_rate_limit(body)):
        return RateLimited(
            f"rate limited (429): {message}",
            provider=provider.name,
            model=model,
            retry_after=retry_after_s(response.headers),
        )
    if status < 400:  # an error event inside a 200 stream: the server gave up mid-reply
        return ProviderError(
            f"error in stream: {message}",
            provider=provider.name,
            model=model,
            status=status,
            kind="http",
            retryable=True,
        )
    retryable = status >= 500 or status in (408, 409)
    return ProviderError(
        f"HTTP {status}: {message}",
        provider=provider.name,
        model=model,
        status=status,
        kind="http",
        retryable=retryable,
    )


def _is_rate_limit(body: Any) -> bool:
    err = body.get("error") if isinstance(body, dict) else None
    return isinstance(err, dict) and err.get("type") in ("rate_limit_error", "rate_limit_exceeded")


def malformed(what: str, provider: _Named, model: str, response: httpx.Response) -> ProviderError:
    """A reply that cannot be parsed: retryable, since the next attempt may be fine."""
    return ProviderError(
        what,
        provider=provider.name,
        model=model,
        status=response.status_code,
        kind="malformed",
        retryable=True,
    )


def error_from_exception(exc: httpx.HTTPError, provider: _Named, model: str) -> ProviderError:
    """The error a transport failure means: connect, stall (no bytes in time) or a drop."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        kind, what = "connect", "could not connect"
    elif isinstance(exc, httpx.ReadTimeout):
        kind, what = "stall", "no bytes within the stall timeout"
    elif isinstance(exc, httpx.TimeoutException):
        kind, what = "timeout", "timed out"
    elif isinstance(exc, httpx.DecodingError):
        kind, what = "malformed", "undecodable response body"
    else:
        kind, what = "connect", "connection failed"
    detail = _scrub(str(exc), provider._secret)
    return ProviderError(
        f"{what} ({type(exc).__name__}: {detail})" if detail else f"{what} ({type(exc).__name__})",
        provider=provider.name,
        model=model,
        kind=kind,
        retryable=True,
    )


def estimate_tokens(*parts: str | Iterable[ToolCall] | None) -> int:
    """A rough token count (4 characters each) for servers that report no usage."""
    chars = 0
    for part in parts:
        if part is None:
            continue
        if isinstance(part, str):
            chars += len(part)
        else:
            chars += sum(len(c.name) + len(c.arguments) for c in part)
    return (chars + 3) // 4


SIMULATED_HEADER = "x-swarm-simulated"
"""Sent by `swarm sim serve`, so clients label simulated replies as such."""
