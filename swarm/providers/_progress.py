"""Who hears a model call's stream progress: `stream_progress`, told after each network
read (or simulated piece) that brings tokens.

The router's hedged race sets it per attempt, so a stream that falls silent between
tokens is noticed from the candidate's own inter-token profile long before the stall
timeout. None (the default, outside a race) costs one lookup per read.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

__all__ = ["stream_progress", "tell_progress"]

stream_progress: ContextVar[Callable[[], None] | None] = ContextVar("stream_progress", default=None)


def tell_progress() -> None:
    """Tell the current attempt's listener, if any, that tokens came."""
    listener = stream_progress.get()
    if listener is not None:
        listener()
