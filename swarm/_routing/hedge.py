"""The hedged race: backups race a silent attempt, and the losers are cancelled.

`race` starts the primary and watches how it streams. Two silences start a backup:

- no first token within `Delays.first` (a hang): the backup, and after each further
  silence (`first` growing by a quarter each time) one more, while none has a first token;
- a stream that started but has been silent longer than `Delays.gap` (a stall): the gap
  comes from the candidate's own inter-token profile (`Target.stall_delay`).

While a backup is pending, the racers contend: the first to show progress (a first
token, or the stalled stream's next token) wins and the others' cancel scopes are
cancelled, so a call costs about the silence that started the backup plus the backup's
own first token, not the stall timeout. At most `Delays.most` backups per race. Only the
winner's result (and usage) leaves the race; a cancelled stream's tokens are never counted.
Progress reaches the race through `swarm.providers._progress` (each network read that
brings tokens) and the first-token callback.

A `wait` span of kind `hedge` covers each contention, with the winner and why it began
(`first_token` or `stall`). A primary beaten by a backup on another candidate counts as a
failure on its breaker, so a provider that hangs stops being tried first after a few calls.
The backup may be the primary itself (the tier's last resort): more calls to the same
candidate. Errors leave the race as themselves, never wrapped in an exception group.

A loser is not a failure: each racer's task carries `lost_race` (a context variable),
which says whether the race cancelled it, so the attempt's `chat` span records
`swarm.hedge.outcome = "lost"` with its status unset instead of an error. A real error
of an arm (a 5xx, a reset) stays an error.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

import anyio
from opentelemetry import trace

from swarm._routing.candidate import Call, Target
from swarm._tracing import semconv as sc
from swarm._tracing.waits import start_wait
from swarm.messages import ChatResult
from swarm.model import FirstTokenCallback
from swarm.providers._progress import stream_progress

__all__ = ["Attempt", "Delays", "lost_race", "race"]

Attempt = Callable[[Target, Call, FirstTokenCallback | None], Awaitable[ChatResult]]
"""One attempt on one candidate; calls the callback on its first token."""

lost_race: ContextVar[Callable[[], bool] | None] = ContextVar("lost_race", default=None)
"""In a racer's task: whether the race has cancelled this racer because another won."""

_GROWTH = 1.25  # each further backup for a hang waits a quarter longer again


@dataclass(frozen=True, slots=True)
class Delays:
    """When a race starts a backup."""

    first: float
    """Silence before any first token."""
    gap: float | None
    """Silence between the leading stream's tokens (None: stalls are not hedged)."""
    most: int
    """Backups one race may start."""


class _Race:
    def __init__(self) -> None:
        self.targets: list[Target] = []
        self.scopes: list[anyio.CancelScope] = []
        self.results: list[ChatResult | None] = []
        self.errors: list[Exception | None] = []
        self.last: list[float] = []  # when each racer last made progress (0: never)
        self.contenders: set[int] = set()
        self.leader: int | None = None  # the contender whose stream has started
        self.changed = anyio.Event()
        self.span: trace.Span | None = None
        self.started_at = 0.0

    def add(self, t: Target) -> int:
        idx = len(self.targets)
        self.targets.append(t)
        self.scopes.append(anyio.CancelScope())
        self.results.append(None)
        self.errors.append(None)
        self.last.append(0.0)
        self.contenders.add(idx)
        self.started_at = anyio.current_time()
        return idx

    def signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def progress(self, idx: int) -> None:
        if idx not in self.contenders:  # a loser's last read, before its cancel lands
            return
        now = anyio.current_time()
        if len(self.contenders) > 1:
            self._decide(idx)
        elif self.leader == idx and self.last[idx]:
            self.targets[idx].observe_gap(now - self.last[idx])
        self.leader = idx
        self.last[idx] = now
        # no wake-up: the race's loop reads `due` again when its wait ends, so a stream's
        # tokens cost no turn of the loop each (only an end or a new contender does)

    def _decide(self, idx: int) -> None:
        for j in self.contenders - {idx}:
            self.scopes[j].cancel()
        self.contenders = {idx}
        if self.span is not None:
            self.span.set_attribute(sc.HEDGE_WINNER, self.targets[idx].ref)
            self.span.end()
            self.span = None

    def ended(self, idx: int, result: ChatResult | None, error: Exception | None) -> None:
        if result is not None:
            self.progress(idx)  # a whole reply is progress too
            self.results[idx] = result
        else:
            self.errors[idx] = error
            self.contenders.discard(idx)
            if self.leader == idx:
                self.leader = None
        self.signal()

    def winner(self) -> int | None:
        if len(self.contenders) == 1:
            (idx,) = self.contenders
            if self.results[idx] is not None:
                return idx
        return None

    def due(self, delays: Delays, hedges: int) -> float:
        """When the next backup starts, if nothing changes before."""
        if hedges >= delays.most:
            return math.inf
        if self.leader is None or len(self.contenders) > 1:
            return self.started_at + delays.first * _GROWTH**hedges
        if delays.gap is None:
            return math.inf
        return self.last[self.leader] + delays.gap

    def hedge(self, reason: str) -> None:
        if self.span is None:
            self.span = start_wait(sc.WAIT_HEDGE)
            self.span.set_attribute(sc.HEDGE_REASON, reason)


async def race(
    attempt: Attempt, t: Target, backup: Target, call: Call, delays: Delays
) -> ChatResult:
    """Run `attempt` on `t`, and on `backup` too whenever the leading stream falls silent
    (see the module docstring); the first to make progress wins each contention."""
    state = _Race()
    hedges = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(_racer, attempt, state, state.add(t), call)
        while state.contenders and state.winner() is None:
            wait = state.due(delays, hedges) - anyio.current_time()
            if wait > 0:  # progress since may have moved `due` on: looked at again
                with anyio.move_on_after(wait):
                    await state.changed.wait()
                continue
            if not backup.breaker.allow():
                hedges = delays.most
                continue
            state.hedge(sc.HEDGE_FIRST_TOKEN if state.leader is None else sc.HEDGE_STALL)
            hedges += 1
            tg.start_soon(_racer, attempt, state, state.add(backup), call)
        if len(state.targets) > 1:  # only losers are left (a lone racer has ended)
            tg.cancel_scope.cancel()
    if state.span is not None:
        state.span.end()
    won = state.winner()
    if won is not None:
        if state.targets[won] is not t and state.errors[0] is None:
            t.breaker.failure()  # the primary was silent past a backup's progress: a stall
        result = state.results[won]
        assert result is not None
        return result
    err = next((e for e in reversed(state.errors) if e is not None), None)
    err = state.errors[0] or err
    assert err is not None
    raise err


async def _racer(attempt: Attempt, state: _Race, idx: int, call: Call) -> None:
    stream_progress.set(lambda: state.progress(idx))  # this task's context only
    lost_race.set(lambda: state.scopes[idx].cancel_called)
    result: ChatResult | None = None
    error: Exception | None = None
    with state.scopes[idx]:
        try:
            result = await attempt(state.targets[idx], call, lambda: state.progress(idx))
        except Exception as exc:  # kept, so it leaves the race as itself, not in a group
            error = exc
    if result is not None or error is not None:
        state.ended(idx, result, error)
    else:  # cancelled: a loser
        state.contenders.discard(idx)
