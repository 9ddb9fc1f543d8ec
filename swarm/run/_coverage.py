"""The parts of a task a plan leaves out.

A task file often lists its parts as bullets. Given the demo's five ("Introduce a frozen
`Item` dataclass …", "Rename `calc_total` …", "Add type hints …", "Add `low_stock` …",
"Update the README's example …"), a 1.5B planner answered with two subtasks, item and
rename: the run merged both, ended `done`, and three parts of the task were never
attempted. A bullet is covered when at least `COVERED` of its words (lowercased, three
letters or more, common words left out) appear in the plan's subtasks (titles,
instructions and files). The planner is asked once more, told the parts it left out; the
plan that leaves out fewer is kept (`swarm.run._agent_factory`).
"""

from __future__ import annotations

import re

from swarm.run._plan import Plan

__all__ = ["COVERED", "coverage_problem", "task_parts", "uncovered_parts"]

COVERED = 0.5
"""The share of a bullet's words a plan must hold for the bullet to be covered."""
_BULLET = re.compile(r"^(?P<indent>[ \t]*)(?:[-*+]|\d{1,3}[.)])[ \t]+(?P<text>\S.*)$")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")
_COMMON = frozenset(
    "the and for with from into that this these those its are was were will must should "
    "each every all any not but new use add make out one two also them they their than "
    "then when where which who how what has have had does still keep kept once only more "
    "less like same other own there here per via way can may".split()
)


def task_parts(instructions: str) -> list[str]:
    """The task's bullets at their outermost level, each with the lines that continue it
    (`- a` / `* a` / `1. a`; a fenced block's lines are not bullets)."""
    parts: list[str] = []
    outer: int | None = None  # the open list's bullet indent (None: no list open)
    fenced = False
    for line in instructions.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif fenced or not line.strip():
            continue
        elif bullet := _BULLET.match(line):
            indent = len(bullet["indent"].expandtabs(4))
            if outer is None or indent <= outer:
                outer = indent
                parts.append(bullet["text"].strip())
            else:  # a bullet inside the open one
                parts[-1] += " " + bullet["text"].strip()
        elif outer is not None and line[:1].isspace():
            parts[-1] += " " + line.strip()  # the open bullet's wrapped line
        else:
            outer = None  # prose ends the list
    return parts


def uncovered_parts(instructions: str, plan: Plan) -> list[str]:
    """The task's bullets (`task_parts`) of which the plan holds fewer than `COVERED` of
    the words."""
    held = _words(
        " ".join(f"{s.title} {s.instructions} {' '.join(s.files)}" for s in plan.subtasks)
    )
    left = []
    for part in task_parts(instructions):
        wanted = _words(part)
        if wanted and len(wanted & held) < COVERED * len(wanted):
            left.append(part)
    return left


def coverage_problem(parts: list[str]) -> str:
    """What the planner is told about the parts its plan left out."""
    listed = "\n".join(f"  - {part}" for part in parts)
    return (
        "it leaves out these parts of the task (no subtask does them, or only a small part "
        f"of them):\n{listed}\n  Add a subtask for each, or put each into the subtask that "
        "changes the same files."
    )


def _words(text: str) -> set[str]:
    found = {w.lower() for w in _WORD.findall(text)}
    return {w for w in found if len(w) >= 3 and w not in _COMMON}
