"""Definitions a patch removes that nobody asked to remove.

A small model asked to add a test rewrote the test file and dropped the test beside it;
the check then passed with one test fewer, and the run said "done". A coder's patch is
read for top-level Python functions and classes that it deletes and defines nowhere else
(a definition moved to another file is kept), and those the task's and subtask's words
never name are unasked removals: the coder is asked once to restore them, and the report
says what is still gone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from swarm.run._missing import words

__all__ = ["Removal", "removal_prompt", "unasked_removals"]

_DEFINITION = re.compile(r"(?:async[ \t]+def|def|class)[ \t]+([A-Za-z_]\w*)")
_NEW_FILE = re.compile(r"\+\+\+ (?:b/)?(.+)")
_OLD_FILE = re.compile(r"--- (?:a/)?(.+)")


@dataclass(frozen=True, slots=True)
class Removal:
    """A top-level definition the patch deletes."""

    path: str
    name: str

    def __str__(self) -> str:
        return f"{self.name} ({self.path})"


def removed_definitions(patch: str) -> list[Removal]:
    """Top-level `def`/`class` names the unified diff `patch` deletes from Python files
    and adds back in none (so a definition moved to another file is not removed)."""
    removed: list[Removal] = []
    added: set[str] = set()
    path = ""
    for line in patch.splitlines():
        if line.startswith("--- "):
            m = _OLD_FILE.match(line)
            path = m.group(1).strip() if m else ""
        elif line.startswith("+++ "):
            m = _NEW_FILE.match(line)
            new = m.group(1).strip() if m else ""
            path = path if new == "/dev/null" else new
        elif line.startswith("-") and path.endswith(".py"):
            if m := _DEFINITION.match(line, 1):
                removed.append(Removal(path, m.group(1)))
        elif line.startswith("+"):
            if m := _DEFINITION.match(line, 1):
                added.add(m.group(1))
    return list(dict.fromkeys(r for r in removed if r.name not in added))


def unasked_removals(patch: str, *asked: str) -> list[Removal]:
    """The definitions `patch` removes whose names none of the texts in `asked` (the
    task's and the subtask's words) mention."""
    named = words(*asked)
    return [r for r in removed_definitions(patch) if r.name not in named]


def removal_prompt(removals: list[Removal]) -> str:
    """What a coder whose change removes definitions nobody asked to remove is told, once."""
    listed = ", ".join(map(str, removals))
    return (
        f"Your change removes {listed}, and your subtask does not ask for that. Put "
        f"{'it' if len(removals) == 1 else 'them'} back as they were (keep the old lines "
        "and add yours beside them), run run_tests, then call finish. If the removal is "
        "part of your subtask, call finish and say why."
    )
