"""Finding the culprits of a red batch: `Splitter`, beside the merge queue's line.

A red batch is a chain of commits, one per patch, on the commit it was built on. The chain
is cut into parts (as many as checks may run at once) and the prefixes ending with each
part but the last are checked at once, each on top of the parts before it. The parts
before the first red prefix are green; a red part of one patch is the culprit, a bigger
one is split again. The patches after the culprit are then rebuilt on the green ones
(without it) and checked as one: green, they are green too; red, the next culprit is found
the same way. So a batch holding several culprits is judged once, not once per culprit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import anyio
from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from swarm.run._merge_trees import Patch, Step, TreePool
from swarm.run.check import CheckResult
from swarm.tracing import semconv as sc
from swarm.tracing.setup import tracer

__all__ = ["Culprit", "Splitter", "Verdict"]


class _Waiting(Protocol):
    @property
    def patch(self) -> Patch: ...


R = TypeVar("R", bound=_Waiting)
T = TypeVar("T")
Link = tuple[R, Step]
CheckAt = Callable[[Path, str, str], Awaitable[CheckResult]]
"""Checks the tree at a path with a command; the commit it has checked out."""


@dataclass(frozen=True)
class Culprit(Generic[R]):
    request: R
    output: str
    after: int
    """How many of the verdict's green patches it was red on top of."""


@dataclass
class Verdict(Generic[R]):
    """What splitting found: the culprits, the green chain on the batch's base (in plan
    order, without them), and the patches it could not judge (they no longer applied)."""

    culprits: list[Culprit[R]] = field(default_factory=list)
    green: list[Link[R]] = field(default_factory=list)
    back: list[R] = field(default_factory=list)
    depth: int = 0
    """Rounds of checks it took."""


class Splitter(Generic[R]):
    """Judges one red batch (see the module docstring)."""

    def __init__(self, trees: TreePool, check: CheckAt, command: str, width: int) -> None:
        self.trees, self.check, self.command = trees, check, command
        self.width = max(2, width)

    async def run(self, chain: list[Link[R]], base: str, output: str) -> Verdict[R]:
        """`chain`: the red batch's committed patches on `base`; `output`: its check's."""
        v: Verdict[R] = Verdict()
        while chain:
            culprit, output, rest = await self._first(chain, output, v)
            v.culprits.append(Culprit(culprit, output, len(v.green)))
            if not rest:
                break
            tip = v.green[-1][1].commit if v.green else base
            chain, result = await self._rebuild(tip or base, rest, v)
            if result is None or result.passed:
                v.green += chain
                break
            output = result.output
        return v

    async def _first(
        self, chain: list[Link[R]], output: str, v: Verdict[R]
    ) -> tuple[R, str, list[Link[R]]]:
        """The first culprit of a red chain, its check's output, and the patches after
        it; the ones before it join the verdict's green chain."""
        items, rest = chain, list[Link[R]]()
        while len(items) > 1:
            v.depth += 1
            parts = _split(items, min(self.width, len(items)))
            results = await self._check_prefixes(parts, v.depth)
            first = next((j for j, r in enumerate(results) if not r.passed), len(parts) - 1)
            if first < len(results):
                output = results[first].output
            v.green += [x for part in parts[:first] for x in part]
            rest = [x for part in parts[first + 1 :] for x in part] + rest
            items = parts[first]
        return items[0][0], output, rest

    async def _rebuild(
        self, tip: str, rest: list[Link[R]], v: Verdict[R]
    ) -> tuple[list[Link[R]], CheckResult | None]:
        """`rest` rebuilt on `tip` and checked as one (None: nothing to check)."""
        v.depth += 1
        requests = [r for r, _ in rest]
        with self._span(v.depth, requests):
            async with self.trees.tree() as tree:
                steps = await tree.build(tip, [r.patch for r in requests])
                chain = [(r, s) for r, s in zip(requests, steps, strict=True) if s.commit]
                v.back += [r for r, s in zip(requests, steps, strict=True) if not s.commit]
                if not chain:
                    return [], None
                last = chain[-1][1].commit or tip
                return chain, await self.check(tree.path, self.command, last)

    async def _check_prefixes(self, parts: list[list[Link[R]]], depth: int) -> list[CheckResult]:
        tips = [part[-1][1].commit or "" for part in parts[:-1]]
        results: dict[int, CheckResult] = {}

        async def check(j: int) -> None:
            async with self.trees.tree() as tree:
                await tree.goto(tips[j])
                results[j] = await self.check(tree.path, self.command, tips[j])

        with self._span(depth, [r for part in parts for r, _ in part]):
            async with anyio.create_task_group() as tg:
                for j in range(len(tips)):
                    tg.start_soon(check, j)
        return [results[j] for j in range(len(tips))]

    def _span(self, depth: int, requests: list[R]) -> AbstractContextManager[Span]:
        attrs: dict[str, AttributeValue] = {
            sc.MERGE_SPLIT_DEPTH: depth,
            sc.MERGE_BATCH_SIZE: len(requests),
            sc.MERGE_SUBTASKS: [r.patch.name for r in requests],
        }
        return tracer().start_as_current_span(f"{sc.MERGE_SPAN} split", attributes=attrs)


def _split(items: list[T], k: int) -> list[list[T]]:
    """`items` in `k` contiguous parts of near-equal size."""
    size, extra = divmod(len(items), k)
    out, at = [], 0
    for j in range(k):
        n = size + (1 if j < extra else 0)
        out.append(items[at : at + n])
        at += n
    return out
