"""The merge queue's share of a run, from its trace: batches, splits, and where its time went.

The queue's busy time is every instant some `swarm.merge batch` or `swarm.merge split` span
is open. Inside those spans, an instant where a check (`execute_tool run_tests`) runs is
checking; one where no check runs but one waits for a check place (`swarm.wait check`) is
waiting for a slot; the rest is git work (making check trees, building a batch's chain,
landing it). So `checking_s + slot_wait_s + git_s == busy_s` always. Batches check at once
(speculation, a split's prefixes), so the same time summed per check (`check_sum_s`, what
the run report's `check_s` counts) and per wait (`slot_wait_sum_s`) can exceed it.
On the subtasks' side, `wait_s` sums their `swarm.wait merge` spans (from handing a patch
over to hearing how it went).

A trace without merge spans (an older run, a simulated one) has no breakdown: `None`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from swarm._analysis.model import Trace
from swarm._tracing import semconv as sc

__all__ = ["MergeBatch", "MergeBreakdown", "merge_batches", "merge_breakdown"]

BATCH_SPAN = f"{sc.MERGE_SPAN} batch"
SPLIT_SPAN = f"{sc.MERGE_SPAN} split"
OUTCOMES = ("green", "red", "cancelled")


@dataclass(frozen=True)
class MergeBatch:
    """One `swarm.merge batch` span."""

    index: int
    """The span's index in the `Trace`."""
    size: int
    depth: int
    """Batches ahead of it, still checking, when it was built on their tip (0: the head)."""
    outcome: str
    """`green`, `red`, `cancelled`, or '' when the span did not say."""
    subtasks: tuple[str, ...]
    alternate: bool = False
    """Built without one batch ahead of it, in case that one is red."""
    probe: bool = False
    """Checked alone on the head, outside the line, only to judge it."""

    @property
    def label(self) -> str:
        """How the viewer names it: `batch of 4 · red · ahead 1` (`· if one ahead is red`
        on an alternate; `probe of 4 · green` for a probe)."""
        ahead = f" · ahead {self.depth}" if self.depth else ""
        alternate = " · if one ahead is red" if self.alternate else ""
        kind = "probe" if self.probe else "batch"
        return f"{kind} of {self.size} · {self.outcome or '?'}{ahead}{alternate}"


