"""Finding the culprit of a red batch: `Splitter`, beside the merge queue's line.

A red batch is a chain of commits, one per patch, on the commit it was built on. The chain
is cut into parts (as many as checks may run at once) and the prefixes ending with each
part but the last are checked at once, each on top of the parts before it. The parts
before the first red prefix are green; those after it are not judged. Both are handed back
at once, after each round, and the first red part is split again, down to one patch: the
culprit. So the patches behind a culprit wait one round, not the whole split; a second
culprit among them turns their next batch red and is found the same way.

A red check's output often names the culprit's files (a traceback, a failed test's path).
The patches touching a file it names are the suspects; so are those whose module a named
file refers to, if an earlier patch of the run landed that file (a culprit whose clash
landed first names nothing of its own). Then a round checks, instead of prefixes, the
chain without the suspects, rebuilt on the same commit, and each suspect alone on top of
it, at once. If that is green, every other patch is green and each suspect red on it is
a culprit: one round, with every culprit the output named (a check that reports each
failure, as pytest does, names them all). If it is red, what its output names joins the
suspects; once nothing new is named, the split goes on by prefixes.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Generic, Protocol, TypeVar

import anyio
from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.errors import WorkspaceError
from swarm.run._check import CheckResult, plain
from swarm.run._git import git
from swarm.run._merge._line import Build, Request
from swarm.run._merge._trees import Patch, Step, TreePool

__all__ = ["Culprit", "Split", "Splitter", "Verdict"]


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
    and, in the last round, the culprits."""

    green: list[Link[R]] = field(default_factory=list)
    back: list[R] = field(default_factory=list)
    held: list[R] = field(default_factory=list)
    culprits: list[Culprit[R]] = field(default_factory=list)
    """Found in the last round: each red on the green patches before it."""
    depth: int = 0
    """The round it ends (1: the first)."""


@dataclass(eq=False)
class Split:
    """A red batch being split, as its rounds come back."""

    batch: Build
    held: list[Request]
    """Its patches still being split: the waiting ones on their files wait for them."""
    on: str
    """The commit its next green patches sit on."""
    waiting: list[Request] = field(default_factory=list)
    """Its green patches sent back to wait (the head had moved): its culprit's fix comes
    after them."""
    unjudged: int = 0


