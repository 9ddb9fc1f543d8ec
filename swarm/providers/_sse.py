"""Server-sent events: the `data` of each event in a streamed HTTP response.

`iter_sse_batches` follows the same rules as httpx-sse's decoder (fields, `data` lines
joined by newlines, comments skipped) but works on bytes straight from the transport and
hands over a batch per network read: on the hot path (hundreds of one-token events per
call) that is a fraction of the CPU of decoding text and yielding one event object at a
time. What the data means is each adapter's business. An event, and the whole stream,
are bounded in size (`swarm.providers._bounds`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from swarm.providers._bounds import (
    MAX_EVENT_BYTES,
    MAX_REPLY_BYTES,
    body_chunks,
    event_too_large,
    reply_too_large,
)

__all__ = ["MAX_EVENT_BYTES", "iter_sse_batches"]


async def iter_sse_batches(response: httpx.Response) -> AsyncIterator[list[bytes]]:
    """The `data` of the SSE events in `response`, a list per network read.

    Batching per read keeps the per-event cost to a few byte operations: a fast provider
    sends dozens of one-token events in one TCP segment.
    """
    pending = b""
    total = 0
    async for chunk in body_chunks(response):
        total += len(chunk)
        if total > MAX_REPLY_BYTES:
            raise reply_too_large()
        if pending:
            chunk = pending + chunk
        if b"\r" in chunk:
            chunk = _normalise_newlines(chunk)
        events = chunk.split(b"\n\n")
        pending = events.pop()
        if len(pending) > MAX_EVENT_BYTES:
            raise event_too_large()
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
