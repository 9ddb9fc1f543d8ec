"""The merge queue's pipeline: batches, speculation, and splitting a red batch.

Green patches wait in their `order` (the coordinator's: `Plan.merge_rank`, the patches
others wait for first), then arrival. Whenever a place is free (at most `max_parallel_checks`
batches in flight) the runner takes the next batch of waiting patches — its size grows with
the backlog, between `batch_size.min` and `.max` — and builds it on the tip of the batch
ahead (speculation, as Zuul gates changes) or on the head. Each batch is checked once;
batches land strictly in order:

- green: the integration branch fast-forwards to its tip, one commit per subtask;
- red: the batches behind it (built on a red tip) go on with their alternates (built
  without it, and without others likely red, `swarm.run._merge._line`) or start again on
  the head; the red batch is split (`Splitter`) beside the line, which goes on at once
  with the patches that touch none of its files. After each round of the split its green
  patches land if the head has not moved, else they wait again, as the ones it will not
  judge do; then its culprits are red (all its check's output names, `_merge_split`).

Once some batch has been red, a red batch in the line costs every batch behind it, so
the line takes only probed patches: the others are first checked alone on the head in
probes (`[merge] probes` per batch in flight), outside the line, in batches capped by the
red rate. A green probe lands if the head has not moved and the line is empty, else its
patches join the line, in batches up to `batch_size.max`; a red one is split likewise.
The line's front may still take unprobed patches (it is on the head, a probe that lands
when green), and a culprit's fixed patch counts as probed. Patches that may clash are
batched together, and judged again when judged apart (`swarm.run._merge._links`); a
probed one still apart from such a patch in flight takes a place in the line alone.

While subtasks are still coding (`expect`: the coordinator's count of patches on their
way), the line gathers: a batch of patches no one waits for starts only once it would be
full (`batch_size.max`, or the red rate's cap) or nothing more is coming. Landing those
early buys nothing (no one waits on them, and the last patch's batch is checked after it
comes either way), while each check of the whole suite takes cores the worktrees' checks
need (boltons, 24 subtasks on 2 cores, at 1 agent: 24 batches for 24 patches without it;
1 with it, at 1 agent and at 8).
`[merge] gather = false`, and the one-at-a-time queue, start a batch whenever there is room.

A lone patch on the head gets its subtask's own check, keyed by its tree, so the result
the subtask already has is reused; a batch gets the whole check. A patch that does not
apply is decided with its batch: a conflict once the batch lands, back to waiting if not.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.config import MergeConfig
from swarm.errors import SwarmError
from swarm.run._check import CheckFn, CheckResult
from swarm.run._merge._line import Build, Line, RedRate, Request, Slot
from swarm.run._merge._links import Links, alike, by_order
from swarm.run._merge._probe import build_probe, found_alone, judgeable
from swarm.run._merge._split import Split, Splitter, Verdict
from swarm.run._merge._trees import Step, TreePool
from swarm.run._outcome import MergeKind, MergeResult
from swarm.run._report import MergeStats

__all__ = ["Pipeline", "Request", "Rules"]


@dataclass(frozen=True)
class Rules:
    """What the pipeline checks with, and how it moves the integration branch."""

    checker: CheckFn
    whole: str | None
    """The check a batch (or a prefix of one) gets."""
    config: MergeConfig
    land: Callable[[str], Awaitable[None]]
    """Moves the integration branch to a green tip."""


class Pipeline:
    """Owns the waiting patches and the line; `run` is its one task."""

    def __init__(self, rules: Rules, trees: TreePool, head: str, stats: MergeStats) -> None:
        self.rules, self.trees, self.head, self.stats = rules, trees, head, stats
        self.pending: list[Request] = []
        config = rules.config
        self.line = Line(
            4 * config.parallel_checks,
            odds=config.alternate_odds,
            before_red=config.alternates_before_red,
        )
        """Alternates: with one line's worth, 5 % red runs took 24.1 s, 22.0 s with 4x."""
        self._splits: list[Split] = []
        """Red batches being split: patches touching their files wait for the verdict."""
        self._verdicts: list[tuple[Split, Verdict[Request]]] = []
        self.rate = RedRate()
        self._wake = anyio.Event()
        self._probes: list[Build] = []
        self.probe_limit = 0 if config.one_at_a_time else config.probes * config.parallel_checks
        """Probes at once (none in the one-at-a-time queue, the baseline)."""
        self.landed_files: set[str] = set()
        """The files the patches landed so far changed (a split reads them)."""
        self._after: dict[str, list[Request]] = {}
        """By subtask: the green patches its culprit's fix was made on top of."""
        self.links = Links(head)
        self.coming = 0
        """Patches on their way: subtasks coding, rebasing, or yet to start (`expect`)."""
        self._gathered = False
        """The waiting patches were held for the ones coming: they go as one batch, not
        spread over the line's places (two checks of the suite where one would do)."""

    def expect(self, coming: int) -> None:
        """`coming` patches are still on their way (0: gather no more)."""
        self.coming = coming
        self._wake.set()

    def _gathering(self, free: list[Request]) -> bool:
        """A batch of `free` waits for the patches still coming (see the module)."""
        config = self.rules.config
        if self.coming <= 0 or not config.gather or config.one_at_a_time:
            return False
        if any(r.waited_on for r in free):
            return False
        self._gathered = len(free) < self._cap(probed=all(r.probed for r in free))
        return self._gathered

    def submit(self, request: Request) -> None:
        request.after = self._after.pop(request.patch.name, [])
        self.pending = by_order([*self.pending, request])
        self.links.add(request, self.pending)
        self._wake.set()

    def withdraw(self, request: Request) -> None:
        """A waiter gave up (cancelled): its patch leaves if no batch holds it yet."""
        if request in self.pending:
            self.pending.remove(request)

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                while (
                    len(self.line.slots) < self.rules.config.parallel_checks
                    and (free := self._for_line())
                    and not self._gathering(free)
                ):
                    self._take(free)
                while len(self._probes) < self.probe_limit and (free := self._for_probe()):
                    self._probes.append(probe := self._probe(free))
                    for build in filter(None, (probe, probe.without)):
                        tg.start_soon(self._build_and_check, build)
                for build in self.line.start(self.rate):
                    tg.start_soon(self._build_and_check, build)
                front = self.line.slots[0] if self.line.slots else None
                back = next((p for p in self._probes if judgeable(p)), None)
                if front is not None and front.main is not None and front.main.finished.is_set():
                    await self._settle(front, tg)
                elif back is not None:
                    self._probes.remove(back)
                    await self._judged(back, tg)
                elif self._verdicts:
                    await self._decide(*self._verdicts.pop(0))
                else:
                    await self._wake.wait()
                    self._wake = anyio.Event()

    # -- batches ---------------------------------------------------------------------

    def _free(self) -> list[Request]:
        """The waiting patches a batch may take: none touching a file of a red batch
        being split (patches on other files commute, so the final tree is the same), none
        whose `after` is still waiting: a batch of the line may take it once they are in
        a batch ahead (final), as it lands behind them, built on them."""
        held = self._held_files()
        placed = {id(r) for slot in self.line.slots if slot.fixed.is_set() for r in slot.requests}
        return [
            r
            for r in self.pending
            if not r.patch.files & held
            and all(a.decided.is_set() or id(a) in placed for a in r.after)
        ]

    def _for_line(self) -> list[Request]:
        """What the line may take: before any red, every free patch; after, the probed
        ones (likely green together), or any if the line is empty (its front is a probe
        that lands when green)."""
        free = self._free()
        if not self._probing or (not self.line.slots and not self._probes):
            return free
        return [r for r in free if r.probed]

    def _for_probe(self) -> list[Request]:
        return [r for r in self._free() if not r.probed] if self._probing else []

    @property
    def _probing(self) -> bool:
        """Patches are probed before they join the line: once some batch has been red."""
        return self.rate.seen_red and self.probe_limit > 0

    def _probe(self, free: list[Request]) -> Build:
        """A probe of the next batch of unprobed patches: built on the head, checked."""
        n = max(self.rules.config.batch_size.min, self._cap(probed=False))
        taken = Links.batch(alike(free), free, n)
        self.pending = [r for r in self.pending if r not in taken]
        self.stats.probes += 1
        return build_probe(taken)

    def _cap(self, *, probed: bool) -> int:
        """The most patches a batch takes: of probed ones (likely green together) the
        most allowed, else as many as the red rate allows."""
        size = self.rules.config.batch_size
        return size.max if probed else min(size.max, self.rate.cap())

    def _held_files(self) -> frozenset[str]:
        return frozenset(f for split in self._splits for r in split.held for f in r.patch.files)

    def _take(self, free: list[Request]) -> None:
        """A new slot at the end of the line, with the next batch of waiting patches."""
        size = self.rules.config.batch_size
        pool, free = free, alike(free)
        probed = all(r.probed for r in free)
        places = self.rules.config.parallel_checks - len(self.line.slots)
        if (self._probing and not probed) or self._gathered:
            places = 1  # unprobed patches take the front alone (`_for_line`)
        self._gathered = False
        n = max(size.min, min(self._cap(probed=probed), math.ceil(len(free) / places)))
        if self._probing and probed:  # a doubtful patch alone, the others without them
            free = free[:1] if free[0].doubtful else [r for r in free if not r.doubtful]
        taken = Links.batch(free, pool, n)
        self.pending = [r for r in self.pending if r not in taken]
        self.line.slots.append(Slot(taken))
        self.stats.batches += 1

    async def _build_and_check(self, build: Build) -> None:
        try:
            with build.scope:
                if build.ahead is not None:
                    await build.ahead.built.wait()
                if build.alternate:  # the patches are those its main build settled on
                    await build.slot.fixed.wait()
                build.base = build.ahead.tip if build.ahead is not None else self.head
                attrs: dict[str, AttributeValue] = {
                    sc.MERGE_SPECULATIVE_DEPTH: build.depth,
                    sc.MERGE_ALTERNATE: build.alternate,
                    sc.MERGE_PROBE: build.probe,
                }
                span_name = f"{sc.MERGE_SPAN} batch"
                with tracer().start_as_current_span(span_name, attributes=attrs) as span:
                    build.span = span.get_span_context()
                    try:
                        await self._build_check(build, span)
                    finally:
                        span.set_attribute(sc.MERGE_OUTCOME, build.outcome)
        finally:
            if not build.alternate:  # an alternate leaves the patches to its main build
                build.slot.fixed.set()
            build.built.set()
            build.finished.set()
            self._wake.set()

    async def _build_check(self, build: Build, span: Span) -> None:
        async with self.trees.tree() as tree:
            if not build.slot.fixed.is_set():
                self._top_up(build.slot)
                build.slot.fixed.set()
            span.set_attribute(sc.MERGE_BATCH_SIZE, len(build.requests))
            span.set_attribute(sc.MERGE_SUBTASKS, [r.patch.name for r in build.requests])
            try:
                build.steps = await tree.build(build.base, [r.patch for r in build.requests])
            except SwarmError as exc:
                build.failed, build.tip = str(exc), build.base
                return
            commits = [s.commit for s in build.steps if s.commit]
            build.tip = commits[-1] if commits else build.base
            build.built.set()
            command, key = build.command(self.rules.whole)
            if commits and command:
                build.result = await self.check(tree.path, command, key, build.tip)

    def _top_up(self, slot: Slot) -> None:
        """A batch about to be built takes the best-ranked of its patches and those that
        arrived while it waited for the one ahead (as many as it has, or its cap if more):
        a wave's first batches are formed from its first patches, and kept a place for a
        check cycle while a hundred queued (or a long chain's head, 6.6 s for `s0298`)."""
        free = self._free()
        if not free:
            return
        probed = all(r.probed for r in slot.requests)
        if probed and any(r.doubtful for r in slot.requests):
            return
        if probed:
            free = [r for r in free if r.probed and not r.doubtful]
        n = max(len(slot.requests), self._cap(probed=probed))
        best = Links.batch(by_order([*slot.requests, *alike(free, slot.requests[0])]), free, n)
        self.pending = by_order([r for r in [*self.pending, *slot.requests] if r not in best])
        slot.requests = best

    async def check(self, path: Path, command: str, key: str | None, commit: str) -> CheckResult:
        """The check of a tree at `commit` (clean: a cluster may check it on a node)."""
        result = await self.rules.checker(path, command, key=key, priority=True, commit=commit)
        if not result.reused:
            self.stats.checks_run += 1
            self.stats.check_s = round(self.stats.check_s + result.duration_s, 3)
        return result

    # -- landing ---------------------------------------------------------------------

    async def _settle(self, slot: Slot, tg: anyio.abc.TaskGroup) -> None:
        front = slot.main
        assert front is not None
        if front.green:
            self.rate.green(sum(not r.probed for r in front.requests))
            for b in self.line.landed(slot):  # built without it, as if it were red
                b.scope.cancel()
            await self.land(list(zip(front.requests, front.steps, strict=True)), front)
            return
        held = self._held_files() | (slot.files if front.failed is None else frozenset())
        dropped, cut = self.line.red(slot, held)
        for b in dropped:
            b.scope.cancel()
        # slots left without a build start again, on the head or the slots ahead
        self.stats.rebuilds += len(cut) + sum(1 for s in self.line.slots if s.main is None)
        self.stats.alternates += sum(1 for s in self.line.slots if s.main is not None)
        self.requeue([r for s in cut for r in s.requests])
        self._red(front, tg)

    async def _judged(self, probe: Build, tg: anyio.abc.TaskGroup) -> None:
        """A probe is back: green, it lands if the head is still its base and the line is
        empty, else its patches wait for the line, probed; red, it is split, unless green
        without its likeliest culprit (`_merge_probe`)."""
        if not probe.green:
            if (verdict := found_alone(probe)) is None:
                self._red(probe, tg)
                return
            split = Split(probe, held=[c.request for c in verdict.culprits], on=probe.base)
            self._splits.append(split)
            self.rate.red(len(probe.requests))
            await self._decide(split, verdict)
            return
        if probe.without is not None:
            probe.without.scope.cancel()
        self.rate.green(len(probe.requests))
        if probe.base == self.head and not self.line.slots:  # nothing moved: it lands
            await self.land(list(zip(probe.requests, probe.steps, strict=True)), probe)
            return
        self.requeue(probe.requests)
        self.links.judged(probe.requests, probe.base, self.pending)

    def _red(self, red: Build, tg: anyio.abc.TaskGroup) -> None:
        """`red` (out of the line now) is red: split beside the line, which goes on."""
        if red.failed is not None:
            for r in red.requests:
                r.settle(MergeResult("red", output=red.failed, batch=red.span))
            return
        self.rate.red(len(red.requests))
        pairs = list(zip(red.requests, red.steps, strict=True))
        chain = [(r, s) for r, s in pairs if s.commit]
        split = Split(red, held=[r for r, _ in chain], on=red.base)
        self._splits.append(split)  # its patches' files held from now on
        for r, _ in chain:
            r.probed = False
        self.requeue([r for r, s in pairs if not s.commit])
        tg.start_soon(self._split, split, chain)

    async def _split(self, split: Split, chain: list[tuple[Request, Step]]) -> None:
        async def check(path: Path, command: str, commit: str) -> CheckResult:
            return await self.check(path, command, None, commit)

        def report(verdict: Verdict[Request]) -> None:
            self._verdicts.append((split, verdict))
            self._wake.set()

        batch = split.batch
        command = self.rules.whole or batch.requests[0].check or "true"
        # twice the line's width: in 5 % red runs of 300 subtasks, 8 parts (with 4 in the
        # line) beat 4, and 16 or 32 lost the time to the checks' CPU
        width = 2 * self.rules.config.parallel_checks
        output = batch.result.output if batch.result else ""
        splitter = Splitter[Request](self.trees, check, command, width, self.landed_files)
        await splitter.run(chain, batch.base, output, report)

    async def _decide(self, split: Split, verdict: Verdict[Request]) -> None:
        """A round of `split`'s: its green patches land if nothing has moved the head since
        (their commits sit on it), else wait again, as its unjudged ones do. The culprit is
        red at once, with the commit it was red on top of (so its fixer starts from the
        green patches before it); its fixed patch is batched once those are decided."""
        split.held = verdict.held
        if verdict.green:
            if self.head == split.on and not self.line.slots and not split.waiting:
                await self.land(verdict.green, split.batch)
            else:
                split.waiting += [r for r, _ in verdict.green]
                self.requeue([r for r, _ in verdict.green])
                self.links.judged([r for r, _ in verdict.green], split.batch.base, self.pending)
            split.on = verdict.green[-1][1].commit or split.on
        split.unjudged += len(verdict.back)
        self.requeue(verdict.back)
        if verdict.culprits:
            self._splits.remove(split)
            self.stats.splits += verdict.depth
            unjudged = split.unjudged + len(split.waiting)
            self.rate.corrected(len(split.batch.requests), len(verdict.culprits), unjudged)
            base = split.on if split.waiting else None
            for c in verdict.culprits:
                if split.waiting:  # its fixer starts on them, its fix lands after them
                    self._after[c.request.patch.name] = list(split.waiting)
                red = MergeResult("red", output=c.output, batch=split.batch.span, base=base)
                c.request.settle(red)

    def requeue(self, requests: Sequence[Request]) -> None:
        self.pending = by_order([*requests, *self.pending])

    async def land(self, built: Sequence[tuple[Request, Step]], batch: Build) -> None:
        """Move the head past `built` (a green chain) and tell each patch how it went."""
        tip = next((s.commit for _, s in reversed(built) if s.commit), None)
        if tip is not None and tip != self.head:
            await self.rules.land(tip)
            self.head = tip
        merged: list[Request] = []
        for r, s in built:
            if s.kind == "committed":
                merged.append(r)
                self.landed_files |= r.patch.files
                r.settle(MergeResult("merged", s.commit, batch=batch.span))
            elif s.kind == "empty":
                r.settle(MergeResult("empty", self.head, batch=batch.span))
            else:
                kind: MergeKind = "conflict" if s.kind == "conflict" else "red"
                r.settle(MergeResult(kind, output=s.output, batch=batch.span))
        self.stats.merged += len(merged)
        self.links.landed(merged, self.head, self.pending)
