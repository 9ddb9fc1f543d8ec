"""What-if: re-simulate a recorded run with other latency profiles.

The recorded dependency structure is kept: every span starts a fixed gap after its
predecessor (its `depends_on` link, else the sibling that finished last before it, else
its parent's start), as recorded. Model calls matched by `set` take the duration a catalog
profile predicts for their recorded tokens; tools, tests and other waits keep their
recorded durations; waits that ended because a linked span finished end (after the same
gap) when that span does in the simulation. A queue wait ends when the step that freed its
slot in the recording ends in the simulation (so an unchanged re-simulation reproduces the
run); with `max_agents`, slots are re-derived from that cap instead.

Spans are placed by a discrete-event loop in recorded-time order, so whatever a span
waited for has been simulated before it is placed.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any, Protocol

from swarm._analysis.critical_path import SKEW_NS
from swarm._analysis.model import Trace
from swarm._tracing import semconv as sc

__all__ = ["Profile", "peak_agents", "whatif"]


class Profile(Protocol):
    """What the simulation needs of a latency profile (see `swarm.catalog`)."""

    def expected_s(
        self, input_tokens: int, output_tokens: int, reasoning_tokens: int | None = None
    ) -> float: ...


def _catalog_profile(ref: str) -> Profile:
    from swarm.catalog import find_profile

    return find_profile(ref)


def _catalog_cost(ref: str, input_tokens: int, output_tokens: int) -> float | None:
    from swarm.catalog import find_model
    from swarm.errors import ConfigError

    try:
        return find_model(ref).cost_usd(input_tokens, output_tokens)
    except ConfigError:
        return None


def _agent_run_start(tr: Trace, a: int) -> int:
    """When an agent began to run: the end of its leading queue and dependency waits."""
    run = tr.start[a]
    for c in sorted(tr.children.get(a, ()), key=lambda c: tr.start[c]):
        if tr.wait_kind[c] not in _LEADING or tr.start[c] > run + SKEW_NS:
            break
        run = max(run, tr.end[c])
    return run


_LEADING = (sc.WAIT_QUEUE, sc.WAIT_DEPENDENCY)


def peak_agents(tr: Trace) -> int:
    """Most agents running at once (queued agents not counted)."""
    events: list[tuple[int, int]] = []
    for i in range(len(tr)):
        if tr.op[i] == sc.OP_AGENT:
            events += [(_agent_run_start(tr, i), 1), (tr.end[i], -1)]
    events.sort(key=lambda e: (e[0], e[1]))
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return max(peak, 1)


def _releasers(tr: Trace) -> dict[int, int]:
    """For each queue wait, the step whose end freed the slot it waited for: the agent or
    model call (not an enclosing one) that ended last before the wait did, while it waited.
    A queue wait with none (the limit rose) keeps its recorded duration."""
    ends = sorted((tr.end[i], i) for i in range(len(tr)) if tr.op[i] in _HOLDERS)
    keys = [e for e, _ in ends]
    out: dict[int, int] = {}
    for q in range(len(tr)):
        if tr.wait_kind[q] != sc.WAIT_QUEUE:
            continue
        ancestors = set()
        p = tr.parent[q]
        while p >= 0:
            ancestors.add(p)
            p = tr.parent[p]
        pos = bisect_right(keys, tr.end[q] + SKEW_NS) - 1
        while pos >= 0 and keys[pos] >= tr.start[q]:
            if ends[pos][1] not in ancestors:
                out[q] = ends[pos][1]
                break
            pos -= 1
    return out


_HOLDERS = (sc.OP_AGENT, sc.OP_CHAT)

# A span's generator yields (recorded ns, phase): resume me once the simulation has reached
# that point of the recorded run (at one instant, deeper spans first: a child placed then
# is placed before its parent's next step); or
# (child, start, -1): place that child from `start`; or _JOIN: resume me once every child
# I placed is placed.
_END, _BEGIN = 0, 1
_JOIN = (-1,)
_Step = Iterator[tuple[int, ...] | tuple[int, float, int]]


class _Task:
    __slots__ = ("depth", "gen", "joining", "parent", "pending")

    def __init__(self, gen: _Step, depth: int, parent: _Task | None) -> None:
        self.gen, self.depth, self.parent = gen, depth, parent
        self.pending = 0
        self.joining = False


class _Sim:
    """Places every span in simulated time. Spans are visited in the order of the recorded
    run (a global heap of recorded times), so whatever a span waited for in the recording
    has been placed before it is: a link target, the sibling before it, or the step that
    freed its queue slot."""

    def __init__(
        self,
        tr: Trace,
        choose: Callable[[int], str | None],
        profile: Callable[[str], Profile],
        cost: Callable[[str, int, int], float | None],
        cap: int | None,
        releasers: dict[int, int],
    ) -> None:
        self.tr = tr
        self.choose = choose
        self.profile = profile
        self.cost = cost
        n = len(tr)
        self.start = [0.0] * n
        self.end = [0.0] * n
        self.done = [False] * n
        self.slots: list[float] | None = None if cap is None else [0.0] * cap
        """Free times of the agent slots when the cap is re-derived, else None: queue
        waits then end when the step that freed their slot in the recording ends."""
        self.releasers = releasers
        self.changed = 0
        self.cost_usd = 0.0
        self.t0 = tr.start_ns
        self._cached: dict[str, Profile] = {}

    def orig(self, ns: int) -> float:
        return (ns - self.t0) / 1e9

    def end_of(self, j: int) -> float:
        return self.end[j] if self.done[j] else self.orig(self.tr.end[j])

    def binding_link(self, i: int, until: int) -> int:
        tr = self.tr
        best = -1
        for j in tr.links.get(i, ()):
            if tr.end[j] <= until + SKEW_NS and (best < 0 or tr.end[j] > tr.end[best]):
                best = j
        return best

    def chat_duration(self, i: int) -> float:
        tr = self.tr
        recorded = (tr.end[i] - tr.start[i]) / 1e9
        ref = self.choose(i)
        if ref is None:
            self.cost_usd += tr.cost[i]
            return recorded
        prof = self._cached.get(ref)
        if prof is None:
            prof = self._cached[ref] = self.profile(ref)
        reasoning = tr.reasoning_tokens[i]
        out = tr.output_tokens[i] - max(reasoning, 0)
        dur = prof.expected_s(tr.input_tokens[i], out, None if reasoning < 0 else reasoning)
        thinking = reasoning if reasoning >= 0 else int(getattr(prof, "reasoning_tokens", 0))
        price = self.cost(ref, tr.input_tokens[i], out + thinking)
        self.cost_usd += tr.cost[i] if price is None else price
        self.changed += 1
        return dur

    def run(self) -> None:
        """Place every span: the span generators run as tasks of a discrete-event loop
        ordered by recorded time, so siblings progress side by side and a span's inputs
        are placed before it; no recursion, however deep the trace."""
        tr = self.tr
        # With a cap on agents, slots are handed out in placement order, so a span's
        # children are placed one after another, each finishing before the next starts
        # (depth-first); otherwise they progress side by side.
        serial = self.slots is not None
        heap: list[tuple[int, int, int, int, _Task]] = []  # (ns, phase, -depth, seq, task)
        seq = 0
        for r in tr.roots:
            root = _Task(self._place(r, self.orig(tr.start[r])), 0, None)
            heap.append((tr.start[r], _BEGIN, 0, seq, root))
            seq += 1
        heapq.heapify(heap)
        while heap:
            now, _, _, _, popped = heapq.heappop(heap)
            task: _Task | None = popped
            while task is not None:
                req = next(task.gen, None)
                seq += 1
                if req is None:  # placed: its parent may be waiting for it
                    parent = task.parent
                    task = None
                    if parent is not None:
                        parent.pending -= 1
                        if parent.joining and parent.pending == 0:
                            parent.joining = False
                            task = parent
                elif len(req) == 1:  # join
                    if task.pending:
                        task.joining = True
                        task = None
                elif len(req) == 3:  # place a child, which starts now
                    child = _Task(self._place(int(req[0]), req[1]), task.depth + 1, task)
                    task.pending += 1
                    if serial:
                        task.joining = True
                        task = child
                    else:
                        heapq.heappush(heap, (now, _BEGIN, -child.depth, seq, child))
                else:
                    when, phase = int(req[0]), int(req[1])
                    heapq.heappush(heap, (when, phase, -task.depth, seq, task))
                    task = None

    def _place(self, i: int, start: float) -> _Step:
        tr = self.tr
        slots = self.slots
        is_agent = tr.op[i] == sc.OP_AGENT
        self.start[i] = start
        kids = sorted(tr.children.get(i, ()), key=lambda c: (tr.start[c], tr.end[c]))
        queued = is_agent and any(tr.wait_kind[k] == sc.WAIT_QUEUE for k in kids)
        holds = is_agent and slots is not None
        run_start = start
        if holds and not queued:
            assert slots is not None
            run_start = max(start, heapq.heappop(slots))
        if not kids:
            if tr.op[i] == "wait" and self.binding_link(i, tr.end[i]) >= 0:
                yield tr.end[i] + SKEW_NS, _BEGIN  # after the span it waited for
            self.end[i] = max(run_start, start + self._leaf_duration(i, start))
        else:
            ends_sorted: list[tuple[int, int]] = []  # (orig end, kid) of started siblings
            children, links = tr.children, tr.links
            spawned = False  # a child placed as a task of its own may still be running
            for k in kids:
                is_queue = tr.wait_kind[k] == sc.WAIT_QUEUE
                # a queue wait ends when its slot is freed: decide it at its recorded end
                if is_queue and slots is None:
                    yield tr.end[k] + SKEW_NS, _BEGIN  # after whatever freed the slot
                elif spawned or is_queue or k in links:
                    yield tr.start[k] + SKEW_NS, _BEGIN  # after siblings ending within skew
                ready = self._ready(i, k, start, ends_sorted)
                if is_queue:
                    self.start[k] = ready
                    self.end[k] = self._queue_end(k, ready, holds and queued)
                    self.done[k] = True
                    if holds and queued:
                        run_start, queued = self.end[k], False
                elif k in children or k in links or tr.op[k] == sc.OP_AGENT:
                    spawned = True
                    yield k, max(ready, run_start), -1
                else:  # a plain step (model call, tool, wait): placed right here
                    s0 = self.start[k] = max(ready, run_start)
                    self.end[k] = s0 + max(0.0, self._leaf_duration(k, s0))
                    self.done[k] = True
                pos = bisect_right(ends_sorted, (tr.end[k], k))
                ends_sorted.insert(pos, (tr.end[k], k))
            last_end = max(tr.end[k] for k in kids)
            yield _JOIN
            last = max(run_start, max(self.end_of(k) for k in kids))
            self.end[i] = last + max(0, tr.end[i] - last_end) / 1e9
        self.done[i] = True
        if holds:
            assert slots is not None
            heapq.heappush(slots, self.end[i])

    def _queue_end(self, q: int, ready: float, take_slot: bool) -> float:
        tr = self.tr
        if self.slots is not None:
            return max(ready, heapq.heappop(self.slots)) if take_slot else ready
        j = self.releasers.get(q, -1)
        if j < 0:
            return ready + (tr.end[q] - tr.start[q]) / 1e9
        return max(ready, self.end_of(j) + max(0, tr.end[q] - tr.end[j]) / 1e9)

    def _ready(
        self, parent: int, k: int, parent_start: float, ends_sorted: list[tuple[int, int]]
    ) -> float:
        tr = self.tr
        s = tr.start[k]
        j = self.binding_link(k, s)
        if j >= 0:
            return self.end_of(j) + max(0, s - tr.end[j]) / 1e9
        pos = bisect_right(ends_sorted, (s + SKEW_NS, len(tr))) - 1
        if pos >= 0:
            e, sib = ends_sorted[pos]
            return self.end_of(sib) + max(0, s - e) / 1e9
        return parent_start + max(0, s - tr.start[parent]) / 1e9

    def _leaf_duration(self, i: int, start: float) -> float:
        tr = self.tr
        if tr.op[i] == sc.OP_CHAT:
            return self.chat_duration(i)
        recorded = (tr.end[i] - tr.start[i]) / 1e9
        if tr.op[i] == "wait":
            j = self.binding_link(i, tr.end[i])
            if j >= 0 and tr.end[j] > tr.start[i]:
                # the recorded gap is kept: the wait may have ended a little after (a
                # subtask's fixer finishing after the coder it is linked to)
                return max(0.0, self.end_of(j) + (tr.end[i] - tr.end[j]) / 1e9 - start)
        return recorded


def _choose(tr: Trace, changes: Mapping[str, str], i: int) -> str | None:
    """The ref `changes` puts call `i` on (most specific key first), or None to keep it."""
    model_ref = f"{tr.provider[i]}/{tr.model[i]}"
    for key in (model_ref, tr.role[i], tr.tier[i], "*"):
        if key and key in changes:
            return changes[key]
    return None


def whatif(
    trace: Trace,
    set: Mapping[str, str] | None = None,  # shadows the builtin: public name
    max_agents: int | None = None,
    *,
    find_profile: Callable[[str], Profile] | None = None,
    find_cost: Callable[[str, int, int], float | None] | None = None,
) -> dict[str, Any]:
    """Predict the run's wall-clock and cost with other providers.

    `set` maps a tier (`speed`), a role (`coder`), a recorded `provider/model` or `*` to a
    catalog ref (`groq/llama-3.3-70b`); model calls matching a key (most specific first:
    model, role, tier, `*`) are re-timed with that ref's latency profile."""
    tr = trace
    changes = dict(set or {})
    recorded_cost = sum(tr.cost[i] for i in range(len(tr)) if tr.op[i] == sc.OP_CHAT)
    recorded = {"wall_s": tr.wall_s, "cost_usd": recorded_cost}
    if tr.root < 0:
        return {
            "recorded": recorded,
            "predicted": dict(recorded),
            "set": changes,
            "max_agents": max_agents,
            "calls_changed": 0,
            "speedup": 1.0,
            "baseline_wall_s": tr.wall_s,
            "note": "the trace has no root span: nothing to re-simulate",
        }

    peak = peak_agents(tr)
    cap = max(1, max_agents if max_agents is not None else peak)
    profile, cost = find_profile or _catalog_profile, find_cost or _catalog_cost

    releasers = _releasers(tr) if max_agents is None or changes else {}

    def run(chooser: Callable[[int], str | None], cap: int | None) -> float:
        """Simulate; return the wall-clock (and leave the simulation in `sims`)."""
        sim = _Sim(tr, chooser, profile, cost, cap, releasers)
        sim.run()
        sims.append(sim)
        return max(sim.end[r] for r in tr.roots) - min(sim.start[r] for r in tr.roots)

    sims: list[_Sim] = []
    wall = run(partial(_choose, tr, changes), None if max_agents is None else cap)
    sim = sims[0]
    return {
        "recorded": recorded,
        "predicted": {"wall_s": wall, "cost_usd": sim.cost_usd},
        "speedup": tr.wall_s / wall if wall > 0 else 1.0,
        "set": changes,
        "max_agents": cap,
        "calls_changed": sim.changed,
        # the same simulation with nothing changed: how well the model reproduces the run
        "baseline_wall_s": (
            run(lambda i: None, None) if changes or max_agents is not None else wall
        ),
    }
