"""The lean HTTP/1.1 pool (`swarm.providers._http11.Pool`) against real loopback servers.

The servers are raw TCP listeners written here, so each test says byte for byte what the
server sends: keep-alive, a connection closed while idle, a body that ends with the
connection, a stall, a reply that is not HTTP.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from anyio.abc import SocketStream

from swarm.providers._http11 import Pool

Handler = Callable[[SocketStream, int], Awaitable[None]]
"""Serves one connection; the int counts connections from 1."""

_WHOLE = {"connect": 5.0, "read": None, "write": 5.0, "pool": 5.0}


async def read_request(stream: SocketStream) -> bytes:
    """One request (headers and a Content-Length body), b"" when the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return b""
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await stream.receive()
    return head + b"\r\n\r\n" + body


def reply(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body)
    return head + b"".join(h + b"\r\n" for h in extra) + b"\r\n" + body


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A listener on 127.0.0.1 running `handler` per connection; yields its URL and the
    list of connection numbers seen."""
    seen: list[int] = []
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def serve(stream: SocketStream) -> None:
        seen.append(len(seen) + 1)
        async with stream:
            try:
                await handler(stream, len(seen))
            except (anyio.BrokenResourceError, anyio.EndOfStream, anyio.ClosedResourceError):
                pass

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            yield f"http://127.0.0.1:{port}/v1/chat", seen
        finally:
            tg.cancel_scope.cancel()


async def body_of(response: httpx.Response) -> bytes:
    parts = [chunk async for chunk in response.stream]  # type: ignore[union-attr]
    await response.aclose()
    return b"".join(parts)


async def keep_alive(stream: SocketStream, n: int) -> None:
    while request := await read_request(stream):
        await stream.send(reply(b'{"conn": %d, "len": %d}' % (n, len(request)), b"X-Id: a"))


async def test_a_reply_is_read_and_its_connection_reused() -> None:
    pool = Pool()
    async with serving(keep_alive) as (url, seen):
        for _ in range(3):
            response = await pool.post(url, {"content-type": "application/json"}, b"{}", _WHOLE)
            assert response.status_code == 200
            assert response.headers["x-id"] == "a"
            assert (await body_of(response)).startswith(b'{"conn": 1,')
        await pool.aclose()
    assert seen == [1]


async def test_the_request_names_its_host_path_and_length() -> None:
    got: list[bytes] = []

    async def record(stream: SocketStream, n: int) -> None:
        got.append(await read_request(stream))
        await stream.send(reply(b"ok"))

    pool = Pool()
    async with serving(record) as (url, _):
        port = url.split(":")[2].split("/")[0]
        await body_of(await pool.post(url + "?x=1", {"Authorization": "Bearer k"}, b"abc", _WHOLE))
        await pool.aclose()
    head = got[0].split(b"\r\n")
    assert head[0] == b"POST /v1/chat?x=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{port}".encode() in head
    assert b"Authorization: Bearer k" in head and b"Content-Length: 3" in head
    assert got[0].endswith(b"\r\n\r\nabc")


async def test_a_connection_the_server_closed_while_idle_is_sent_on_again() -> None:
    """As llama.cpp does after 5 s idle: the reply says nothing of closing, then the
    server closes. The next POST goes out on a new connection, and succeeds."""

    async def one_then_close(stream: SocketStream, n: int) -> None:
        await read_request(stream)
        await stream.send(reply(b"conn %d" % n))
        await stream.aclose()

    pool = Pool()
    async with serving(one_then_close) as (url, seen):
        assert await body_of(await pool.post(url, {}, b"", _WHOLE)) == b"conn 1"
        await anyio.sleep(0.05)  # the close reaches the client
        assert await body_of(await pool.post(url, {}, b"", _WHOLE)) == b"conn 2"
        await pool.aclose()
    assert seen == [1, 2]


async def test_an_interim_reply_is_passed_over() -> None:
    async def continue_first(stream: SocketStream, n: int) -> None:
        await read_request(stream)
        await stream.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        await stream.send(reply(b"the answer", b"X-Final: yes"))

    pool = Pool()
    async with serving(continue_first) as (url, _):
        response = await pool.post(url, {}, b"", _WHOLE)
        assert (response.status_code, response.headers.get("x-final")) == (200, "yes")
        assert await body_of(response) == b"the answer"
        await pool.aclose()


async def test_a_body_without_a_length_ends_with_the_connection() -> None:
    async def until_eof(stream: SocketStream, n: int) -> None:
        await read_request(stream)
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ")
        await stream.send(b"part two")

    pool = Pool()
    async with serving(until_eof) as (url, seen):
        assert await body_of(await pool.post(url, {}, b"", _WHOLE)) == b"part one, part two"
        assert await body_of(await pool.post(url, {}, b"", _WHOLE)) == b"part one, part two"
        await pool.aclose()
    assert seen == [1, 2]  # such a connection is never reused


async def test_a_chunked_stream_arrives_piece_by_piece() -> None:
    go_on = anyio.Event()

    async def sse(stream: SocketStream, n: int) -> None:
        await read_request(stream)
        await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await stream.send(b"6\r\nfirst\n\r\n")
        await go_on.wait()  # the client must have read `first` by now
        await stream.send(b"7\r\nsecond\n\r\n0\r\n\r\n")

    pool = Pool()
    async with serving(sse) as (url, _):
        with anyio.fail_after(10):
            response = await pool.post(url, {}, b"", {**_WHOLE, "read": 5.0})
            chunks = response.stream.__aiter__()  # type: ignore[union-attr]
            assert await chunks.__anext__() == b"first\n"
            go_on.set()
            assert await chunks.__anext__() == b"second\n"
            with pytest.raises(StopAsyncIteration):
                await chunks.__anext__()
            await response.aclose()
        await pool.aclose()


async def test_a_stall_past_the_read_timeout_is_a_read_timeout() -> None:
    async def stall(stream: SocketStream, n: int) -> None:
        await read_request(stream)
        await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        await anyio.sleep(30)

    pool = Pool()
    async with serving(stall) as (url, _):
        response = await pool.post(url, {}, b"", {**_WHOLE, "read": 0.3})
        with anyio.fail_after(10), pytest.raises(httpx.ReadTimeout, match=r"0\.3 s"):
            await body_of(response)
        await response.aclose()
        await pool.aclose()


async def test_a_reply_cut_off_mid_body_is_a_protocol_error() -> None:
    async def cut(stream: SocketStream, n: int) -> None:
        await read_request(stream)
        await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")

    pool = Pool()
    async with serving(cut) as (url, _):
        response = await pool.post(url, {}, b"", _WHOLE)
        with anyio.fail_after(10), pytest.raises(httpx.RemoteProtocolError, match="mid-reply"):
            await body_of(response)
        await pool.aclose()


async def test_what_is_not_http_is_a_protocol_error() -> None:
    async def garbage(stream: SocketStream, n: int) -> None:
        await read_request(stream)
        await stream.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await anyio.sleep(5)

    pool = Pool()
    async with serving(garbage) as (url, _):
        with anyio.fail_after(10), pytest.raises(httpx.RemoteProtocolError, match="malformed"):
            await pool.post(url, {}, b"", _WHOLE)
        await pool.aclose()


async def test_a_closed_port_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connecting is refused
        with pytest.raises(httpx.ConnectError, match=f"127.0.0.1:{port}"):
            await Pool().post(f"http://127.0.0.1:{port}/v1", {}, b"", _WHOLE)


async def test_a_response_closed_before_its_end_closes_its_connection() -> None:
    async def long_body(stream: SocketStream, n: int) -> None:
        while await read_request(stream):
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfive!")
            await anyio.sleep(0.2)
            await stream.send(b"more!")

    pool = Pool()
    async with serving(long_body) as (url, seen):
        response = await pool.post(url, {}, b"", _WHOLE)
        await response.aclose()  # the rest never read: the socket is not pooled
        assert await body_of(await pool.post(url, {}, b"", _WHOLE)) == b"five!more!"
        await pool.aclose()
    assert seen == [1, 2]


async def test_a_cancelled_read_closes_the_connection() -> None:
    async def slow(stream: SocketStream, n: int) -> None:
        while await read_request(stream):
            await anyio.sleep(0.5)
            await stream.send(reply(b"late"))

    pool = Pool()
    async with serving(slow) as (url, seen):
        with anyio.move_on_after(0.1):
            await pool.post(url, {}, b"", _WHOLE)
        assert await body_of(await pool.post(url, {}, b"", _WHOLE)) == b"late"
        await pool.aclose()
    assert seen == [1, 2]


async def test_an_idle_connection_past_keepalive_is_not_reused() -> None:
    pool = Pool(keepalive_s=0.0)
    async with serving(keep_alive) as (url, seen):
        await body_of(await pool.post(url, {}, b"", _WHOLE))
        await body_of(await pool.post(url, {}, b"", _WHOLE))
        await pool.aclose()
    assert seen == [1, 2]


async def test_a_header_with_a_line_break_is_refused_before_sending() -> None:
    async def must_not_be_called(stream: SocketStream, n: int) -> None:
        raise AssertionError("nothing may be sent")

    pool = Pool()
    async with serving(must_not_be_called) as (url, seen):
        with pytest.raises(httpx.LocalProtocolError, match="x-evil"):
            await pool.post(url, {"x-evil": "a\r\nHost: elsewhere"}, b"", _WHOLE)
        await pool.aclose()
    assert seen == []


async def test_a_body_larger_than_the_socket_buffer_is_sent_whole() -> None:
    big = bytes(range(256)) * (32 * 1024)  # 8 MiB: the send buffer fills, and drains

    async def sizes(stream: SocketStream, n: int) -> None:
        request = await read_request(stream)
        body = request.partition(b"\r\n\r\n")[2]
        await stream.send(reply(b"%d %d" % (len(body), body == big)))

    pool = Pool()
    async with serving(sizes) as (url, _):
        with anyio.fail_after(30):
            assert await body_of(await pool.post(url, {}, big, _WHOLE)) == b"%d 1" % len(big)
        await pool.aclose()


async def test_only_http_urls_are_posted_to() -> None:
    with pytest.raises(httpx.UnsupportedProtocol, match="ftp://"):
        await Pool().post("ftp://127.0.0.1/x", {}, b"", _WHOLE)
