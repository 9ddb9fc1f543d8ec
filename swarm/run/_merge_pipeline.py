"""The merge queue's pipeline: batches, speculation, and splitting a red batch.

Green patches wait in plan order. Whenever a place is free (at most `max_parallel_checks`
batches in flight) the runner takes the next batch of waiting patches — its size grows with
the backlog, between `batch_size.min` and `.max` — and builds it on the tip of the batch
ahead (speculation, as Zuul gates changes) or on the head. Each batch is checked once;
batches land strictly in order:

- green: the integration branch fast-forwards to its tip, one commit per subtask;
- red: the batches behind it (built on a red tip) are cancelled and their patches wait
  again; the red batch is split (`Splitter`).

A lone patch on the head gets its subtask's own check, keyed by its tree, so the result
the subtask already has is reused; a batch gets the whole check. A patch that does not
apply is decided with its batch: a conflict once the batch lands, back to waiting if not.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.abc
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AttributeValue

from swarm.config import MergeConfig
from swarm.errors import SwarmError
from swarm.run._merge_trees import Patch, Step, TreePool
from swarm.run.check import CheckFn, CheckResult, tree_key
from swarm.run.outcome import MergeKind, MergeResult
from swarm.run.report import MergeStats
from swarm.tracing import semconv as sc
from swarm.tracing.setup import tracer

__all__ = ["Pipeline", "Request"]

T = TypeVar("T")


@dataclass
class Request:
    """One patch waiting to merge, and, once decided, how that went."""

    patch: Patch
    check: str | None
    order: tuple[int, int]
    """Plan position, then arrival: batches are built in this order."""
    result: MergeResult | None = None
    decided: anyio.Event = field(default_factory=anyio.Event)

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


def _by_order(requests: list[Request]) -> list[Request]:
    return sorted(requests, key=lambda r: r.order)


class Pipeline:
    """Owns the waiting patches and the batches in flight; `run` is its one task."""

    def __init__(self, rules: Rules, trees: TreePool, head: str, stats: MergeStats) -> None:
        self.rules, self.trees, self.head, self.stats = rules, trees, head, stats
        self.pending: list[Request] = []
        self._flight: list[_Batch] = []
        self._wake = anyio.Event()

    def submit(self, request: Request) -> None:
        self.pending = _by_order([*self.pending, request])
        self._wake.set()

    def withdraw(self, request: Request) -> None:
        """A waiter gave up (cancelled): its patch leaves if no batch holds it yet."""
        if request in self.pending:
            self.pending.remove(request)

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                while self.pending and len(self._flight) < self.rules.config.parallel_checks:
                    self._start(tg)
                if self._flight and self._flight[0].finished.is_set():
                    await self._settle(self._flight.pop(0))
                    continue
                await self._wake.wait()
                self._wake = anyio.Event()

    # -- batches ---------------------------------------------------------------------

    def _start(self, tg: anyio.abc.TaskGroup) -> None:
        size = self.rules.config.batch_size
        free = self.rules.config.parallel_checks - len(self._flight)
        n = max(size.min, min(size.max, math.ceil(len(self.pending) / free)))
        taken, self.pending = self.pending[:n], self.pending[n:]
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
                attrs: dict[str, AttributeValue] = {
                    sc.MERGE_BATCH_SIZE: len(batch.requests),
                    sc.MERGE_SPECULATIVE_DEPTH: batch.depth,
                    sc.MERGE_SUBTASKS: [r.patch.name for r in batch.requests],
                }
                span_name = f"{sc.MERGE_SPAN} batch"
                with tracer().start_as_current_span(span_name, attributes=attrs) as span:
                    batch.span = span.get_span_context()
                    try:
                        await self._build_check(batch)
                    finally:
                        span.set_attribute(sc.MERGE_OUTCOME, batch.outcome)
        finally:
            batch.built.set()
            batch.finished.set()
            self._wake.set()

    async def _build_check(self, batch: _Batch) -> None:
        async with self.trees.tree() as tree:
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

    async def _settle(self, front: _Batch) -> None:
        if front.green:
            await self.land(list(zip(front.requests, front.steps, strict=True)), front)
            return
        behind, self._flight = self._flight, []
        for b in behind:  # built on a red tip: rebuilt once the culprit is out
            b.scope.cancel()
            self.stats.rebuilds += 1
        for b in behind:
            await b.finished.wait()
        self.requeue([r for b in behind for r in b.requests])
        if front.failed is not None:
            for r in front.requests:
                r.settle(MergeResult("red", output=front.failed, batch=front.span))
            return
        await Splitter(self, front).run()

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


class Splitter:
    """Finds the first culprit of a red batch and lands what came before it.

    The chain's patches are cut into parts (as many as checks may run at once); the
    prefixes ending with each part but the last are checked at once, each on top of the
    parts before it. The parts before the first red prefix land; a red part of one patch is
    the culprit, a bigger one is split again; the parts after it (and the patches that did
    not apply) wait for the next batch, where a second culprit is found the same way.
    """

    def __init__(self, pipeline: Pipeline, batch: _Batch) -> None:
        self.p, self.batch = pipeline, batch

    async def run(self) -> None:
        batch = self.batch
        pairs = list(zip(batch.requests, batch.steps, strict=True))
        items = [(r, s) for r, s in pairs if s.commit]
        back = [r for r, s in pairs if not s.commit]
        output = batch.result.output if batch.result else ""
        green: list[tuple[Request, Step]] = []
        depth = 0
        while len(items) > 1:
            depth += 1
            parts = _split(items, min(self.p.rules.config.parallel_checks, len(items)))
            results = await self._check_prefixes(parts, depth)
            first = next((j for j, r in enumerate(results) if not r.passed), len(parts) - 1)
            if first < len(results):
                output = results[first].output
            green += [x for part in parts[:first] for x in part]
            back += [r for part in parts[first + 1 :] for r, _ in part]
            items = parts[first]
        self.p.stats.splits += depth
        if green:
            await self.p.land(green, batch)
        culprit = items[0][0]
        culprit.settle(MergeResult("red", output=output, batch=batch.span))
        self.p.requeue(back)

    async def _check_prefixes(
        self, parts: list[list[tuple[Request, Step]]], depth: int
    ) -> list[CheckResult]:
        tips = [part[-1][1].commit or "" for part in parts[:-1]]
        results: dict[int, CheckResult] = {}
        command = self.p.rules.whole or parts[0][0][0].check or "true"
        attrs: dict[str, AttributeValue] = {
            sc.MERGE_SPLIT_DEPTH: depth,
            sc.MERGE_BATCH_SIZE: sum(map(len, parts)),
            sc.MERGE_SUBTASKS: [r.patch.name for part in parts for r, _ in part],
        }

        async def check(j: int) -> None:
            async with self.p.trees.tree() as tree:
                await tree.goto(tips[j])
                results[j] = await self.p.check(tree.path, command, None, tips[j])

        with tracer().start_as_current_span(f"{sc.MERGE_SPAN} split", attributes=attrs):
            async with anyio.create_task_group() as tg:
                for j in range(len(tips)):
                    tg.start_soon(check, j)
        return [results[j] for j in range(len(tips))]


def _split(items: list[T], k: int) -> list[list[T]]:
    """`items` in `k` contiguous parts of near-equal size."""
    size, extra = divmod(len(items), k)
    out, at = [], 0
    for j in range(k):
        n = size + (1 if j < extra else 0)
        out.append(items[at : at + n])
        at += n
    return out
