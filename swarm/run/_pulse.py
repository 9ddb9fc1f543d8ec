"""The run's pulse: what the run is doing and when it expects to end, written as it goes.

`beat` appends a `PulseRecord` to the trace's pulse file (`swarm._tracing.pulse`) every
tenth of the time elapsed, at least every minute and at most every second, so a short
run leaves a dozen estimates and a long one one a minute; the live viewer draws them and
`swarm trace summary` says how far each was from the real end. A record costs one small
append: nothing on the path of a model call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from opentelemetry.sdk import trace as sdk_trace

from swarm._tracing.pulse import PulseRecord, append_pulse
from swarm._tracing.waits import open_waits
from swarm.budget import Budget
from swarm.run._live_path import LivePath
from swarm.run._progress import Progress

__all__ = ["every_s", "pulsing", "record"]

_MIN_S, _MAX_S = 1.0, 60.0


def every_s(elapsed_s: float) -> float:
    """The gap before the next record: a tenth of the run so far, within 1 s..60 s."""
    return min(_MAX_S, max(_MIN_S, elapsed_s / 10))


def record(
    started: float,
    live: LivePath | None,
    progress: Progress,
    budget: Budget,
    merge_queued: int,
) -> PulseRecord:
    """The run's state now (`started`: the event loop's time when subtasks began)."""
    forecast = live.forecast() if live is not None else None
    subtasks = {k: v for k, v in progress.counts.items() if v}
    subtasks["total"] = progress.total
    rec = PulseRecord(
        at_ns=getattr(sdk_trace, "time_ns")(),  # noqa: B009 - the spans' clock (virtual in a simulation)
        elapsed_s=round(anyio.current_time() - started, 3),
        waiting=open_waits(),
        merge_queued=merge_queued,
        subtasks=subtasks,
        spent_usd=budget.spent.usd,
        budget_usd=budget.limits.usd,
    )
    if forecast is not None:
        rec.left_s = round(forecast.left_s, 3)
        rec.low_s = round(forecast.low_s, 3)
        rec.high_s = round(forecast.high_s, 3)
        rec.critical = list(forecast.critical[:20])
    return rec


async def _beat(trace_path: Path, now: Callable[[], PulseRecord]) -> None:
    started = anyio.current_time()
    while True:
        await anyio.sleep(every_s(anyio.current_time() - started))
        append_pulse(trace_path, now())


@asynccontextmanager
async def pulsing(trace_path: Path | None, now: Callable[[], PulseRecord]) -> AsyncIterator[None]:
    """Append `now()` to the pulse file of `trace_path` on the schedule above while the
    block runs, and once more as it ends (nothing without a trace)."""
    if trace_path is None:
        yield
        return
    append_pulse(trace_path, now())
    async with anyio.create_task_group() as tg:
        tg.start_soon(_beat, trace_path, now, name="pulse")
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
            append_pulse(trace_path, now())
