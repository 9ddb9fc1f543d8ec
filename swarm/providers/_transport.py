"""An httpx transport backed by one aiohttp session: httpx's API, aiohttp's pool.

httpcore's connection pool does work proportional to connections plus waiters on every
request and collapses at hundreds of concurrent streams (measured here: 17x the ideal
makespan and 3.5 ms CPU per call at 300 agents, against 1.06x and 0.25 ms for raw
aiohttp). `AiohttpTransport` keeps `httpx.AsyncClient` as the public surface (users and
tests still pass clients and `MockTransport`s) and does the I/O with aiohttp.

- One `aiohttp.ClientSession` per transport, made lazily inside the running event loop.
- Bodies are handed to httpx raw (`auto_decompress=False`): httpx decodes
  `Content-Encoding` itself.
- Every aiohttp/OS failure is re-raised as the matching httpx exception, so callers only
  ever catch httpx's.
- Under trio (no aiohttp there) requests go through httpx's default transport instead.

swarm's own POSTs go through the leaner `swarm.providers._http11.Pool`; this transport is
for `httpx.AsyncClient`s (`default_async_client`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx
import sniffio

__all__ = ["AiohttpTransport", "ResponseStream", "default_async_client"]

_TimeoutKey = tuple[float | None, float | None, float | None]


def _map_error(
    exc: BaseException, request: httpx.Request | None, *, reading: bool
) -> httpx.HTTPError:
    """The httpx exception that says what the aiohttp/OS failure `exc` means."""
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(msg, request=request)
    if isinstance(exc, asyncio.TimeoutError):  # SocketTimeoutError, ServerTimeoutError
        return httpx.ReadTimeout(msg, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(msg, request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(msg, request=request)
    if isinstance(exc, aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(msg, request=request)
    if isinstance(exc, OSError | aiohttp.ClientOSError):
        if reading:
            return httpx.ReadError(msg, request=request)
        return httpx.WriteError(msg, request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(msg, request=request)
    return httpx.RemoteProtocolError(msg, request=request)


_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
_STALE = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
"""Sending on a connection the server closed: what a stale pooled connection raises."""
_STALE_RETRIES = 2


class ResponseStream(httpx.AsyncByteStream):
    """An aiohttp response body as httpx sees it; closing releases the connection."""

    __slots__ = ("_request", "_response")

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request | None) -> None:
        self._response = response
        self._request = request

    async def read(self) -> bytes:
        """The whole body in one aiohttp read."""
        try:
            return await self._response.read()
        except _ERRORS as exc:
            raise _map_error(exc, self._request, reading=True) from exc

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    return
                yield chunk
        except _ERRORS as exc:
            raise _map_error(exc, self._request, reading=True) from exc

    async def aclose(self) -> None:
        # release() closes the connection instead of pooling it if the body was not read
        # to the end, so an abandoned stream never leaves a half-read socket in the pool.
        # It never waits: closing is not a checkpoint, so it needs no shielding.
        self._response.release()


class _Response(httpx.Response):
    """A response whose whole body, when it needs no decoding, is read in one aiohttp call
    (httpx's `aread` goes through three generator layers per network read)."""

    async def aread(self) -> bytes:
        stream = self.stream
        if (
            type(stream) is ResponseStream
            and not hasattr(self, "_content")
            and not (self.is_stream_consumed or self.is_closed)
            and self.headers.get("content-encoding", "identity") == "identity"
        ):
            self.is_stream_consumed = True
            self._content = await stream.read()
            self._num_bytes_downloaded = len(self._content)
            await self.aclose()
        return await super().aread()


_AUTO_HEADERS = ("accept", "accept-encoding", "user-agent", "content-type")
"""What aiohttp adds to a request that lacks them (its own values); httpx's are sent."""
_AUTO_HEADER_SET = frozenset(_AUTO_HEADERS)


def _skipped(headers: Mapping[str, str] | list[tuple[str, str]]) -> tuple[str, ...] | None:
    """The headers aiohttp must not add to this request: those of `_AUTO_HEADERS` it lacks
    (None when it has them all, as every provider's POST does: aiohttp's skip list costs
    a sort, a multidict and a copy of the headers per request, ~7 % of a call's CPU)."""
    names = headers.keys() if isinstance(headers, Mapping) else {k.lower() for k, _ in headers}
    return None if names >= _AUTO_HEADER_SET else _AUTO_HEADERS  # a set comparison, in C


async def _stream_body(stream: httpx.AsyncByteStream) -> AsyncIterator[bytes]:
    async for chunk in stream:
        yield chunk


class AiohttpTransport(httpx.AsyncBaseTransport):
    """`httpx.AsyncBaseTransport` doing its I/O through one pooled aiohttp session."""

    def __init__(
        self,
        *,
        max_connections: int | None = None,
        keepalive_s: float = 60.0,
        max_per_host: int | None = None,
    ) -> None:
        """`max_connections=None` means unbounded (the router bounds concurrency)."""
        self._limit = max_connections or 0
        self._limit_per_host = max_per_host or 0
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fallback: httpx.AsyncHTTPTransport | None = None
        self._timeouts: dict[_TimeoutKey, aiohttp.ClientTimeout] = {}

    def _new_session(self, loop: asyncio.AbstractEventLoop) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._limit,
            limit_per_host=self._limit_per_host,
            keepalive_timeout=self._keepalive_s,
            ttl_dns_cache=300,
        )
        self._loop = loop
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
            raise_for_status=False,
        )
        return self._session

    def client_timeout(self, t: Mapping[str, float | None]) -> aiohttp.ClientTimeout:
        """aiohttp's timeout for httpx's `timeout` extension (`httpx.Timeout.as_dict()`)."""
        key = (t.get("connect"), t.get("read"), t.get("pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            connect, read, pool = key
            # aiohttp's `connect` covers waiting for a pooled slot plus connecting.
            total_connect = None if connect is None or pool is None else connect + pool
            timeout = aiohttp.ClientTimeout(
                total=None, connect=total_connect, sock_connect=connect, sock_read=read
            )
            self._timeouts[key] = timeout
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio (or another non-asyncio loop)
            return await self._fallback_transport().handle_async_request(request)
        data: Any
        headers = request.headers.multi_items()
        try:
            data = request.content
        except httpx.RequestNotRead:
            data = _stream_body(request.stream)  # type: ignore[arg-type]
            # aiohttp frames a streamed body itself and refuses a preset header
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
        limits = self.client_timeout(request.extensions.get("timeout") or {})
        url = str(request.url)
        return await self._send(loop, request.method, url, headers, data, limits, request)

    async def _send(
        self,
        loop: asyncio.AbstractEventLoop,
        method: str,
        url: str,
        headers: Any,
        data: Any,
        limits: aiohttp.ClientTimeout,
        request: httpx.Request,
    ) -> httpx.Response:
        session = self._session
        if session is None or self._loop is not loop:
            session = self._new_session(loop)
        skip = _skipped(headers)
        for attempt in range(_STALE_RETRIES + 1):
            try:
                response = await session.request(
                    method,
                    url,
                    headers=headers,
                    data=data,
                    timeout=limits,
                    allow_redirects=False,
                    compress=None,
                    skip_auto_headers=skip,
                )
                break
            except _STALE as exc:
                # a pooled connection the server had closed while idle (llama.cpp closes
                # them after 5 s): nothing was read, so it is sent again on another one
                connecting = isinstance(exc, aiohttp.ClientConnectorError)
                if connecting or attempt == _STALE_RETRIES or not isinstance(data, bytes):
                    raise _map_error(exc, request, reading=False) from exc
            except _ERRORS as exc:
                raise _map_error(exc, request, reading=False) from exc
        return _Response(
            response.status,
            headers=response.raw_headers,
            stream=ResponseStream(response, request),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode(),
            },
            request=request,
        )

    def _fallback_transport(self) -> httpx.AsyncHTTPTransport:
        if self._fallback is None:
            self._fallback = httpx.AsyncHTTPTransport()
        return self._fallback

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
        fallback, self._fallback = self._fallback, None
        if fallback is not None:
            await fallback.aclose()


def default_async_client(**kwargs: Any) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` on `AiohttpTransport` (httpx's own transport under trio)."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = "asyncio"  # constructed outside a loop: the transport decides per loop
    if library != "asyncio" or "transport" in kwargs:
        return httpx.AsyncClient(**kwargs)
    return httpx.AsyncClient(transport=AiohttpTransport(), **kwargs)
