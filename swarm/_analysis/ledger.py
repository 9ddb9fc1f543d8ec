"""The latency ledger: where the wall-clock went, in seconds per cause.

Causes: the wait kinds (queue, rate_limit, backoff, hedge, dependency, merge, check), making
and removing worktrees (workspace), time to first token and decode (the two halves of a
model call), tools, tests, and orchestration
(time covered by no step at all: swarm's own work and gaps). The ledger splits the run's
wall-clock with a sweep over time: each instant is shared equally by the work steps (model
calls, tools, tests) running at that instant, or, when none runs, by the waits; so the
figures always add up to the wall-clock, whether computed over the whole run (parallel
steps share; a queue of idle agents does not hide the work being done) or over the
critical path (one step at a time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from swarm._analysis.model import SpanRecord, Trace
from swarm._tracing import semconv as sc

__all__ = ["CATEGORIES", "category_of", "ledger", "ledger_indices"]

_WAITS = (
    sc.WAIT_QUEUE,
    sc.WAIT_RATE_LIMIT,
    sc.WAIT_BACKOFF,
    sc.WAIT_HEDGE,
    sc.WAIT_DEPENDENCY,
    sc.WAIT_MERGE,
    sc.WAIT_CHECK,
)
_WORK = ("workspace", "ttft", "decode", "tools", "tests")
CATEGORIES = (*_WAITS, *_WORK, "orchestration")
_TEST_TOOLS = {"run_tests", "tests", "pytest", "check"}


def category_of(trace: Trace, i: int) -> str | None:
    """The ledger category of a leaf step (chat spans split into ttft and decode: 'chat')."""
    op = trace.op[i]
    if op == sc.OP_CHAT:
        return "chat"
    if op == "wait":
        kind = trace.wait_kind[i] or trace.name[i].rsplit(" ", 1)[-1]
        return kind if kind in CATEGORIES else sc.WAIT_QUEUE
    if op == sc.OP_WORKSPACE:
        return "workspace"
    if op == sc.OP_TOOL:
        tool = trace.tool[i] or trace.name[i].rsplit(" ", 1)[-1]
        return "tests" if tool in _TEST_TOOLS or trace.tests_failed[i] >= 0 else "tools"
    return None


def _intervals(trace: Trace, indices: Iterable[int]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    children = trace.children
    for i in indices:
        cat = category_of(trace, i)
        if cat is None or (i in children and cat != "chat"):
            continue  # containers are covered by their children
        s, e = trace.start[i], trace.end[i]
        if e <= s:
            continue
        if cat == "chat":
            ttft = trace.ttft[i]
            # no first token ever came (a call that failed or stalled before it): all of
            # its time was the wait for one, none of it decode
            mid = s + int(ttft * 1e9) if ttft >= 0 else e
            mid = min(max(mid, s), e)
            if mid > s:
                out.append((s, mid, "ttft"))
            if e > mid:
                out.append((mid, e, "decode"))
        else:
            out.append((s, e, cat))
    return out


def ledger_indices(trace: Trace, indices: Iterable[int] | None = None) -> dict[str, float]:
    """Ledger over the given span indices (all spans when None), in seconds."""
    result = dict.fromkeys(CATEGORIES, 0.0)
    if not len(trace):
        return result
    lo, hi = trace.start_ns, trace.end_ns
    idx = range(len(trace)) if indices is None else indices
    events: list[tuple[int, int, int]] = []
    cats = list(CATEGORIES)
    code = {c: n for n, c in enumerate(cats)}
    for s, e, cat in _intervals(trace, idx):
        s, e = max(s, lo), min(e, hi)
        if e > s:
            events.append((s, 1, code[cat]))
            events.append((e, -1, code[cat]))
    events.sort()
    active = [0] * len(cats)
    work = [code[c] for c in _WORK]
    waits = [code[c] for c in _WAITS]
    n_work = n_wait = 0
    acc = [0.0] * len(cats)
    orch = code["orchestration"]
    prev = lo
    for t, delta, c in events:
        if t > prev:
            dt = float(t - prev)
            if n_work:
                share = dt / n_work
                for n in work:
                    acc[n] += active[n] * share
            elif n_wait:
                share = dt / n_wait
                for n in waits:
                    acc[n] += active[n] * share
            else:
                acc[orch] += dt
            prev = t
        active[c] += delta
        if c in work:
            n_work += delta
        else:
            n_wait += delta
    if hi > prev:
        acc[orch] += float(hi - prev)
    for n, cat in enumerate(cats):
        result[cat] = acc[n] / 1e9
    return result


def ledger(trace: Trace, spans: Sequence[SpanRecord] | None = None) -> dict[str, float]:
    """Split the run's wall-clock into causes (seconds; the values sum to `trace.wall_s`).

    With `spans` (e.g. the critical path) only those steps count; the rest of the
    wall-clock is orchestration."""
    return ledger_indices(trace, None if spans is None else [s.index for s in spans])
