"""swarm's egress proxy: what a sandboxed command's connections go through, and the rule
that lets each one out or refuses it.

One connection at a time, on a stream a lane accepted (`swarm._sandbox._egress`):

- `CONNECT host:port` (HTTPS, and whatever else tunnels): checked, then a raw tunnel;
- a plain HTTP request with an absolute URL (`GET http://host/path`): checked, sent on as
  origin-form with `Connection: close` (one request per connection, so a kept-alive
  connection to the proxy cannot switch hosts behind the check);
- a forwarded loopback port: the stream is the connection itself, to `127.0.0.1:PORT`.

A refusal is a `403` whose body says what was refused and which key allows it, and a line
in the lane's `denied` list (the tool result's note, the span's attribute). A name that
is allowed but resolves to a loopback, link-local or unspecified address is refused too
(DNS rebinding would otherwise reach the host's own services).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import ByteStream

from swarm.config._run import is_loopback_host, parse_endpoint

__all__ = ["AllowList", "forward", "serve_proxy"]

_HEAD_LIMIT = 64 * 1024
_HEAD_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 15.0
_CHUNK = 65536
_HOP_HEADERS = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization"}
)


@dataclass(frozen=True)
class AllowList:
    """The `HOST:PORT` entries of `[sandbox] allow`, parsed; `network` names the mode in
    refusals."""

    entries: tuple[tuple[str, int | None], ...]
    network: str

    @classmethod
    def parse(cls, entries: Sequence[str], network: str) -> AllowList:
        return cls(tuple(parse_endpoint(e) for e in entries), network)

    @property
    def loopback_ports(self) -> tuple[int, ...]:
        """Host loopback ports forwarded into the sandbox."""
        ports = {p for h, p in self.entries if p is not None and is_loopback_host(h)}
        return tuple(sorted(ports))

    def refusal(self, host: str, port: int) -> str | None:
        """Why a connection to `host:port` is refused, or None when allowed."""
        host = host.lower().strip("[]")
        for pattern, allowed_port in self.entries:
            if allowed_port is not None and allowed_port != port:
                continue
            if host == pattern or (pattern.startswith("*.") and fnmatch.fnmatch(host, pattern)):
                return None
            if is_loopback_host(pattern) and is_loopback_host(host):
                return None
        return f"not in [sandbox] allow (network = {self.network})"


async def _resolve(host: str, port: int, rules: AllowList) -> tuple[str | None, str | None]:
    """(address to connect to, None) or (None, why refused)."""
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return None, f"cannot resolve {host}: {exc.strerror or exc}"
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        return None, f"cannot resolve {host}"
    if not is_loopback_host(host.strip("[]")):
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if ip.is_loopback or ip.is_link_local or ip.is_unspecified:
                return None, f"{host} resolves to {address}, a local address"
    return addresses[0], None


async def _read_head(stream: ByteStream) -> tuple[bytes, bytes]:
    """The request head (up to the blank line) and whatever followed it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > _HEAD_LIMIT:
            raise ValueError("request head too long")
        data += await stream.receive(_CHUNK)
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _target(head: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, head to send upstream) of a proxy request; ValueError when it
    is not one."""
    lines = head.split(b"\r\n")
    method, target, version = lines[0].decode("latin-1").split(" ", 2)
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return method, host.strip("[]"), int(port), b""
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        raise ValueError(f"not a proxy request: {target[:80]}")
    authority, slash, path = rest.partition("/")
    host, colon, port = authority.rpartition(":") if "]" not in authority[-1:] else ("", "", "")
    if not colon or not port.isdigit():
        host, port = authority, "80"
    kept = [ln for ln in lines[1:] if ln.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
    first = f"{method} {slash}{path} {version}".encode("latin-1")
    upstream = b"\r\n".join([first, *kept, b"Connection: close"]) + b"\r\n\r\n"
    return method, host.strip("[]"), int(port), upstream


async def _reply(stream: ByteStream, status: str, body: str) -> None:
    data = body.encode() + b"\n"
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(data)}\r\n"
    await stream.send(head.encode() + b"Connection: close\r\n\r\n" + data)


async def serve_proxy(client: ByteStream, rules: AllowList, denied: list[str]) -> None:
    """Serve one proxy connection from the sandbox (see the module)."""
    async with client:
        try:
            with anyio.fail_after(_HEAD_TIMEOUT_S):
                head, rest = await _read_head(client)
            method, host, port, upstream_head = _target(head)
        except (ValueError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError):
            return await _reply(client, "400 Bad Request", "swarm sandbox: not a proxy request")
        why = rules.refusal(host, port)
        address = None
        if why is None:
            address, why = await _resolve(host, port, rules)
        if address is None:
            note = f"connection to {host}:{port} refused: {why}"
            if note not in denied:
                denied.append(note)
            return await _reply(client, "403 Forbidden", f"swarm sandbox: {note}")
        try:
            with anyio.fail_after(_CONNECT_TIMEOUT_S):
                upstream = await anyio.connect_tcp(address, port)
        except (OSError, TimeoutError) as exc:
            return await _reply(client, "502 Bad Gateway", f"swarm sandbox: {host}:{port}: {exc}")
        async with upstream:
            if method == "CONNECT":
                await client.send(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                await upstream.send(upstream_head)
            if rest:
                await upstream.send(rest)
            await _relay(client, upstream)


async def forward(client: ByteStream, port: int) -> None:
    """A forwarded loopback port: `client` joined to the host's `127.0.0.1:port`."""
    async with client:
        try:
            upstream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            return
        async with upstream:
            await _relay(client, upstream)


async def _relay(a: ByteStream, b: ByteStream) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump, a, b)
        tg.start_soon(_pump, b, a)


async def _pump(source: ByteStream, sink: ByteStream) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
        await sink.send_eof()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
