"""The virtual clock of `swarm simulate --virtual`: an asyncio event loop whose time jumps to
the next timer whenever nothing is ready to run.

Why asyncio and not trio's `MockClock`: the same seeded simulation must give the same
makespan every time, and trio shuffles its run queue on purpose (a coin flip per batch)
and breaks ties between timers that expire at the same moment by `id()` of their cancel
scopes, i.e. by memory address. On a virtual clock ties are the rule (every call paused
until the same Retry-After, every tool taking the same 0.5 s), so which task took a freed
slot first changed from run to run, and with it the share of 429s a gate saw, its cuts
and the makespan (1.09-2.15x the fault-free run with one seed). asyncio runs ready
callbacks first in, first out and orders timers by time, then by when they were set:
a program that does the same thing gets the same schedule.

As with trio's autojump, time jumps whenever every task waits, including on a worker
thread or a socket: work outside the loop takes no virtual time. Real I/O still works
(the selector is polled before each jump).
"""

from __future__ import annotations

import asyncio
import selectors

__all__ = ["VirtualLoop"]


class _JumpingSelector(selectors.DefaultSelector):
    """Polls the real selector; instead of blocking until a timer is due, moves `now` to it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:  # no timer: only a thread or a socket can wake the loop
            return super().select(None)
        self.now += timeout
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time (`time()` starts at 0 and moves only by jumps)."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now