@dataclass(frozen=True)
class MergeBreakdown:
    """The merge queue's figures for one run (seconds of wall-clock, counts)."""

    batches: int
    by_outcome: dict[str, int]
    """Batches per outcome (`green`, `red`, `cancelled`; unknown ones under '')."""
    size_mean: float
    size_max: int
    speculative: int
    """Batches built on the tip of batches still checking (depth > 0)."""
    rebuilt: int
    """Speculative batches cancelled because one ahead turned red (their patches re-batched).
    At most the report's `rebuilds`: a batch dropped before it was built has no span."""
    alternates: int
    """Alternate builds (a batch built without one ahead of it, in case that one is red;
    not counted in `batches`). The report's `alternates` says how many were used."""
    probes: int
    """Probes (a batch checked alone on the head before it joins the line, once some
    batch has been red; not counted in `batches`)."""
    splits: int
    """Rounds of splitting a red batch to find its culprit."""
    checks: int
    """Check runs inside the queue's spans."""
    check_sum_s: float
    """Their durations summed."""
    slot_waits: int
    """Waits for a check place inside the queue's spans."""
    slot_wait_sum_s: float
    """Their durations summed."""
    busy_s: float
    """Wall-clock with a batch or a split open."""
    checking_s: float
    slot_wait_s: float
    git_s: float
    """The rest of `busy_s`: building chains in check trees and landing them."""
    waits: int
    """Subtasks' `swarm.wait merge` spans."""
    wait_s: float
    """Those waits summed (they overlap: several subtasks wait at once)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(v: Any, default: int = 0) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def merge_batches(trace: Trace) -> list[MergeBatch]:
    """The trace's `swarm.merge batch` spans, in start order (attributes re-read from the
    file: a run has a few hundred at most)."""
    out = []
    for i in sorted(_named(trace, BATCH_SPAN), key=trace.start.__getitem__):
        attrs = trace.attributes(i)
        subtasks = attrs.get(sc.MERGE_SUBTASKS) or ()
        out.append(
            MergeBatch(
                index=i,
                size=_int(attrs.get(sc.MERGE_BATCH_SIZE), len(subtasks)),
                depth=_int(attrs.get(sc.MERGE_SPECULATIVE_DEPTH)),
                outcome=str(attrs.get(sc.MERGE_OUTCOME) or ""),
                subtasks=tuple(str(s) for s in subtasks),
                alternate=attrs.get(sc.MERGE_ALTERNATE) is True,
                probe=attrs.get(sc.MERGE_PROBE) is True,
            )
        )
    return out


def merge_breakdown(trace: Trace) -> MergeBreakdown | None:
    """The merge queue's figures (see the module), or None when the trace has no merges."""
    spans = merge_batches(trace)
    splits = _named(trace, SPLIT_SPAN)
    if not spans and not splits:
        return None
    batches = [b for b in spans if not b.alternate and not b.probe]
    alternates = [b for b in spans if b.alternate]
    queue = [b.index for b in spans] + splits
    inside = list(_descendants(trace, queue))
    checks = [i for i in inside if trace.op[i] == sc.OP_TOOL and _is_check(trace, i)]
    slot = _waits(trace, sc.WAIT_CHECK, inside)
    busy = _union(_spans(trace, queue))
    checking = _union(_spans(trace, checks))
    waiting = _union(_spans(trace, slot))
    checking_s = _length(checking)
    slot_wait_s = _length(_union([*checking, *waiting])) - checking_s
    busy_s = _length(busy)
    by_outcome = dict.fromkeys(OUTCOMES, 0)
    for b in batches:
        by_outcome[b.outcome] = by_outcome.get(b.outcome, 0) + 1
    waits = _waits(trace, sc.WAIT_MERGE, range(len(trace)))
    sizes = [b.size for b in batches]
    return MergeBreakdown(
        batches=len(batches),
        by_outcome=by_outcome,
        size_mean=sum(sizes) / len(sizes) if sizes else 0.0,
        size_max=max(sizes, default=0),
        speculative=sum(1 for b in batches if b.depth > 0),
        rebuilt=by_outcome["cancelled"],
        alternates=len(alternates),
        probes=sum(1 for b in spans if b.probe),
        splits=len(splits),
        checks=len(checks),
        check_sum_s=sum(trace.duration_s(i) for i in checks),
        slot_waits=len(slot),
        slot_wait_sum_s=sum(trace.duration_s(i) for i in slot),
        busy_s=busy_s,
        checking_s=checking_s,
        slot_wait_s=slot_wait_s,
        git_s=max(0.0, busy_s - checking_s - slot_wait_s),
        waits=len(waits),
        wait_s=sum(trace.duration_s(i) for i in waits),
    )


def _named(trace: Trace, name: str) -> list[int]:
    return [i for i, n in enumerate(trace.name) if n == name]


def _waits(trace: Trace, kind: str, indices: Iterable[int]) -> list[int]:
    return [i for i in indices if trace.op[i] == "wait" and trace.wait_kind[i] == kind]


def _is_check(trace: Trace, i: int) -> bool:
    tool = trace.tool[i] or trace.name[i].rsplit(" ", 1)[-1]
    return tool == "run_tests"


def _descendants(trace: Trace, roots: Iterable[int]) -> set[int]:
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        for c in trace.children.get(stack.pop(), ()):
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return seen


def _spans(trace: Trace, indices: Iterable[int]) -> list[tuple[int, int]]:
    return [(trace.start[i], trace.end[i]) for i in indices if trace.end[i] > trace.start[i]]


def _union(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint, sorted intervals covering the same instants."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _length(intervals: Sequence[tuple[int, int]]) -> float:
    return sum(e - s for s, e in intervals) / 1e9
