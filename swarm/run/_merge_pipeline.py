"""The merge queue's pipeline: batches, speculation, and splitting a red batch.

Green patches wait in their `order` (the coordinator's: `Plan.merge_rank`, the patches
others wait for first), then arrival. Whenever a place is free (at most `max_parallel_checks`
batches in flight) the runner takes the next batch of waiting patches — its size grows with
the backlog, between `batch_size.min` and `.max` — and builds it on the tip of the batch
ahead (speculation, as Zuul gates changes) or on the head. Each batch is checked once;
batches land strictly in order:

- green: the integration branch fast-forwards to its tip, one commit per subtask;
- red: the batches behind it (built on a red tip) are cancelled and their patches wait
  again; the red batch is split (`Splitter`) beside the line, which goes on at once with
  the patches that touch none of its files. Its culprits are then red; the green patches
  land if the head has not moved, else they wait again with the rest.

A lone patch on the head gets its subtask's own check, keyed by its tree, so the result
the subtask already has is reused; a batch gets the whole check. A patch that does not
apply is decided with its batch: a conflict once the batch lands, back to waiting if not.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import anyio
import anyio.abc
from opentelemetry.trace import Span, SpanContext
from opentelemetry.util.types import AttributeValue

from swarm.config import MergeConfig
from swarm.errors import SwarmError
from swarm.run._merge_split import Splitter, Verdict
from swarm.run._merge_trees import Patch, Step, TreePool
from swarm.run.check import CheckFn, CheckResult, tree_key
from swarm.run.outcome import MergeKind, MergeResult
from swarm.run.report import MergeStats
from swarm.tracing import semconv as sc
from swarm.tracing.setup import tracer

__all__ = ["Pipeline", "Request"]


@dataclass
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

    def settle(self, result: MergeResult) -> None:
        self.result = result
        self.decided.set()


@dataclass
class _Batch:
    requests: list[Request]
    ahead: _Batch | None
    depth: int
    """Batches ahead of it when it started (0: built on the head)."""
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
    def green(self) -> bool:
        return self.failed is None and (self.result is None or self.result.passed)

    @property
    def outcome(self) -> str:
        if self.scope.cancel_called:
            return "cancelled"
        return "green" if self.green else "red"


@dataclass(frozen=True)
class Rules:
    """What the pipeline checks with, and how it moves the integration branch."""

    checker: CheckFn
    whole: str | None
    """The check a batch (or a prefix of one) gets."""
    config: MergeConfig
    land: Callable[[str], Awaitable[None]]
    """Moves the integration branch to a green tip."""


@dataclass
class RedRate:
    """How often a patch turns out to be a culprit, learned as batches are judged. It caps
    the batch size so that about `GREEN_ODDS` of batches come back green: when culprits
    are common, a big batch is almost never green, and every patch in it is checked again.
    """

    GREEN_ODDS: ClassVar[float] = 0.6
    PRIOR: ClassVar[tuple[int, int]] = (1, 64)
    """As if 1 culprit had been found in 64 patches: big batches until culprits show."""

    judged: int = 0
    culprits: int = 0

    def cap(self) -> int:
        p = (self.culprits + self.PRIOR[0]) / (self.judged + self.PRIOR[1])
        return max(1, int(math.log(self.GREEN_ODDS) / math.log1p(-p)))

    def green(self, patches: int) -> None:
        self.judged += patches

    def red(self, patches: int) -> None:
        """A batch turned red: a culprit at least, known at once, while its split finds
        how many (`corrected`)."""
        self.judged += patches
        self.culprits += 1

    def corrected(self, culprits: int, unjudged: int) -> None:
        """The split found `culprits`; `unjudged` of the red batch's patches wait again
        (they are counted when batched again)."""
        self.culprits += culprits - 1
        self.judged -= unjudged


def _by_order(requests: list[Request]) -> list[Request]:
    return sorted(requests, key=lambda r: r.order)


class Pipeline:
    """Owns the waiting patches and the batches in flight; `run` is its one task."""

    def __init__(self, rules: Rules, trees: TreePool, head: str, stats: MergeStats) -> None:
        self.rules, self.trees, self.head, self.stats = rules, trees, head, stats
        self.pending: list[Request] = []
        self._flight: list[_Batch] = []
        self._held: list[_Batch] = []
        """Red batches being split: patches touching their files wait for the verdict."""
        self._verdicts: list[tuple[_Batch, Verdict[Request]]] = []
        self.rate = RedRate()
        self._wake = anyio.Event()
        self._after: dict[str, list[Request]] = {}
        """By subtask: the green patches its culprit's fix was made on top of."""

    def submit(self, request: Request) -> None:
        request.after = self._after.pop(request.patch.name, [])
        self.pending = _by_order([*self.pending, request])
        self._wake.set()

    def withdraw(self, request: Request) -> None:
        """A waiter gave up (cancelled): its patch leaves if no batch holds it yet."""
        if request in self.pending:
            self.pending.remove(request)

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                while len(self._flight) < self.rules.config.parallel_checks and (
                    free := self._free()
                ):
                    self._start(tg, free)
                if self._flight and self._flight[0].finished.is_set():
                    await self._settle(self._flight.pop(0), tg)
                elif self._verdicts:
                    await self._decide(*self._verdicts.pop(0), tg)
                else:
                    await self._wake.wait()
                    self._wake = anyio.Event()

    # -- batches ---------------------------------------------------------------------

    def _free(self) -> list[Request]:
        """The waiting patches a batch may take: none touching a file of a red batch
        being split (patches on other files commute, so the final tree is the same), none
        whose `after` is still undecided."""
        held = frozenset().union(*(r.patch.files for b in self._held for r in b.requests))
        return [
            r
            for r in self.pending
            if not r.patch.files & held and all(a.decided.is_set() for a in r.after)
        ]

    def _start(self, tg: anyio.abc.TaskGroup, free: list[Request]) -> None:
        size = self.rules.config.batch_size
        places = self.rules.config.parallel_checks - len(self._flight)
        n = max(size.min, min(size.max, self.rate.cap(), math.ceil(len(free) / places)))
        taken = free[:n]
        self.pending = [r for r in self.pending if r not in taken]
        batch = _Batch(taken, self._flight[-1] if self._flight else None, len(self._flight))
        self._flight.append(batch)
        self.stats.batches += 1
        tg.start_soon(self._build_and_check, batch)

    async def _build_and_check(self, batch: _Batch) -> None:
        try:
            with batch.scope:
                if batch.ahead is not None:
                    await batch.ahead.built.wait()
                batch.base = batch.ahead.tip if batch.ahead is not None else self.head
                attrs: dict[str, AttributeValue] = {sc.MERGE_SPECULATIVE_DEPTH: batch.depth}
                span_name = f"{sc.MERGE_SPAN} batch"
                with tracer().start_as_current_span(span_name, attributes=attrs) as span:
                    batch.span = span.get_span_context()
                    try:
                        await self._build_check(batch, span)
                    finally:
                        span.set_attribute(sc.MERGE_OUTCOME, batch.outcome)
        finally:
            batch.built.set()
            batch.finished.set()
            self._wake.set()

    async def _build_check(self, batch: _Batch, span: Span) -> None:
        async with self.trees.tree() as tree:
            self._top_up(batch)
            span.set_attribute(sc.MERGE_BATCH_SIZE, len(batch.requests))
            span.set_attribute(sc.MERGE_SUBTASKS, [r.patch.name for r in batch.requests])
            try:
                batch.steps = await tree.build(batch.base, [r.patch for r in batch.requests])
            except SwarmError as exc:
                batch.failed, batch.tip = str(exc), batch.base
                return
            commits = [s.commit for s in batch.steps if s.commit]
            batch.tip = commits[-1] if commits else batch.base
            batch.built.set()
            command, key = self._command(batch)
            if commits and command:
                batch.result = await self.check(tree.path, command, key, batch.tip)

    def _top_up(self, batch: _Batch) -> None:
        """A batch about to be built takes the patches that arrived while it waited for the
        one ahead (up to its cap). As a wave of agents finishes, the first batches are
        formed from the first one or two patches; without this each kept a place for a
        whole check cycle while a hundred patches queued behind them."""
        size = self.rules.config.batch_size
        room = min(size.max, self.rate.cap()) - len(batch.requests)
        extra = self._free()[: max(0, room)]
        if extra:
            self.pending = [r for r in self.pending if r not in extra]
            batch.requests = _by_order([*batch.requests, *extra])

    def _command(self, batch: _Batch) -> tuple[str | None, str | None]:
        if len(batch.requests) == 1:
            r = batch.requests[0]
            key = tree_key(batch.base, r.patch.patch) if batch.depth == 0 else None
            return r.check or self.rules.whole, key
        return self.rules.whole or batch.requests[0].check, None

    async def check(self, path: Path, command: str, key: str | None, commit: str) -> CheckResult:
        """The check of a tree at `commit` (clean: a cluster may check it on a node)."""
        result = await self.rules.checker(path, command, key=key, priority=True, commit=commit)
        if not result.reused:
            self.stats.checks_run += 1
            self.stats.check_s = round(self.stats.check_s + result.duration_s, 3)
        return result

    # -- landing ---------------------------------------------------------------------

    async def _settle(self, front: _Batch, tg: anyio.abc.TaskGroup) -> None:
        if front.green:
            self.rate.green(len(front.requests))
            await self.land(list(zip(front.requests, front.steps, strict=True)), front)
            return
        behind, self._flight = self._flight, []
        for b in behind:  # built on a red tip: rebuilt on the head at once
            b.scope.cancel()
            self.stats.rebuilds += 1
        for b in behind:
            await b.finished.wait()
        self.requeue([r for b in behind for r in b.requests])
        if front.failed is not None:
            for r in front.requests:
                r.settle(MergeResult("red", output=front.failed, batch=front.span))
            return
        self.rate.red(len(front.requests))
        self._held.append(front)  # split beside the line, which goes on without it
        tg.start_soon(self._split, front)

    async def _split(self, batch: _Batch) -> None:
        async def check(path: Path, command: str, commit: str) -> CheckResult:
            return await self.check(path, command, None, commit)

        command = self.rules.whole or batch.requests[0].check or "true"
        width = self.rules.config.parallel_checks
        pairs = list(zip(batch.requests, batch.steps, strict=True))
        output = batch.result.output if batch.result else ""
        try:
            verdict = await Splitter[Request](self.trees, check, command, width).run(
                [(r, s) for r, s in pairs if s.commit], batch.base, output
            )
            verdict.back += [r for r, s in pairs if not s.commit]
            self.stats.splits += verdict.depth
            self._verdicts.append((batch, verdict))
        finally:
            self._wake.set()

    async def _decide(
        self, batch: _Batch, verdict: Verdict[Request], tg: anyio.abc.TaskGroup
    ) -> None:
        """The green chain lands if nothing has moved the head since (its commits sit on
        it), else waits again. Each culprit is red at once, with the commit it was red on
        top of (so its fixer starts from the green patches before it); its fixed patch is
        batched once those have been decided."""
        self._held.remove(batch)
        landed = bool(verdict.green) and self.head == batch.base and not self._flight
        unjudged = len(verdict.back) + (0 if landed else len(verdict.green))
        self.rate.corrected(len(verdict.culprits), unjudged)
        if landed:
            await self.land(verdict.green, batch)
        else:
            self.requeue([r for r, _ in verdict.green])
        for c in verdict.culprits:
            ahead = [] if landed else verdict.green[: c.after]
            if ahead:  # waiting again: its fixer starts on them, its fix lands after them
                self._after[c.request.patch.name] = [r for r, _ in ahead]
            base = ahead[-1][1].commit if ahead else None
            c.request.settle(MergeResult("red", output=c.output, batch=batch.span, base=base))
        self.requeue(verdict.back)

    def requeue(self, requests: Sequence[Request]) -> None:
        self.pending = _by_order([*requests, *self.pending])

    async def land(self, built: Sequence[tuple[Request, Step]], batch: _Batch) -> None:
        """Move the head past `built` (a green chain) and tell each patch how it went."""
        tip = next((s.commit for _, s in reversed(built) if s.commit), None)
        if tip is not None and tip != self.head:
            await self.rules.land(tip)
            self.head = tip
        for r, s in built:
            if s.kind == "committed":
                self.stats.merged += 1
                r.settle(MergeResult("merged", s.commit, batch=batch.span))
            elif s.kind == "empty":
                r.settle(MergeResult("empty", self.head, batch=batch.span))
            else:
                kind: MergeKind = "conflict" if s.kind == "conflict" else "red"
                r.settle(MergeResult(kind, output=s.output, batch=batch.span))
