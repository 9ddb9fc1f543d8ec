"""Which waiting patches may clash, and how the merge queue keeps them together.

Uber's SubmitQueue lands changes apart when its build graph says they cannot interact.
swarm has no build graph, but a patch whose added lines name a module (import it, call
into it) another patch changes is the likeliest to break, or be broken by, that patch:
the two are *linked*. The queue batches linked patches together, so that their clash
shows in one check, whose output the split reads for its suspects. And a patch judged
green apart from a patch it is linked to is judged again before it joins the line: with
it, if that one still waits, or on the head, once it has landed.

Links are found when a patch arrives, against the patches not yet decided; a patch is
judged again for a given link once at most, so that two linked patches that cannot meet
in a batch (one held by a split) do not keep each other from the line.
"""

from __future__ import annotations

from collections.abc import Iterable

from swarm.run._merge._line import Request

__all__ = ["Links", "alike", "by_order", "naming"]


def by_order(requests: Iterable[Request]) -> list[Request]:
    return sorted(requests, key=lambda r: r.order)


def alike(free: list[Request], first: Request | None = None) -> list[Request]:
    """The patches a batch may take with `first` (else `free`'s first): those others wait
    for go apart (mixed, a red batch held 21 chains' heads back until its split ended)."""
    first = first or (free[0] if free else None)
    return [r for r in free if first is not None and r.waited_on == first.waited_on]


def naming(batch: list[Request]) -> list[Request]:
    """The patches of `batch` whose added lines name a module a patch it is linked to
    changes: where a clash between them shows, most likely."""
    return [r for r in batch if any(r.patch.named & q.patch.modules for q in r.links)]


class Links:
    """The links between the patches not yet decided."""

    def __init__(self, head: str) -> None:
        self._by_module: dict[str, list[Request]] = {}
        """The patches that change each module (by name)."""
        self._by_word: dict[str, list[Request]] = {}
        """The patches whose added lines name each word."""
        self._rejudged: set[tuple[Request, Request]] = set()
        self._landed: dict[Request, int] = {}
        """By patch: how many patches had landed once it had."""
        self._heads = {head: 0}
        """By commit the head has been: how many patches had landed then."""

    def add(self, request: Request, pending: list[Request]) -> None:
        """`request` arrives: linked to the undecided patches it names or that name it;
        a waiting one judged green without it is judged again (batched with it)."""
        patch = request.patch
        named = (q for word in patch.named for q in self._by_module.get(word, ()))
        naming = (q for module in patch.modules for q in self._by_word.get(module, ()))
        for other in dict.fromkeys([*named, *naming]):  # once each, in arrival order
            if not other.decided.is_set():
                request.links.append(other)
                other.links.append(request)
        for module in patch.modules:
            self._by_module.setdefault(module, []).append(request)
        for word in patch.named:
            self._by_word.setdefault(word, []).append(request)
        self._apart(request, set(pending))

    def landed(self, requests: list[Request], head: str, pending: list[Request]) -> None:
        """`requests` have landed (the head is now `head`): the waiting patches linked to
        one and judged green without it are judged again, on the head."""
        waiting = set(pending)
        for r in requests:
            self._landed[r] = len(self._landed) + 1
            self._apart(r, waiting)
        self._heads[head] = len(self._landed)

    def _apart(self, request: Request, waiting: set[Request]) -> None:
        for p in request.links:
            if p in waiting:
                self._again(p, request)

    def judged(self, group: list[Request], base: str, pending: list[Request]) -> None:
        """`group` was judged green together on `base`. A patch of it linked to one it was
        judged apart from is judged again: with it if it waits (and so is that one), on
        the head if it landed after `base`."""
        together = frozenset(group)
        for r in group:
            r.probed, r.judged_with = True, together
        waiting = set(pending)
        since = self._heads.get(base, 0)
        for r in group:
            for q in r.links:
                if q in waiting and q not in together:
                    self._again(r, q)
                    self._again(q, r)
                elif self._landed.get(q, 0) > since:
                    self._again(r, q)

    def _again(self, p: Request, q: Request) -> None:
        """`p` was judged apart from `q`: judge it again, once for `q`."""
        key = (p, q)
        if p.probed and q not in p.judged_with and key not in self._rejudged:
            self._rejudged.add(key)
            p.probed = False

    @staticmethod
    def batch(first: list[Request], pool: list[Request], n: int) -> list[Request]:
        """Up to `n` of `first`, in order, each with the patches of `pool` it is linked to
        (a group larger than `n` is cut)."""
        free = set(pool)
        taken: list[Request] = []
        seen: set[Request] = set()
        for r in first:
            if r in seen:
                continue
            group = [r, *(q for q in r.links if q in free and q not in seen)]
            if taken and len(taken) + len(group) > n:
                continue
            taken += group
            seen.update(group)
            if len(taken) >= n:
                break
        return by_order(taken[:n])
