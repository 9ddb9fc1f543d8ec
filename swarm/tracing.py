"""Which tracer swarm's spans go to.

A run installs its own `TracerProvider` (one per run, so two runs in one process keep
separate trace files); code that makes spans asks `tracer()` at the time it needs one.
With no run active, spans go to OpenTelemetry's global provider (a no-op unless the user
configured one).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import trace

__all__ = ["tracer", "use_tracer"]

_current: ContextVar[trace.Tracer | None] = ContextVar("swarm_tracer", default=None)


def tracer() -> trace.Tracer:
    """The tracer of the active run, else one from the global provider."""
    return _current.get() or trace.get_tracer("swarm")


@contextmanager
def use_tracer(provider: trace.TracerProvider) -> Iterator[trace.Tracer]:
    """Send spans made in this context (and tasks started from it) to `provider`."""
    t = provider.get_tracer("swarm")
    token = _current.set(t)
    try:
        yield t
    finally:
        _current.reset(token)
