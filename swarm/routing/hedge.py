"""The hedged race: a backup candidate races a slow primary, and the loser is cancelled.

`race` starts the primary; if no first token (or result) arrives within `delay`, and the
primary has not ended, the backup starts too. Whichever produces its first token first
wins, and the other's cancel scope is cancelled. A `wait` span of kind `hedge` covers the
time both run, and records the winner. A primary beaten by its backup counts as a failure
on its breaker, so a provider that hangs stops being tried first after a few calls
instead of costing every call the hedge delay. The backup may be the primary itself (the
tier's last resort): a second call to the same candidate. Errors leave the race as themselves, never
wrapped in an exception group.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from opentelemetry import trace

from swarm.messages import ChatResult
from swarm.model import FirstTokenCallback
from swarm.routing.candidate import Call, Target
from swarm.tracing import semconv as sc
from swarm.tracing.waits import start_wait

__all__ = ["Attempt", "race"]

Attempt = Callable[[Target, Call, FirstTokenCallback | None], Awaitable[ChatResult]]
"""One attempt on one candidate; calls the callback on its first token."""


class _Race:
    __slots__ = ("decided", "ended", "errors", "hedge_span", "refs", "results", "scopes", "winner")

    def __init__(self, refs: tuple[str, str]) -> None:
        self.refs = refs
        self.decided = anyio.Event()
        self.scopes = (anyio.CancelScope(), anyio.CancelScope())
        self.results: list[ChatResult | None] = [None, None]
        self.errors: list[Exception | None] = [None, None]
        self.ended = [False, False]
        self.winner: int | None = None
        self.hedge_span: trace.Span | None = None

    def first(self, idx: int) -> None:
        if self.winner is not None:
            return
        self.winner = idx
        self.scopes[1 - idx].cancel()
        if self.hedge_span is not None:
            self.hedge_span.set_attribute(sc.HEDGE_WINNER, self.refs[idx])
            self.hedge_span.end()
            self.hedge_span = None
        self.decided.set()


async def race(attempt: Attempt, t: Target, backup: Target, call: Call, delay: float) -> ChatResult:
    """Run `attempt` on `t`, and on `backup` too if `t` is still silent after `delay`."""
    state = _Race((t.ref, backup.ref))
    async with anyio.create_task_group() as tg:
        tg.start_soon(_racer, attempt, state, 0, t, call)
        with anyio.move_on_after(delay):
            await state.decided.wait()
        if state.winner is None and not state.ended[0] and backup.breaker.allow():
            state.hedge_span = start_wait(sc.WAIT_HEDGE)
            tg.start_soon(_racer, attempt, state, 1, backup, call)
    if state.hedge_span is not None:
        state.hedge_span.end()
    if state.winner == 1 and backup is not t:  # the primary was silent past the backup's
        # first token: a stall
        t.breaker.failure()
    if state.winner is not None and (res := state.results[state.winner]) is not None:
        return res
    err = state.errors[state.winner if state.winner is not None else 0] or state.errors[1]
    assert err is not None
    raise err


async def _racer(attempt: Attempt, state: _Race, idx: int, t: Target, call: Call) -> None:
    with state.scopes[idx]:
        try:
            res = await attempt(t, call, lambda: state.first(idx))
        except Exception as exc:  # kept, so it leaves the race as itself, not in a group
            state.errors[idx] = exc
        else:
            state.first(idx)
            state.results[idx] = res
    state.ended[idx] = True
    if idx == 0 or state.ended[0]:
        state.decided.set()
