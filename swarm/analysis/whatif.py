"""What-if: re-simulate a recorded run with other latency profiles.

The recorded dependency structure is kept: every span starts a fixed gap after its
predecessor (its `depends_on` link, else the sibling that finished last before it, else
its parent's start), as recorded. Model calls matched by `set` take the duration a catalog
profile predicts for their recorded tokens; tools, tests and other waits keep their
recorded durations; queue waits are re-derived from a cap on concurrent agents (by default
the peak the run reached); waits that ended because a linked span finished end when that
span does in the simulation.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from swarm import _semconv as sc
from swarm.analysis.critical_path import SKEW_NS
from swarm.analysis.model import Trace

__all__ = ["Profile", "peak_agents", "whatif"]


class Profile(Protocol):
    """What the simulation needs of a latency profile (see `swarm.providers.catalog`)."""

    def expected_s(
        self, input_tokens: int, output_tokens: int, reasoning_tokens: int | None = None
    ) -> float: ...


def _catalog_profile(ref: str) -> Profile:
    from swarm.providers.catalog import find_profile

    return find_profile(ref)


def _catalog_cost(ref: str, input_tokens: int, output_tokens: int) -> float | None:
    from swarm.errors import ConfigError
    from swarm.providers.catalog import find_model

    try:
        return find_model(ref).cost_usd(input_tokens, output_tokens)
    except ConfigError:
        return None


def _agent_run_start(tr: Trace, a: int) -> int:
    """When an agent got its slot: the end of its leading queue wait, else its start."""
    run = tr.start[a]
    for c in tr.children.get(a, ()):
        if tr.wait_kind[c] == sc.WAIT_QUEUE and tr.start[c] <= tr.start[a] + SKEW_NS:
            run = max(run, tr.end[c])
    return run


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


class _Sim:
    def __init__(self, tr: Trace, choose: Callable[[int], str | None],
                 profile: Callable[[str], Profile],
                 cost: Callable[[str, int, int], float | None], cap: int) -> None:
        self.tr = tr
        self.choose = choose
        self.profile = profile
        self.cost = cost
        n = len(tr)
        self.start = [0.0] * n
        self.end = [0.0] * n
        self.done = [False] * n
        self.slots = [0.0] * cap
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

    def schedule(self, i: int, start: float) -> None:
        """Place span i (and its subtree) starting at `start`.

        Each span is a generator that yields the children it needs placed; this loop runs
        them depth-first with an explicit stack, so deep traces cannot hit the recursion
        limit."""
        stack = [self._place(i, start)]
        while stack:
            request = next(stack[-1], None)
            if request is None:
                stack.pop()
            else:
                stack.append(self._place(*request))

    def _place(self, i: int, start: float) -> Iterator[tuple[int, float]]:
        tr = self.tr
        is_agent = tr.op[i] == sc.OP_AGENT
        run_start = start
        if is_agent:
            slot = heapq.heappop(self.slots)
            run_start = max(start, slot)
        self.start[i] = start
        kids = sorted(tr.children.get(i, ()), key=lambda c: (tr.start[c], tr.end[c]))
        if not kids:
            self.end[i] = max(run_start, start + self._leaf_duration(i, start))
        else:
            ends_sorted: list[tuple[int, int]] = []  # (orig end, kid) of placed siblings
            last = run_start
            for k in kids:
                ready = self._ready(i, k, start, ends_sorted)
                if tr.wait_kind[k] == sc.WAIT_QUEUE and tr.start[k] <= tr.start[i] + SKEW_NS:
                    self.start[k], self.end[k], self.done[k] = ready, max(ready, run_start), True
                else:
                    yield k, max(ready, run_start)  # placed before we resume
                pos = bisect_right(ends_sorted, (tr.end[k], k))
                ends_sorted.insert(pos, (tr.end[k], k))
                last = max(last, self.end[k])
            tail = max(0, tr.end[i] - max(tr.end[k] for k in kids)) / 1e9
            self.end[i] = last + tail
        self.done[i] = True
        if is_agent:
            heapq.heappush(self.slots, self.end[i])

    def _ready(self, parent: int, k: int, parent_start: float,
               ends_sorted: list[tuple[int, int]]) -> float:
        tr = self.tr
        s = tr.start[k]
        j = self.binding_link(k, s)
        if j >= 0:
            return self.end_of(j) + max(0, s - tr.end[j]) / 1e9
        pos = bisect_right(ends_sorted, (s + SKEW_NS, len(tr))) - 1
        if pos >= 0:
            e, sib = ends_sorted[pos]
            return self.end[sib] + max(0, s - e) / 1e9
        return parent_start + max(0, s - tr.start[parent]) / 1e9

    def _leaf_duration(self, i: int, start: float) -> float:
        tr = self.tr
        if tr.op[i] == sc.OP_CHAT:
            return self.chat_duration(i)
        recorded = (tr.end[i] - tr.start[i]) / 1e9
        if tr.op[i] == "wait":
            j = self.binding_link(i, tr.end[i])
            if j >= 0 and tr.end[j] > tr.start[i]:
                return max(0.0, self.end_of(j) - start)
        return recorded


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
        return {"recorded": recorded, "predicted": dict(recorded), "set": changes,
                "max_agents": max_agents, "calls_changed": 0, "speedup": 1.0}

    def choose(i: int) -> str | None:
        model_ref = f"{tr.provider[i]}/{tr.model[i]}"
        for key in (model_ref, tr.role[i], tr.tier[i], "*"):
            if key and key in changes:
                return changes[key]
        return None

    peak = peak_agents(tr)
    cap = max(1, max_agents if max_agents is not None else peak)
    profile, cost = find_profile or _catalog_profile, find_cost or _catalog_cost

    def run(chooser: Callable[[int], str | None], cap: int) -> _Sim:
        sim = _Sim(tr, chooser, profile, cost, cap)
        for r in sorted(tr.roots, key=lambda r: tr.start[r]):
            sim.schedule(r, sim.orig(tr.start[r]))
        return sim

    def wall_of(sim: _Sim) -> float:
        return max(sim.end[r] for r in tr.roots) - min(sim.start[r] for r in tr.roots)

    sim = run(choose, cap)
    wall = wall_of(sim)
    return {
        "recorded": recorded,
        "predicted": {"wall_s": wall, "cost_usd": sim.cost_usd},
        "speedup": tr.wall_s / wall if wall > 0 else 1.0,
        "set": changes,
        "max_agents": cap,
        "calls_changed": sim.changed,
        # the same simulation with nothing changed: how well the model reproduces the run
        "baseline_wall_s": (wall_of(run(lambda i: None, peak))
                            if changes or max_agents is not None else wall),
    }
