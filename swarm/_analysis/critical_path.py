"""The critical path: the chain of steps that set the run's wall-clock.

Walking back from the root's end, each step's predecessor is:
- the span it `depends_on` (a span link) when it has one: links make hidden dependencies
  between siblings exact, where timing alone would guess;
- else the sibling that finished last at or before (`<=`, within a small clock-skew
  tolerance) the step started: Jaeger's method, but iterative (no recursion limit at
  10k spans) with children sorted by end time and found by bisection (wide fan-out);
- else the parent's own predecessor.
Descending into a span follows its child that finished last before the current time. A
wait span that ended because a linked span finished is replaced by that span.
The result is the list of leaf steps (model calls, tools, waits) in time order.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Literal

from swarm._analysis.model import SpanRecord, Trace

__all__ = ["SKEW_NS", "critical_path", "critical_path_indices", "critical_path_method"]

SKEW_NS = 1_000_000
"""Clock skew tolerated between a step's end and its successor's start (1 ms)."""


@dataclass
class _Kids:
    order: list[int]
    """Child indices sorted by (end, start)."""
    ends: list[int]


class _Walker:
    def __init__(self, tr: Trace, skew_ns: int) -> None:
        self.tr = tr
        self.skew = skew_ns
        self._kids: dict[int, _Kids] = {}
        self.links_followed = 0
        """How many steps the walk took along a `depends_on` link."""

    def kids(self, i: int) -> _Kids:
        k = self._kids.get(i)
        if k is None:
            tr = self.tr
            order = sorted(tr.children.get(i, ()), key=lambda c: (tr.end[c], tr.start[c]))
            k = self._kids[i] = _Kids(order, [tr.end[c] for c in order])
        return k

    def last_child_before(self, parent: int, t: int, below: int | None = None) -> int:
        """Position (in `kids(parent).order`) of the child that ended last at or before t."""
        k = self.kids(parent)
        hi = bisect_right(k.ends, t + self.skew, 0, len(k.ends) if below is None else below)
        return hi - 1

    def binding_link(self, i: int, t: int) -> int:
        """The depends_on target that finished last at or before `t`, or -1."""
        tr = self.tr
        best = -1
        for j in tr.links.get(i, ()):
            if tr.end[j] <= t + self.skew and (best < 0 or tr.end[j] > tr.end[best]):
                best = j
        return best

    def walk(self, root: int) -> list[int]:
        tr = self.tr
        out: list[int] = []
        seen: set[int] = set()
        cur, t = root, tr.end[root]
        descending = True
        for _ in range(4 * len(tr) + 4):  # a hard bound; each span is entered O(1) times
            if descending:
                k = self.kids(cur)
                pos = self.last_child_before(cur, t)
                if pos >= 0:
                    cur = k.order[pos]
                    t = min(t, tr.end[cur])
                    continue
                if not k.order:
                    # a wait that ended because a linked span finished: follow that span
                    j = self.binding_link(cur, tr.end[cur])
                    if j >= 0 and tr.end[j] > tr.start[cur] + self.skew and j not in seen:
                        self.links_followed += 1
                        seen.add(cur)
                        cur, t = j, tr.end[j]
                        continue
                    out.append(cur)
                descending = False
            # find what preceded `cur`'s start
            if cur == root or cur in seen:
                break
            seen.add(cur)
            start = tr.start[cur]
            j = self.binding_link(cur, start)
            if j >= 0 and j not in seen:
                self.links_followed += 1
                cur, t, descending = j, tr.end[j], True
                continue
            p = tr.parent[cur]
            if p < 0:
                break
            k = self.kids(p)
            mine = k.order.index(cur) if len(k.order) < 64 else self._position(p, cur)
            pos = self.last_child_before(p, start, below=mine)
            if pos >= 0:
                cur = k.order[pos]
                t, descending = tr.end[cur], True
            else:
                cur = p
        out.reverse()
        return out

    def _position(self, parent: int, child: int) -> int:
        k = self.kids(parent)
        tr = self.tr
        lo = bisect_right(k.ends, tr.end[child] - 1)
        while k.order[lo] != child:
            lo += 1
        return lo


def critical_path_indices(trace: Trace, skew_ns: int = SKEW_NS) -> list[int]:
    """Indices of the critical-path steps, in time order."""
    if trace.root < 0:
        return []
    return _Walker(trace, skew_ns).walk(trace.root)


def critical_path_method(trace: Trace, skew_ns: int = SKEW_NS) -> Literal["links", "timing"]:
    """`links` when the critical path followed `depends_on` links (exact for those steps),
    `timing` when it was inferred from timestamps alone (Jaeger's method)."""
    if trace.root < 0:
        return "timing"
    walker = _Walker(trace, skew_ns)
    walker.walk(trace.root)
    return "links" if walker.links_followed else "timing"


def critical_path(trace: Trace, skew_ns: int = SKEW_NS) -> list[SpanRecord]:
    """The critical-path steps (leaf spans) of the run, in time order."""
    return [trace.span(i) for i in critical_path_indices(trace, skew_ns)]
