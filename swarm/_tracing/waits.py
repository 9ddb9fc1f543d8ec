"""Every wait of a run is a `swarm.wait {kind}` span, made here and nowhere else.

A wait is time a step spends not working: for a concurrency slot (`queue`), a rate limit,
a backoff, a hedge, the subtasks it depends on (`dependency`) or the merge queue
(`merge`). When a wait ends because another span finished, it links to that span with
`swarm.link.type=depends_on`, so the critical path follows the real dependency instead of
guessing from timestamps.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager

import anyio
from opentelemetry.trace import Link, Span, SpanContext
from opentelemetry.util.types import AttributeValue

from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer

__all__ = ["depends_on", "holding", "open_waits", "record_wait", "start_wait", "waiting"]


def depends_on(contexts: Sequence[SpanContext]) -> list[Link]:
    """`depends_on` links to the spans that a step waited for."""
    return [Link(c, {sc.LINK_TYPE: sc.LINK_DEPENDS_ON}) for c in contexts if c.is_valid]


def _attrs(kind: str, extra: Mapping[str, AttributeValue] | None) -> dict[str, AttributeValue]:
    return {sc.WAIT_KIND: kind, **(extra or {})}


@contextmanager
def waiting(
    kind: str,
    *,
    links: Sequence[SpanContext] = (),
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Iterator[Span]:
    """A span around a wait; an exception ending the wait (a cancel) is no span error.
    While it lasts it counts in `open_waits` (what the live view shows as waiting now)."""
    _open[kind] = _open.get(kind, 0) + 1
    try:
        with tracer().start_as_current_span(
            f"{sc.WAIT_SPAN} {kind}",
            attributes=_attrs(kind, attributes),
            links=depends_on(links),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span
    finally:
        _open[kind] -= 1


_open: dict[str, int] = {}
"""Waits in progress in this process, by kind (an event loop's tasks, no lock needed)."""


def open_waits() -> dict[str, int]:
    """The waits in progress now, by kind (kinds with none left out)."""
    return {k: n for k, n in _open.items() if n > 0}


@asynccontextmanager
async def holding(limiter: anyio.CapacityLimiter, kind: str) -> AsyncIterator[None]:
    """A place of `limiter` for the block; the time spent waiting for it is a `kind` wait
    (no span when a place is free at once)."""
    try:
        limiter.acquire_nowait()
    except anyio.WouldBlock:
        with waiting(kind):
            await limiter.acquire()
    try:
        yield
    finally:
        limiter.release()


def start_wait(kind: str) -> Span:
    """A wait span to end by hand, for a wait no `with` block encloses (a hedge)."""
    return tracer().start_span(f"{sc.WAIT_SPAN} {kind}", attributes=_attrs(kind, None))


def record_wait(
    kind: str, *, since_ns: int, links: Sequence[SpanContext] = ()
) -> SpanContext | None:
    """Record a wait that already happened, from `since_ns` (`time.time_ns()`) to now."""
    now = time.time_ns()
    if now <= since_ns:
        return None
    span = tracer().start_span(
        f"{sc.WAIT_SPAN} {kind}",
        attributes=_attrs(kind, None),
        links=depends_on(links),
        start_time=since_ns,
    )
    span.end(end_time=now)
    return span.get_span_context()
