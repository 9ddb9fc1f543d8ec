"""Finding the culprit of a red batch: `Splitter`, beside the merge queue's line.

A red batch is a chain of commits, one per patch, on the commit it was built on. The chain
is cut into parts (as many as checks may run at once) and the prefixes ending with each
part but the last are checked at once, each on top of the parts before it. The parts
before the first red prefix are green; those after it are not judged. Both are handed back
at once, after each round, and the first red part is split again, down to one patch: the
culprit. So the patches behind a culprit wait one round, not the whole split; a second
culprit among them turns their next batch red and is found the same way.
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


@dataclass
class Verdict(Generic[R]):
    """What a round of splitting found: green patches (the chain's next ones on its base,
    in order), the patches it will not judge (`back`), those still being split (`held`),
    and, in the last round, the culprit."""

    green: list[Link[R]] = field(default_factory=list)
    back: list[R] = field(default_factory=list)
    held: list[R] = field(default_factory=list)
    culprit: Culprit[R] | None = None
    depth: int = 0
    """The round it ends (1: the first)."""


class Splitter(Generic[R]):
    """Finds one red batch's culprit (see the module docstring)."""

    def __init__(self, trees: TreePool, check: CheckAt, command: str, width: int) -> None:
        self.trees, self.check, self.command = trees, check, command
        self.width = max(2, width)

    async def run(
        self, chain: list[Link[R]], output: str, report: Callable[[Verdict[R]], None]
    ) -> None:
        """`chain`: the red batch's committed patches; `output`: its check's. `report`
        is told what each round found, the last time with the culprit."""
        items, depth = chain, 0
        while len(items) > 1:
            depth += 1
            parts = _split(items, min(self.width, len(items)))
            results = await self._check_prefixes(parts, depth)
            first = next((j for j, r in enumerate(results) if not r.passed), len(parts) - 1)
            if first < len(results):
                output = results[first].output
            items = parts[first]
            report(
                Verdict(
                    green=[x for part in parts[:first] for x in part],
                    back=[r for part in parts[first + 1 :] for r, _ in part],
                    held=[r for r, _ in items],
                    depth=depth,
                )
            )
        report(Verdict(culprit=Culprit(items[0][0], output), depth=depth))

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
