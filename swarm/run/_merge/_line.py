"""The merge queue's line: its places (`Slot`), each a batch of patches that lands as one,
and their builds (`Build`), each a chain of commits checked in a tree of its own.

A slot's main build sits on the main build of the slot ahead (speculation, as Zuul gates
changes: it assumes every batch ahead green). Once reds have shown, a slot also gets
alternates: builds that leave out a set of slots ahead, as if those were red, on the
builds that assume the same. The likeliest such cases are built first, those a finished
check has shown red above all. When those slots do turn red, the alternates become the
main builds, already checking or checked, instead of every batch behind them starting
again (a cycle of the line per red batch, otherwise); when one lands, the builds that
left it out are dropped. `Line` owns this bookkeeping; the pipeline builds, checks and
lands.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import ClassVar

import anyio
from opentelemetry.trace import SpanContext

from swarm.run._check import CheckResult, tree_key
from swarm.run._merge._trees import Patch, Step
from swarm.run._outcome import MergeResult

__all__ = ["Build", "Line", "RedRate", "Request", "Slot"]


@dataclass(eq=False)
class Request:
    """One patch waiting to merge, and, once decided, how that went."""

    patch: Patch
    check: str | None
    order: tuple[int, int]
    """Rank in the line (`Plan.merge_rank`), then arrival: batches are built in this order."""
    result: MergeResult | None = None
    decided: anyio.Event = field(default_factory=anyio.Event)
    after: list[Request] = field(default_factory=list)
    """Patches it must not be batched before (decided first): a culprit's rebased patch
    waits for the green ones it was fixed on top of."""
    waited_on: bool = False
    """Other subtasks wait for it: it is batched only with such patches, so that a red
    patch no one waits for does not hold a chain back (`swarm.run._merge._links.alike`)."""
    probed: bool = False
    """Checked green on a recent head (alone in a probe, or in a split's green part): a
    batch of such patches is likely green."""
    judged_with: frozenset[Request] = frozenset()
    """The patches it was last judged green with."""
    links: list[Request] = field(default_factory=list)
    """Patches it may clash with, batched with it (`swarm.run._merge._links`)."""

    @property
    def doubtful(self) -> bool:
        """Probed, but apart from an undecided patch it may clash with: the line takes it
        alone, so that it is its own culprit if red, and holds no batch back."""
        return self.probed and any(
            not q.decided.is_set() and q not in self.judged_with for q in self.links
        )

    def settle(self, result: MergeResult) -> None:
        self.result = result
        self.decided.set()


@dataclass(eq=False)
class Slot:
    """A place in the line: patches that land together, and their builds."""

    requests: list[Request]
    builds: dict[frozenset[Slot], Build] = field(default_factory=dict)
    """By the slots ahead each leaves out as red (none: the main build, on every one)."""
    fixed: anyio.Event = field(default_factory=anyio.Event)
    """Set once its patches are final (its first build has taken the late arrivals)."""

    @property
    def main(self) -> Build | None:
        return self.builds.get(_NONE)

    def red_odds(self, rate: RedRate) -> float:
        """The odds that this slot is red, if every slot ahead is green: its main build's
        verdict once it has one (it is checked on them), else the rate's for its size."""
        main = self.main
        if main is not None and main.finished.is_set() and not main.scope.cancel_called:
            return _SHOWN_GREEN if main.green else _SHOWN_RED
        return rate.red_odds(sum(not r.probed or r.doubtful for r in self.requests))

    @property
    def files(self) -> frozenset[str]:
        return frozenset().union(*(r.patch.files for r in self.requests))


@dataclass(eq=False)
class Build:
    """One slot's patches as a chain of commits on `ahead`'s tip (None: on the head)."""

    slot: Slot
    ahead: Build | None
    depth: int
    """Slots whose patches it sits on, still checking when it started (0: the head)."""
    alternate: bool = False
    """It leaves out slots ahead, as if those were red."""
    probe: bool = False
    """It is a probe: a batch checked on the head outside the line, only to judge it."""
    without: Build | None = None
    """A probe's build without its one patch that names a module another changes, at
    once: if the probe is red and this green, that patch is the culprit, no split."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    built: anyio.Event = field(default_factory=anyio.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)
    base: str = ""
    tip: str = ""
    steps: list[Step] = field(default_factory=list)
    result: CheckResult | None = None
    failed: str | None = None
    """Why it could not be built (git failed): its patches are refused with this."""
    span: SpanContext | None = None

    @property
    def requests(self) -> list[Request]:
        return self.slot.requests

    @property
    def green(self) -> bool:
        return self.failed is None and (self.result is None or self.result.passed)

    def command(self, whole: str | None) -> tuple[str | None, str | None]:
        """Its check, and the key its result is reused by: a lone patch on the head gets
        its subtask's own check, keyed by its tree; a batch, the `whole` check."""
        if len(self.requests) == 1:
            r = self.requests[0]
            key = tree_key(self.base, r.patch.patch) if self.depth == 0 else None
            return r.check or whole, key
        return whole or self.requests[0].check, None

    @property
    def outcome(self) -> str:
        if self.scope.cancel_called:
            return "cancelled"
        return "green" if self.green else "red"


@dataclass
class RedRate:
    """How often a patch turns out to be a culprit, learned as batches are judged. It caps
    the batch size so that about `GREEN_ODDS` of batches come back green: when culprits
    are common, a big batch is almost never green, and every patch in it is checked again.

    The rate is the most likely one given what is known: the patches judged one by one
    (green batches, split red ones) and the red batches not split yet, each of which
    holds at least one culprit. Counting one culprit per red batch instead kept batches
    of 20-30 while most of them came back red, two culprits or more each."""

    GREEN_ODDS: ClassVar[float] = 0.6
    PRIOR: ClassVar[tuple[int, int]] = (1, 64)
    """As if 1 culprit had been found in 64 patches: big batches until culprits show."""

    judged: int = 0
    culprits: int = 0
    reds: list[int] = field(default_factory=list)
    """The sizes of the red batches being split."""
    _rate: float | None = field(default=None, init=False, repr=False)
    """The likeliest rate, until something new is judged."""

    @property
    def rate(self) -> float:
        if self._rate is None:
            self._rate = self._likeliest()
        return self._rate

    def _likeliest(self) -> float:
        c, j = self.culprits + self.PRIOR[0], self.judged + self.PRIOR[1]

        def slope(p: float) -> float:  # of the log-likelihood: it falls as p grows
            out = c / p - (j - c) / (1 - p)
            for n in self.reds:
                q = (1 - p) ** n
                out += n * q / ((1 - p) * (1 - q))
            return out

        low, high = 1e-6, 0.999
        for _ in range(40):
            mid = (low + high) / 2
            low, high = (mid, high) if slope(mid) > 0 else (low, mid)
        return low

    @property
    def seen_red(self) -> bool:
        """Whether any batch has turned red yet (found culprits, or red batches being
        split): the prior alone says nothing about this run's patches."""
        return bool(self.culprits or self.reds)

    def cap(self) -> int:
        return max(1, int(math.log(self.GREEN_ODDS) / math.log1p(-self.rate)))

    def red_odds(self, patches: int) -> float:
        """The odds that a batch of `patches` is red."""
        return 1.0 - (1.0 - self.rate) ** patches

    def green(self, patches: int) -> None:
        self.judged += patches
        self._rate = None

    def red(self, patches: int) -> None:
        """A batch of `patches` turned red: a culprit at least, while its split finds how
        many (`corrected`)."""
        self.reds.append(patches)
        self._rate = None

    def corrected(self, patches: int, culprits: int, unjudged: int) -> None:
        """The red batch of `patches` was split: `culprits` found; `unjudged` of its
        patches wait again (they are counted when batched again)."""
        self.reds.remove(patches)
        self.judged += patches - unjudged
        self.culprits += culprits
        self._rate = None


_NONE: frozenset[Slot] = frozenset()
_SHOWN_RED, _SHOWN_GREEN = 0.9, 0.02
"""A slot's odds of red once its main build is checked: not certain, as it was checked
on the slots ahead, any of which may be red."""


class Line:
    """The slots in flight, front first, and which builds each needs (module docstring)."""

    MOST_LEFT_OUT: ClassVar[int] = 3

    def __init__(self, alternates: int, *, odds: float = 0.1, before_red: bool = False) -> None:
        self.slots: list[Slot] = []
        self.alternates = alternates
        """At most this many alternate builds at once."""
        self.odds = odds
        """Slots ahead are left out together only when they are at least this likely all
        red (`[merge] alternate_odds`)."""
        self.before_red = before_red
        """Alternates before any batch turned red (`[merge] alternates_before_red`)."""

    def start(self, rate: RedRate) -> list[Build]:
        """The builds to start now, made and placed in their slots: every slot's main
        build first; then, once some batch has turned red, alternates, the likeliest
        needed first (then those nearest the front: they are judged first), while the
        budget lasts. A build waits for the one it goes on to exist.

        Before any red, the prior's odds alone would give every big batch alternates: a
        build and a check each, all cancelled when the batch lands, while the agents
        still need the cores (in an all-green 300-subtask run, 1.5-3 s of the machine's
        CPU in its busiest seconds)."""
        new = [b for k in range(len(self.slots)) if (b := self._make(k, _NONE)) is not None]
        if not (rate.seen_red or self.before_red):
            return new
        room = self.alternates - sum(len(s.builds) - (s.main is not None) for s in self.slots)
        if room <= 0:  # this runs whenever a build ends: no cases to weigh
            return new
        for _, k, left_out in sorted(self._cases(rate), key=lambda case: case[:2]):
            if room <= 0:
                break
            if (b := self._make(k, left_out)) is not None:
                new.append(b)
                room -= 1
        return new

    def _cases(self, rate: RedRate) -> list[tuple[float, int, frozenset[Slot]]]:
        """The alternates worth building, each with minus its odds (to sort): slot `k`
        leaving out a set of slots ahead that are all red at least `odds`."""
        odds = {s: s.red_odds(rate) for s in self.slots}
        out = []
        for k, slot in enumerate(self.slots):
            likely = [s for s in self.slots[:k] if odds[s] >= self.odds]
            for n in range(1, min(self.MOST_LEFT_OUT, len(likely)) + 1):
                for left_out in itertools.combinations(likely, n):
                    p = math.prod(odds[s] for s in left_out)
                    if p >= self.odds and frozenset(left_out) not in slot.builds:
                        out.append((-p, k, frozenset(left_out)))
        return out

    def _make(self, k: int, left_out: frozenset[Slot]) -> Build | None:
        """Slot `k`'s build leaving out `left_out`, on the build of the nearest slot ahead
        kept that leaves out the same ones ahead of it; None if it exists, or that one
        does not yet."""
        slot = self.slots[k]
        if left_out in slot.builds:
            return None
        ahead = [s for s in self.slots[:k] if s not in left_out]
        on = None
        if ahead:
            before = self.slots.index(ahead[-1])
            on = ahead[-1].builds.get(left_out & frozenset(self.slots[:before]))
            if on is None:
                return None
        build = Build(slot, on, len(ahead), alternate=bool(left_out))
        slot.builds[left_out] = build
        return build

    def landed(self, front: Slot) -> list[Build]:
        """`front` landed: it leaves, with every build that left it out (returned, to
        cancel)."""
        self.slots.remove(front)
        dropped = []
        for s in self.slots:
            dropped += [b for key, b in s.builds.items() if front in key]
            s.builds = {key: b for key, b in s.builds.items() if front not in key}
        return dropped

    def red(self, front: Slot, held: frozenset[str]) -> tuple[list[Build], list[Slot]]:
        """`front` is red: it leaves, and each slot's builds that left it out take the
        places of those that did not. Returns the builds to cancel, and the slots that
        leave too (their patches wait again): from the first one touching a held file
        (`front`'s, while it is split) to the end of the line."""
        self.slots.remove(front)
        dropped: list[Build] = []
        for s in self.slots:
            dropped += [b for key, b in s.builds.items() if front not in key]
            s.builds = {key - {front}: b for key, b in s.builds.items() if front in key}
            if s.main is not None:
                s.fixed.set()  # its main build is gone: the patches are those it has
        at = next((k for k, s in enumerate(self.slots) if s.files & held), len(self.slots))
        cut = self.slots[at:]
        dropped += [b for s in cut for b in s.builds.values()]
        del self.slots[at:]
        return dropped, cut
