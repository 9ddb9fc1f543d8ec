"""A lean HTTP/1.1 client for the POSTs swarm sends to model servers.

aiohttp's `ClientSession.request` spends about 0.2 ms of CPU per request (300 agents,
loopback: 0.27 ms per call against 0.085 ms here) on what a provider's POST never uses:
request and response objects with copies of their info, trace signals, a cookie jar,
redirects, automatic headers, a timer per read. At hundreds of calls in flight that is
most of a call's cost, and it is what makes a lockstep wave of calls late. `Pool` does
what these POSTs need and nothing else; llhttp (`httptools`, the parser uvicorn uses)
reads the responses.

- One keep-alive pool per origin; connections are not bounded here (the router's gates
  bound calls), and one idle longer than `keepalive_s` is closed, not reused.
- A reused connection the server had closed while idle (llama.cpp closes them after 5 s)
  is sent on again, on a new connection: nothing of the reply had come.
- A body is read as it arrives; closing a response before its end closes its
  connection, so a half-read socket never goes back to the pool. Closing never waits.
- Timeouts are httpx's (`httpx.Timeout.as_dict()`): `connect` (TLS included), `read`
  (between two reads), `write` (while the request cannot be sent on).
- Failures are httpx's exceptions (`ConnectError`, `ConnectTimeout`, `ReadTimeout`,
  `WriteTimeout`, `ReadError`, `RemoteProtocolError`), so callers catch only httpx's.

No proxies, redirects or cookies: swarm's own POSTs use none (nor did the aiohttp session
they went through before). It runs on asyncio's loop only; `Sender` uses httpx's client
under trio.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import anyio
import httptools
import httpx

__all__ = ["LeanBody", "Pool"]

_STALE_RETRIES = 2
_HIGH_WATER = 1 << 20
"""Bytes of a body buffered, unread, before the socket stops being read."""

_ssl_context: ssl.SSLContext | None = None


def _tls() -> ssl.SSLContext:
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = ssl.create_default_context()
    return _ssl_context


class _Connection(asyncio.Protocol):
    """One socket, one request at a time; llhttp's callbacks fill in the reply."""

    __slots__ = (
        "_drain",
        "_held",
        "_paused",
        "_read_s",
        "_timer",
        "_until",
        "buffered",
        "chunks",
        "closed",
        "complete",
        "error",
        "got_bytes",
        "headers",
        "idle_since",
        "interim",
        "keep_alive",
        "loop",
        "origin",
        "parser",
        "status",
        "transport",
        "until_eof",
        "waiter",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: tuple[str, str, int]) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._paused = False
        self._held = False  # reading paused: the body's reader is behind
        self._timer: asyncio.TimerHandle | None = None
        self._read_s: float | None = None
        self._until = 0.0
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.until_eof = False
        self.complete = False
        self.keep_alive = False
        self.interim = False
        self.got_bytes = False
        self.error: httpx.HTTPError | None = None

    # -- one exchange ----------------------------------------------------------------------

    def begin(self, read_s: float | None) -> None:
        """Ready for a new request, whose reply may take `read_s` between reads."""
        if self.status:  # a reply was read on this connection (llhttp reads the next too)
            self.status = 0
            self.headers = []
            self.until_eof = self.complete = self.got_bytes = False
            self.keep_alive = False
        self._read_s = read_s

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def drained(self, write_s: float | None) -> None:
        """Wait while the socket's send buffer is full (the kernel takes the rest)."""
        while self._paused and not self.closed:
            self._drain = self.loop.create_future()
            try:
                with anyio.fail_after(write_s):
                    await self._drain
            except TimeoutError:
                raise httpx.WriteTimeout("the request could not be sent in time") from None
            finally:
                self._drain = None
        if self.closed and self.error is not None and not self.got_bytes:
            raise self.error

    async def wait(self) -> None:
        """Until llhttp has read more of the reply, or it failed (then raise)."""
        if self.error is not None:
            raise self.error
        self.waiter = waiter = self.loop.create_future()
        if self._read_s is not None:
            self._until = self.loop.time() + self._read_s
            if self._timer is None:
                self._timer = self.loop.call_at(self._until, self._check_read)
        try:
            await waiter
        finally:
            self.waiter = None
        if self.error is not None and not (self.chunks or self.complete):
            raise self.error

    def _check_read(self) -> None:
        """The read timer: one per connection, moved on lazily (a read only sets `_until`)."""
        self._timer = None
        if self.waiter is None or self._read_s is None:
            return
        if self.loop.time() < self._until:
            self._timer = self.loop.call_at(self._until, self._check_read)
            return
        self._fail(httpx.ReadTimeout(f"no data from the server for {self._read_s:g} s"))
        self.close()

    def take(self) -> bytes:
        """The body bytes read so far (and let the socket be read again)."""
        chunks = self.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        if self._held and self.transport is not None:
            self._held = False
            self.transport.resume_reading()
        return data

    def _stop_timer(self) -> None:
        """Closed (by us or the server): no read is waited for any more."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: httpx.HTTPError) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def close(self) -> None:
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self._read_s is not None:
            self._until = self.loop.time() + self._read_s
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed HTTP reply ({exc})"))
            self.close()
            return
        if self.buffered > _HIGH_WATER and not self._held and self.transport is not None:
            self._held = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the socket: the reply ends here, or it was cut off

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        if self.until_eof:  # set with the headers
            self.complete = True  # a body without a length ends with the connection
        elif not self.complete:
            if not self.got_bytes:  # on a reused connection: closed while idle (stale)
                detail = f" ({exc})" if exc is not None else ""
                self._fail(httpx.RemoteProtocolError(f"the server closed the connection{detail}"))
            elif exc is not None:
                self._fail(httpx.ReadError(f"the connection broke ({exc})"))
            else:
                self._fail(httpx.RemoteProtocolError("the server closed the connection mid-reply"))
        self._wake()
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_result(None)

    # -- llhttp's callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # an interim reply (100 Continue): the real one follows
            self.headers = []
            self.interim = True
            return
        self.status = status  # not 0: the headers are read
        framed = False
        for name, value in self.headers:
            low = name.lower()
            if low == b"content-length" or (
                low == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                framed = True
        self.until_eof = not framed and status not in (204, 304)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.complete = True
        # asked now: once llhttp is past the message, it no longer knows
        self.keep_alive = self.parser.should_keep_alive()


class LeanBody(httpx.AsyncByteStream):
    """A reply's body as httpx sees it; closing gives the connection back when the reply
    was read to its end and the server keeps it open, else closes it."""

    __slots__ = ("_conn", "_pool")

    def __init__(self, conn: _Connection, pool: Pool) -> None:
        self._conn = conn
        self._pool = pool

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.chunks:
                yield conn.take()
            elif conn.complete:
                return
            else:
                await conn.wait()

    async def aclose(self) -> None:
        conn = self._conn
        if conn.keep_alive and not conn.closed and not conn.chunks and conn.error is None:
            self._pool.put_back(conn)
            return
        conn.close()


class Pool:
    """Keep-alive connections per origin, and POST over them."""

    def __init__(self, *, keepalive_s: float = 60.0) -> None:
        self._keepalive_s = keepalive_s
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._targets: dict[str, tuple[tuple[str, str, int], bytes]] = {}

    def _target(self, url: str) -> tuple[tuple[str, str, int], bytes]:
        """The origin of `url` and its request line's start and Host header (cached)."""
        known = self._targets.get(url)
        if known is not None:
            return known
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise httpx.UnsupportedProtocol(f"cannot POST to {url!r}: not an http(s) URL")
        port = parts.port or (443 if scheme == "https" else 80)
        path = parts.path or "/"
        if parts.query:
            path = f"{path}?{parts.query}"
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            shown = f"{shown}:{parts.port}"
        head = f"POST {path} HTTP/1.1\r\nHost: {shown}\r\n".encode("ascii")
        known = self._targets[url] = ((scheme, host, port), head)
        return known

    async def post(
        self,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        limits: Mapping[str, float | None],
    ) -> httpx.Response:
        """POST `body` to `url`; the response streams its body (close it: `aclose()`).
        `limits` is httpx's `timeout` extension (`httpx.Timeout.as_dict()`)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # connections belong to the loop that made them
            self._idle.clear()
            self._loop = loop
        origin, start = self._target(url)
        request = start + _header_block(headers, len(body)) + body
        for attempt in range(_STALE_RETRIES + 1):
            conn, reused = await self._connection(loop, origin, limits.get("connect"))
            conn.begin(limits.get("read"))
            try:
                conn.send(request)
                await conn.drained(limits.get("write"))
                while not conn.status:
                    await conn.wait()
            except httpx.RemoteProtocolError:
                conn.close()
                if reused and not conn.got_bytes and attempt < _STALE_RETRIES:
                    continue  # closed by the server while idle: nothing of a reply came
                raise
            except BaseException:
                conn.close()
                raise
            return httpx.Response(
                conn.status,
                headers=conn.headers,
                stream=LeanBody(conn, self),
                extensions={"http_version": b"HTTP/1.1", "reason_phrase": b""},
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connection(
        self, loop: asyncio.AbstractEventLoop, origin: tuple[str, str, int], connect_s: float | None
    ) -> tuple[_Connection, bool]:
        """An idle connection to `origin` if one is alive and fresh, else a new one."""
        idle = self._idle.get(origin)
        if idle:
            oldest = loop.time() - self._keepalive_s
            while idle:
                conn = idle.pop()
                if not conn.closed and conn.idle_since > oldest:
                    return conn, True
                conn.close()
        scheme, host, port = origin
        tls = _tls() if scheme == "https" else None
        try:
            with anyio.fail_after(connect_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, origin),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} in time") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port} ({exc})") from None
        return conn, False

    def put_back(self, conn: _Connection) -> None:
        """An idle connection, its last reply read whole: the next request may take it."""
        if conn.loop is not self._loop:
            conn.close()
            return
        conn.idle_since = conn.loop.time()
        self._idle.setdefault(conn.origin, []).append(conn)

    async def aclose(self) -> None:
        """Close every idle connection (those in use close with their responses)."""
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()


def _header_block(headers: Mapping[str, str], length: int) -> bytes:
    """The request's header lines, `Content-Length` and the blank line. A name or value
    that could end a line is refused: it would let a value write headers of its own."""
    lines = []
    for name, value in headers.items():
        if name.lower() in ("host", "content-length", "transfer-encoding"):
            continue
        line = f"{name}: {value}\r\n"
        if line.count("\n") != 1 or line.count("\r") != 1:
            raise httpx.LocalProtocolError(f"the header {name!r} holds a line break")
        lines.append(line)
    lines.append(f"Content-Length: {length}\r\n\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError as exc:
        raise httpx.LocalProtocolError(f"a header is not latin-1 text ({exc})") from None
