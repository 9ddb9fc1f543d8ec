"""Probes: batches of unprobed patches checked on the head beside the merge queue's line,
only to judge them (`swarm.run._merge._pipeline`).

A probe holding exactly one patch that names a module a patch it is linked to changes
(`swarm.run._merge._links.naming`: where a clash shows, most likely) is also built without
that patch, and both are checked at once. Red with it and green without it, that patch is
the culprit and the rest is green, found in one check's time instead of the probe's and a
split round's. One patch only: with two, which one is red would take a round still.
"""

from __future__ import annotations

from swarm.run._merge._line import Build, Request, Slot
from swarm.run._merge._links import naming
from swarm.run._merge._split import Culprit, Verdict

__all__ = ["build_probe", "found_alone", "judgeable"]


def build_probe(taken: list[Request]) -> Build:
    """A probe of `taken`, and its build without its likeliest culprit if it has one."""
    build = Build(Slot(taken), None, 0, probe=True)
    likely = naming(taken)
    if len(likely) == 1 and len(taken) > 1:
        rest = Slot([r for r in taken if r not in likely])
        build.without = Build(rest, None, 0, alternate=True, probe=True)
    for b in filter(None, (build, build.without)):
        b.slot.fixed.set()
    return build


def judgeable(build: Build) -> bool:
    """Judged: green, or red and its build without its likeliest culprit back too."""
    without = build.without
    done = build.finished.is_set()
    return done and (build.green or without is None or without.finished.is_set())


def found_alone(build: Build) -> Verdict[Request] | None:
    """A red probe's verdict if it is green without its likeliest culprit (which applied
    and was checked), else None (it is split)."""
    rest = build.without
    if build.result is None or build.result.passed or build.failed is not None:
        return None  # not checked red (it did not build, say)
    if rest is None or not rest.green or rest.result is None:
        return None
    if any(s.kind != "committed" for s in [*build.steps, *rest.steps]):
        return None
    (culprit,) = [r for r in build.requests if r not in rest.requests]
    output = build.result.output
    green = list(zip(rest.requests, rest.steps, strict=True))
    return Verdict(green, culprits=[Culprit(culprit, output)])
