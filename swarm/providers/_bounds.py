"""How large a reply may be: one server-sent event, and a whole reply.

A server that streams one endless event, or an endless stream, would otherwise grow a
buffer until the machine runs out of memory (a 20 MB event took 2.5 s of copying per
call before this bound, and was asked for again on every retry). Real replies are far
below both bounds: a chunk is a token or a tool call's piece, and a reply of 16 MiB is
millions of tokens. Going over is a `ReplyTooLarge`, which `Endpoint.chat` turns into a
`MalformedReply` that is not retried on the same candidate (the next try would be the
same size).
"""

from __future__ import annotations

from collections.abc import AsyncIterable

import httpx

from swarm.errors import ReplyTooLarge

__all__ = [
    "MAX_EVENT_BYTES",
    "MAX_REPLY_BYTES",
    "ReplyTooLarge",
    "aread_bounded",
    "body_chunks",
    "event_too_large",
    "reply_too_large",
]

MAX_EVENT_BYTES = 4 * 1024 * 1024
"""Longest server-sent event (a streamed chunk) accepted."""

MAX_REPLY_BYTES = 16 * 1024 * 1024
"""Most bytes one reply may bring, streamed or whole."""


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


def event_too_large() -> ReplyTooLarge:
    return ReplyTooLarge(f"a streamed event over {_mib(MAX_EVENT_BYTES)} (the bound per chunk)")


def reply_too_large() -> ReplyTooLarge:
    return ReplyTooLarge(f"a reply over {_mib(MAX_REPLY_BYTES)} (the bound per reply)")


def body_chunks(response: httpx.Response) -> AsyncIterable[bytes]:
    """The body's chunks as they arrive: straight from the transport's stream when there
    is no Content-Encoding to undo, which skips httpx's three generator layers per network
    read (`aiter_bytes`, `aiter_raw` and the stream's own)."""
    if response.headers.get("content-encoding", "identity") == "identity":
        stream = response.stream
        if isinstance(stream, httpx.AsyncByteStream):
            return stream
    return response.aiter_bytes()


async def aread_bounded(response: httpx.Response) -> None:
    """`response.aread()` up to `MAX_REPLY_BYTES` (then `response.content` is the body)."""
    parts: list[bytes] = []
    total = 0
    async for chunk in body_chunks(response):
        total += len(chunk)
        if total > MAX_REPLY_BYTES:
            raise reply_too_large()
        parts.append(chunk)
    response._content = b"".join(parts)  # what `Response.aread` does, bounded