class Splitter(Generic[R]):
    """Finds one red batch's culprit (see the module docstring)."""

    def __init__(
        self,
        trees: TreePool,
        check: CheckAt,
        command: str,
        width: int,
        landed: AbstractSet[str] = frozenset(),
    ) -> None:
        self.trees, self.check, self.command = trees, check, command
        self.width = max(2, width)
        self.landed = landed
        """The files this run's landed patches changed (read as they land)."""

    async def run(
        self,
        chain: list[Link[R]],
        base: str,
        output: str,
        report: Callable[[Verdict[R]], None],
    ) -> None:
        """`chain`: the red batch's committed patches, on `base`; `output`: its check's.
        `report` is told what each round found, the last time with the culprits."""
        items, depth, suspected = chain, 0, set[int]()
        while len(items) > 1:
            depth += 1
            paths = _paths_in(output)
            named = {id(link) for link in items if link[0].patch.files & paths}
            named |= await self._referenced(paths, items)
            new, suspected = named - suspected, suspected | named
            suspects = [link for link in items if id(link) in suspected]
            apart = bool(new) and len(suspects) <= self.width
            parts = _split(items, min(self.width, len(items)))
            with self._span(depth, [r for r, _ in items]):
                aside = suspects if apart else []
                verdict, red, results = await self._round(items, parts, base, aside, depth)
            if verdict is not None:
                report(verdict)
                return
            if not results:  # the rest was checked alone: red, what it names is suspected
                output = red or output
                continue
            first = next((j for j, r in enumerate(results) if not r.passed), len(parts) - 1)
            if first < len(results):
                output = results[first].output
            if first > 0:
                base = parts[first - 1][-1][1].commit or base
            items = parts[first]
            report(
                Verdict(
                    green=[x for part in parts[:first] for x in part],
                    back=[r for part in parts[first + 1 :] for r, _ in part],
                    held=[r for r, _ in items],
                    depth=depth,
                )
            )
        report(Verdict(culprits=[Culprit(items[0][0], output)], depth=depth))

    async def _referenced(self, paths: frozenset[str], items: list[Link[R]]) -> set[int]:
        """The patches whose module a file the output names refers to by name (imports
        it), when that file is one an earlier patch of the run landed and none of `items`
        touches: red on it, such a patch names nothing itself (its clash landed first)."""
        touched = frozenset().union(*(r.patch.files for r, _ in items))
        files = sorted((self.landed & paths) - touched)[:READ_AT_MOST]
        words: set[str] = set()
        for path in files:
            with contextlib.suppress(WorkspaceError):
                text = await git("show", f"{items[-1][1].commit}:{path}", cwd=self.trees.repo)
                words.update(_WORD.findall(text))
        return {
            id(link)
            for link in items
            if any(PurePosixPath(f).stem in words for f in link[0].patch.files)
        }

    async def _round(
        self,
        items: list[Link[R]],
        parts: list[list[Link[R]]],
        base: str,
        suspects: list[Link[R]],
        depth: int,
    ) -> tuple[Verdict[R] | None, str | None, list[CheckResult]]:
        """With suspects, `_apart`'s checks; without, the prefixes'."""
        if suspects:
            verdict, red = await self._apart(items, base, suspects, depth)
            return verdict, red, []
        return None, None, await self._check_prefixes(parts)

    async def _apart(
        self, items: list[Link[R]], base: str, suspects: list[Link[R]], depth: int
    ) -> tuple[Verdict[R] | None, str | None]:
        """The rest of `items` (all but `suspects`) rebuilt on `base` and checked, and
        each suspect alone on top of it, at once. If the rest is green, the suspects red
        on it are the culprits (the others go back): that verdict. If the rest is red: its
        check's output. Neither if no suspect is red, or the rest does not apply."""
        aside = {id(link) for link in suspects}
        rest = [link[0] for link in items if id(link) not in aside]
        async with self.trees.tree() as tree:
            steps = await tree.build(base, [r.patch for r in rest]) if rest else []
            if any(s.kind != "committed" for s in steps):
                return None, None
            tip = (steps[-1].commit or base) if steps else base
            results: dict[int, CheckResult] = {}
            async with anyio.create_task_group() as tg:
                for j, (r, _) in enumerate(suspects):
                    tg.start_soon(self._check_on, tip, r.patch, results, j)
                # the base itself is green: the head, or the green patches a split found
                checked = await self.check(tree.path, self.command, tip) if rest else None
                if checked is not None and not checked.passed:
                    tg.cancel_scope.cancel()
                    return None, checked.output
        red = {j: r for j, r in results.items() if not r.passed}
        if not red:
            return None, None
        verdict = Verdict(
            green=list(zip(rest, steps, strict=True)),
            back=[r for j, (r, _) in enumerate(suspects) if j not in red],
            culprits=[Culprit(suspects[j][0], r.output) for j, r in sorted(red.items())],
            depth=depth,
        )
        return verdict, None

    async def _check_on(
        self, base: str, patch: Patch, results: dict[int, CheckResult], j: int
    ) -> None:
        """`patch` alone on `base`, checked into `results[j]` (nothing if it does not apply)."""
        async with self.trees.tree() as tree:
            steps = await tree.build(base, [patch])
            if steps[0].commit is not None:
                results[j] = await self.check(tree.path, self.command, steps[0].commit)

    async def _check_prefixes(self, parts: list[list[Link[R]]]) -> list[CheckResult]:
        tips = [part[-1][1].commit or "" for part in parts[:-1]]
        results: dict[int, CheckResult] = {}

        async def check(j: int) -> None:
            async with self.trees.tree() as tree:
                await tree.goto(tips[j])
                results[j] = await self.check(tree.path, self.command, tips[j])

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


_PATH = re.compile(r"[\w./-]+")
_WORD = re.compile(r"\w+")
READ_AT_MOST = 8
"""Landed files a red output names that a split reads for the modules they refer to."""


def _paths_in(output: str) -> frozenset[str]:
    """The paths a check's output names, each with its tails (`/w/src/m.py:3` gives
    `/w/src/m.py`, `w/src/m.py`, `src/m.py`, `m.py`), as tracebacks and test reports
    print a repository's file alone or at the end of a longer path."""
    out: set[str] = set()
    for token in set(_PATH.findall(plain(output))):
        parts = token.rstrip(".").split("/")
        out.update("/".join(parts[k:]) for k in range(len(parts)))
    return frozenset(out)
