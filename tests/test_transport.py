"""AiohttpTransport against a real loopback aiohttp server."""

from __future__ import annotations

import gzip
import http.server
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import anyio
import httpx
import pytest
import trio
from aiohttp import web

from swarm._serve import serve_app as serve
from swarm.providers._transport import AiohttpTransport, default_async_client


class State:
    def __init__(self) -> None:
        self.released = anyio.Event()
        """The server saw the client drop a stream it was still sending."""
        self.go_on = anyio.Event()


def make_app(state: State) -> web.Application:
    app = web.Application()

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {
                "method": request.method,
                "path": request.path_qs,
                "body": body.decode(),
                "x-test": request.headers.get("x-test"),
                "content-type": request.headers.get("content-type"),
            },
            headers={"x-reply": "yes"},
        )

    async def chunks(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"first")
        await state.go_on.wait()  # the client must see `first` before this
        await resp.write(b"second")
        return resp

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        try:
            while True:
                await resp.write(b"x" * 1024)
                await anyio.sleep(0.02)
        except (ConnectionError, OSError):
            state.released.set()
        return resp

    async def stall(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"a")
        await anyio.sleep(30)
        return resp

    async def drop(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-length": "100"})
        await resp.prepare(request)
        await resp.write(b"only ten b")
        assert request.transport is not None
        request.transport.close()
        return resp

    async def gzipped(request: web.Request) -> web.Response:
        body = gzip.compress(b"hello " * 100)
        return web.Response(body=body, headers={"content-encoding": "gzip"})

    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/chunks", chunks)
    app.router.add_get("/endless", endless)
    app.router.add_get("/stall", stall)
    app.router.add_get("/drop", drop)
    app.router.add_get("/gzip", gzipped)
    return app


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, State]]:
    state = State()
    async with serve(make_app(state)) as url:
        yield url, state


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=AiohttpTransport(), timeout=10) as c:
        yield c


async def test_round_trip_keeps_method_body_headers_and_query(
    server: tuple[str, State], client: httpx.AsyncClient
) -> None:
    url, _ = server
    resp = await client.post(
        f"{url}/echo", params={"q": "1"}, json={"a": 1}, headers={"x-test": "hi"}
    )
    assert resp.status_code == 200
    assert resp.headers["x-reply"] == "yes"
    assert resp.json() == {
        "method": "POST",
        "path": "/echo?q=1",
        "body": '{"a":1}',
        "x-test": "hi",
        "content-type": "application/json",
    }
    assert resp.http_version == "HTTP/1.1"
    assert resp.reason_phrase == "OK"


async def test_streamed_request_body(server: tuple[str, State], client: httpx.AsyncClient) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"part1-"
        yield b"part2"

    resp = await client.put(f"{server[0]}/echo", content=body())
    assert resp.json()["body"] == "part1-part2"


async def test_chunks_arrive_as_they_are_sent(
    server: tuple[str, State], client: httpx.AsyncClient
) -> None:
    url, state = server
    seen: list[bytes] = []
    async with client.stream("GET", f"{url}/chunks") as resp:
        async for chunk in resp.aiter_raw():
            seen.append(chunk)
            state.go_on.set()  # the server only sends the rest once we got the first part
    assert b"".join(seen) == b"firstsecond"
    assert seen[0] == b"first"


async def test_gzip_is_decoded_once_by_httpx(
    server: tuple[str, State], client: httpx.AsyncClient
) -> None:
    resp = await client.get(f"{server[0]}/gzip")
    assert resp.content == b"hello " * 100


async def test_connection_refused_is_connect_error(client: httpx.AsyncClient) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        await client.get(f"http://127.0.0.1:{port}/")


async def test_silence_is_read_timeout(
    server: tuple[str, State], client: httpx.AsyncClient
) -> None:
    with anyio.fail_after(10):
        async with client.stream("GET", f"{server[0]}/stall", timeout=0.3) as resp:
            with pytest.raises(httpx.ReadTimeout):
                async for _ in resp.aiter_raw():
                    pass


async def test_dropped_connection_is_protocol_error(
    server: tuple[str, State], client: httpx.AsyncClient
) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        await client.get(f"{server[0]}/drop")


async def test_closing_a_stream_early_releases_the_connection(
    server: tuple[str, State],
) -> None:
    url, state = server
    transport = AiohttpTransport()
    async with httpx.AsyncClient(transport=transport) as client:
        async with client.stream("GET", f"{url}/endless") as resp:
            async for _ in resp.aiter_raw():
                break
        with anyio.fail_after(5):
            await state.released.wait()  # the server saw the socket close
        # and the pool can still serve requests
        assert (await client.get(f"{url}/echo")).status_code == 200


async def test_cancelled_read_releases_the_connection(
    server: tuple[str, State],
) -> None:
    url, state = server
    async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
        with anyio.move_on_after(0.2):
            async with client.stream("GET", f"{url}/endless") as resp:
                async for _ in resp.aiter_raw():
                    pass
        with anyio.fail_after(5):
            await state.released.wait()


async def test_aclose_closes_the_session(server: tuple[str, State]) -> None:
    transport = AiohttpTransport(max_connections=4)
    client = httpx.AsyncClient(transport=transport)
    await client.get(f"{server[0]}/echo")
    session = transport._session
    assert session is not None and not session.closed
    await client.aclose()
    assert session.closed


async def test_default_client_uses_aiohttp_under_asyncio() -> None:
    client = default_async_client(timeout=3)
    try:
        assert isinstance(client._transport, AiohttpTransport)
    finally:
        await client.aclose()


@contextmanager
def threaded_http_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_under_trio_httpx_does_the_io() -> None:
    async def main(url: str) -> tuple[bool, bytes, bytes]:
        client = default_async_client()
        plain = not isinstance(client._transport, AiohttpTransport)
        async with client:
            a = (await client.get(url)).content
        # a transport made for asyncio still works when it ends up under trio
        async with httpx.AsyncClient(transport=AiohttpTransport()) as other:
            b = (await other.get(url)).content
        return plain, a, b

    with threaded_http_server() as url:
        assert trio.run(main, url) == (True, b"ok", b"ok")


async def test_a_pooled_connection_the_server_closed_is_not_a_failure() -> None:
    """llama.cpp's server closes idle keep-alive connections after 5 s; a request that met
    one as it closed failed ("Can not write request body", "Server disconnected"): it is
    sent again on a new connection. Here the server hangs up once on a connection's first
    request, before answering, as a closing one does."""
    answered, hung_up = 0, False

    async def handle(stream: anyio.abc.SocketStream) -> None:
        nonlocal answered, hung_up
        async with stream:
            for n in range(2):
                request = b""
                while b"\r\n\r\n" not in request:
                    request += await stream.receive()
                if n == 0 and answered and not hung_up:
                    hung_up = True
                    return  # hang up without an answer
                answered += 1
                await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handle)
            async with httpx.AsyncClient(transport=AiohttpTransport(keepalive_s=60)) as client:
                for _ in range(3):
                    response = await client.post(f"http://127.0.0.1:{port}/", content=b"{}")
                    assert response.text == "ok"
            tg.cancel_scope.cancel()
    assert answered == 3
