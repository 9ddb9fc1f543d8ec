"""One HTTP exchange with a provider: send the POST, map every failure, read the quota.

- `Sender` posts a request body (with the W3C `traceparent` of the current span) through
  one pooled client and yields the successful response, released on every exit path.
- `error_from_response` / `error_from_exception` / `malformed` turn HTTP statuses, httpx
  failures and unreadable replies into `ProviderError` / `RateLimited` with `retryable`
  set for the router.
- `rate_limit_info` and `retry_after_s` read `x-ratelimit-*` and `Retry-After`.

Error text never includes the API key (it is scrubbed if a server echoes it).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any

import anyio
import httpx
import sniffio
from opentelemetry import baggage, propagate, trace

from swarm.config._duration import parse_duration_s
from swarm.config._secrets import scrub
from swarm.errors import (
    ContextWindowExceeded,
    MalformedReply,
    ProviderError,
    RateLimited,
    ReplyTooLarge,
)
from swarm.messages import RateLimitInfo
from swarm.providers._bounds import aread_bounded
from swarm.providers._http11 import LeanBody, Pool
from swarm.providers._transport import AiohttpTransport, ResponseStream

__all__ = [
    "SIMULATED_HEADER",
    "Exchange",
    "Peer",
    "Sender",
    "error_from_exception",
    "error_from_response",
    "inject_trace_context",
    "malformed",
    "rate_limit_info",
    "retry_after_s",
]

SIMULATED_HEADER = "x-swarm-simulated"
"""Sent by `swarm sim serve`, so clients label simulated replies as such."""


_DEFAULT_TEXTMAP = propagate.get_global_textmap()
_DEFAULT_IS_W3C = [
    p.strip() for p in os.environ.get("OTEL_PROPAGATORS", "tracecontext,baggage").split(",")
] == ["tracecontext", "baggage"]


def inject_trace_context(headers: dict[str, str]) -> None:
    """`opentelemetry.propagate.inject(headers)`: the current span's W3C `traceparent` (and
    `tracestate`). With the default propagators and no baggage set, the header is written
    here, as the W3C propagator writes it, at a fraction of the CPU (the composite
    propagator's round trip was ~2 % of a call); anything else goes through OTel."""
    if (
        not _DEFAULT_IS_W3C
        or propagate.get_global_textmap() is not _DEFAULT_TEXTMAP
        or baggage.get_all()
    ):
        propagate.inject(headers)
        return
    ctx = trace.get_current_span().get_span_context()
    if ctx == trace.INVALID_SPAN_CONTEXT:
        return
    headers["traceparent"] = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    if ctx.trace_state:
        headers["tracestate"] = ctx.trace_state.to_header()


@dataclass(frozen=True, slots=True)
class Peer:
    """The provider at the other end, as errors name it."""

    name: str
    """The provider's configured name."""
    secret: str = ""
    """Its API key, scrubbed from any error text ("" when it has none)."""


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


def _wait_s(text: str, scale: float = 1.0) -> float | None:
    """A Retry-After count of seconds (or ms); None for a negative or non-finite one, which
    no server means: the 429 then counts as one without Retry-After (against
    `max_attempts`), so a server answering every call `Retry-After: -5` is not waited on
    for the whole rate-limit budget."""
    value = float(text) / scale
    return value if 0.0 <= value < math.inf else None


def retry_after_s(headers: httpx.Headers) -> float | None:
    """How long a 429 asks us to wait: Retry-After (seconds or date), -ms, or reset headers."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return _wait_s(ms, 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is not None:
        try:
            return _wait_s(value)
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
    response: httpx.Response, peer: Peer, model: str, *, body: Any = None
) -> ProviderError:
    """The error an HTTP error status (or an in-stream error event) means for the router."""
    status = response.status_code
    message = scrub(_server_message(response, body), (peer.secret,))
    if status == 429 or (body is not None and _is_rate_limit(body)):
        return RateLimited(
            f"rate limited (429): {message}",
            provider=peer.name,
            model=model,
            retry_after=retry_after_s(response.headers),
        )
    if status < 400:  # an error event inside a 200 stream: the server gave up mid-reply
        return ProviderError(
            f"error in stream: {message}",
            provider=peer.name,
            model=model,
            status=status,
            kind="http",
            retryable=True,
        )
    if status in (400, 413) and _is_context_overflow(body or _json(response), message):
        return _context_error(message, peer, model)
    retryable = status >= 500 or status in (408, 409)
    return ProviderError(
        f"HTTP {status}: {message}",
        provider=peer.name,
        model=model,
        status=status,
        kind="http",
        retryable=retryable,
    )


# How endpoints word a prompt over the window: OpenAI and most compatible servers ("maximum
# context length is N tokens ... requested M"), Anthropic ("prompt is too long: M tokens >
# N maximum", "input length and `max_tokens` exceed context limit: a + b > N"), vLLM/TGI.
_OVERFLOW = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|prompt is too long"
    r"|exceed(?:s|ed)? (?:the )?context (?:limit|window)|context window|too many tokens",
    re.IGNORECASE,
)
_LIMIT = re.compile(r"maximum context length is (\d+)|> ?(\d+) maximum|context limit: .*> ?(\d+)")
_REQUESTED = re.compile(r"requested (\d+) tokens|too long: (\d+) tokens")


def _json(response: httpx.Response) -> Any:
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def _is_context_overflow(body: Any, message: str) -> bool:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and err.get("code") == "context_length_exceeded":
        return True
    return _OVERFLOW.search(message) is not None


def _first_int(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    if found is None:
        return None
    return int(next(g for g in found.groups() if g is not None))


def _context_error(message: str, peer: Peer, model: str) -> ContextWindowExceeded:
    return ContextWindowExceeded(
        f"HTTP 400: {message}",
        provider=peer.name,
        model=model,
        limit=_first_int(_LIMIT, message),
        requested=_first_int(_REQUESTED, message),
    )


def _is_rate_limit(body: Any) -> bool:
    err = body.get("error") if isinstance(body, dict) else None
    return isinstance(err, dict) and err.get("type") in ("rate_limit_error", "rate_limit_exceeded")


def malformed(
    what: str, peer: Peer, model: str, response: httpx.Response, *, retryable: bool = True
) -> MalformedReply:
    """A reply that cannot be parsed: retryable (the next attempt may be fine) unless it
    was too large."""
    return MalformedReply(
        what, provider=peer.name, model=model, status=response.status_code, retryable=retryable
    )


def error_from_exception(exc: httpx.HTTPError, peer: Peer, model: str) -> ProviderError:
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
    detail = scrub(str(exc), (peer.secret,))
    return ProviderError(
        f"{what} ({type(exc).__name__}: {detail})" if detail else f"{what} ({type(exc).__name__})",
        provider=peer.name,
        model=model,
        kind=kind,
        retryable=True,
    )


class Sender:
    """How a provider sends its POSTs: one pooled client, and a short path when it is ours.

    With a client the provider made itself, the configuration is known (no auth, hooks,
    cookies or base URL), so requests go straight to a lean HTTP/1.1 `Pool`
    (`swarm.providers._http11`), skipping `AsyncClient.send`'s auth, redirect, cookie-jar
    and hook layers and aiohttp's request machinery (together about two thirds of the
    client's CPU per call); under trio they go through the client. A client passed in by
    the user (or a test's `MockTransport`) always gets the full `client.send`, so its
    settings apply.
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None,
        timeout: httpx.Timeout,
        peer: Peer,
        *,
        keepalive_s: float = 60.0,
    ) -> None:
        """`keepalive_s`: how long an idle pooled connection is kept (shorter than the
        server keeps it, or the next request meets a closed socket)."""
        self._peer = peer
        self._timeout = timeout
        # a whole (non-streamed) reply sends nothing until it is done: no read timeout then
        self._whole_timeout = httpx.Timeout(
            connect=timeout.connect, read=None, write=timeout.write, pool=timeout.pool
        )
        self._extensions = {"timeout": timeout.as_dict()}
        self._whole_extensions = {"timeout": self._whole_timeout.as_dict()}
        self._pool: Pool | None = None
        if client is None:
            self._pool = Pool(keepalive_s=keepalive_s)
            transport = AiohttpTransport(keepalive_s=keepalive_s)  # under trio: httpx's own
            client = httpx.AsyncClient(transport=transport, timeout=timeout)
        self.owned = self._pool is not None
        """True when the client was made here (and so is closed here)."""
        self.client = client
        self._defaults = dict(client.headers)  # httpx's Accept, Accept-Encoding, User-Agent
        self._url: httpx.URL | None = None
        self._url_text = ""  # the last URL posted to, as text (httpx.URL renders per str())

    async def post(
        self, url: httpx.URL, headers: dict[str, str], body: bytes, *, stream: bool = True
    ) -> httpx.Response:
        """POST `body`; the response is streaming: the caller must `aclose()` it.

        `stream=False` (a reply that arrives whole) lifts the read timeout, which would
        otherwise cut off any reply slower than the stall timeout.
        """
        if self._pool is not None and sniffio.current_async_library() == "asyncio":
            if url is not self._url:
                self._url, self._url_text = url, str(url)
            return await self._pool.post(
                self._url_text,
                {**self._defaults, **headers},
                body,
                self._extensions["timeout"] if stream else self._whole_extensions["timeout"],
            )
        timeout = self._timeout if stream else self._whole_timeout
        request = self.client.build_request(
            "POST", url, headers=headers, content=body, timeout=timeout
        )
        return await self.client.send(request, stream=True)

    def exchange(
        self,
        url: httpx.URL,
        headers: dict[str, str],
        body: bytes,
        *,
        stream: bool,
        model: str,
    ) -> Exchange:
        """`async with sender.exchange(...) as response:` POST, and a successful response,
        streaming, to read (see `Exchange`)."""
        return Exchange(self, url, headers, body, stream, model)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
        if self.owned:
            await self.client.aclose()


class Exchange:
    """One POST as an async context manager: entering sends it and gives the successful
    response, streaming, for the caller to read.

    Sends the W3C `traceparent` of the current span. Transport errors and HTTP error
    statuses become `ProviderError`s (inside the block too), and the response is released
    on every exit path, cancellation included. A class, not an `asynccontextmanager`: it
    is on every call's path, and a generator adds a frame to every resumption of it.
    """

    __slots__ = ("_body", "_headers", "_model", "_response", "_sender", "_stream", "_url")

    def __init__(
        self,
        sender: Sender,
        url: httpx.URL,
        headers: dict[str, str],
        body: bytes,
        stream: bool,
        model: str,
    ) -> None:
        self._sender, self._url, self._headers, self._body = sender, url, headers, body
        self._stream, self._model = stream, model
        self._response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        sender, headers, peer = self._sender, self._headers, self._sender._peer
        if self._stream:
            headers["accept"] = "text/event-stream"
        inject_trace_context(headers)
        try:
            response = await sender.post(self._url, headers, self._body, stream=self._stream)
        except httpx.HTTPError as exc:
            raise error_from_exception(exc, peer, self._model) from None
        if response.status_code >= 400:
            try:
                try:
                    await aread_bounded(response)
                except ReplyTooLarge as exc:
                    what = f"HTTP {response.status_code} with {exc}"
                    raise malformed(what, peer, self._model, response, retryable=False) from None
                raise error_from_response(response, peer, self._model)
            except httpx.HTTPError as exc:
                raise error_from_exception(exc, peer, self._model) from None
            finally:
                await _close(response)
        self._response = response
        return response

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        response = self._response
        assert response is not None
        try:
            if isinstance(exc, httpx.HTTPError):
                raise error_from_exception(exc, self._sender._peer, self._model) from None
        finally:
            await _close(response)


_CLOSE_AT_ONCE = (LeanBody, ResponseStream)
"""Bodies whose `aclose` never waits (it has no checkpoint: cancellation cannot land)."""


async def _close(response: httpx.Response) -> None:
    stream = response.stream
    if isinstance(stream, _CLOSE_AT_ONCE):
        # what `Response.aclose` does, without the generator context manager it enters
        # (~5 % of a call's CPU); the close has no checkpoint: cancellation cannot land
        if not response.is_closed:
            response.is_closed = True
            await stream.aclose()
        return
    with anyio.move_on_after(5, shield=True):
        await response.aclose()
