"""Definitions a change adds as near copies of ones it leaves as they were.

Asked to add type hints to `report.py`, a small model wrote `order_summary_updated`
beside `summary`: `summary`'s body under a new name, hinted, and `summary` left as it
was. The check passed (nothing calls the copy, the tests call the original), and the
subtask merged having changed nothing it was asked to change. A coder's change is read
for top-level functions and classes of its Python files that are new, that no word of the
task or subtask names, that are not tests (a new test is rightly written from the one
beside it), and whose body is mostly (`SIMILAR`) that of a definition of the
same kind in the same file which the change leaves exactly as it was: the coder is asked
once to change the original instead, and the report says what is still a copy.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from swarm._pyast import parse
from swarm.errors import WorkspaceError
from swarm.run._diff import python_sections
from swarm.run._git import git
from swarm.run._missing import words

__all__ = ["Copy", "copied_definitions", "copy_prompt", "near_copies"]

SIMILAR = 0.8
"""How alike two bodies must be (difflib's ratio of their lines) for one to be a copy."""
_SHORTEST = 3
"""Bodies shorter than this many lines are not compared: two one-line bodies (`return 1`)
are alike without one being written from the other."""
_LONGEST = 200
"""Bodies longer than this many lines are not compared (the comparison is quadratic)."""
_ADDED_DEFINITION = re.compile(r"^\+(?:async[ \t]+def|def|class)[ \t]", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Copy:
    """A new top-level definition that is a near copy of one the change left unchanged."""

    path: str
    name: str
    of: str

    def __str__(self) -> str:
        return f"{self.name} (a near copy of {self.of}, {self.path})"


def near_copies(path: str, old: str, new: str, named: frozenset[str]) -> list[Copy]:
    """The definitions the file `path` gains from `old` to `new`, that `named` leaves
    out, and that copy one `new` keeps exactly as `old` had it (none where either text
    does not parse)."""
    before, after = _definitions(old), _definitions(new)
    if before is None or after is None:
        return []
    kept = {name: d for name, d in before.items() if after.get(name) == d}
    copies: list[Copy] = []
    for name, (kind, _, lines) in after.items():
        if name in before or name in named or not _SHORTEST <= len(lines) <= _LONGEST:
            continue
        if name.startswith(("test", "Test")):
            continue  # tests are written by copying the one beside them, and rightly
        for original, (original_kind, _, original_lines) in kept.items():
            if original_kind != kind or not _SHORTEST <= len(original_lines) <= _LONGEST:
                continue
            matcher = difflib.SequenceMatcher(None, original_lines, lines, autojunk=False)
            if matcher.quick_ratio() >= SIMILAR and matcher.ratio() >= SIMILAR:
                copies.append(Copy(path, name, original))
                break
    return copies


async def copied_definitions(root: Path, base: str, patch: str, *asked: str) -> list[Copy]:
    """The near copies (`near_copies`) the change `patch`, made in the worktree `root`
    from the commit `base`, adds to the Python files it changes; `asked` are the task's
    and the subtask's words."""
    named = words(*asked)
    copies: list[Copy] = []
    for path in _adding_definitions(patch):
        try:
            old = await git("show", f"{base}:{path}", cwd=root)
            new = (root / path).read_text(encoding="utf-8", errors="replace")
        except (WorkspaceError, OSError):
            continue  # a new file (nothing there to copy) or one gone since
        copies += near_copies(path, old, new, named)
    return copies


def _adding_definitions(patch: str) -> list[str]:
    """The Python files to which `patch` adds a line that starts a top-level definition:
    only those can gain a copy (most changes edit lines inside one, and are not read)."""
    paths: list[str] = []
    for path, section in python_sections(patch):
        if path not in paths and _ADDED_DEFINITION.search(section):
            paths.append(path)
    return paths


def copy_prompt(copies: list[Copy]) -> str:
    """What a coder whose change adds near copies of definitions it left unchanged is
    told, once."""
    listed = "; ".join(
        f"`{c.name}` in {c.path}, a near copy of `{c.of}`, which it leaves as it was"
        for c in copies
    )
    return (
        f"Your change adds {listed}. Your subtask asks you to change what is there, not "
        "to write it again beside it: make the change in the original with edit_file, "
        "delete the copy, run run_tests, then call finish. If a new definition is what "
        "your subtask asks for, call finish and say why."
    )


_Definition = tuple[str, str, tuple[str, ...]]
"""A definition's kind (`def`, `class`), its whole text, and its body's lines (those after
its signature, stripped)."""


def _definitions(source: str) -> dict[str, _Definition] | None:
    """Each top-level function and class by name (`_Definition`), or None where `source`
    does not parse."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = source.splitlines()
    found: dict[str, _Definition] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            first, last = node.body[0].lineno, node.end_lineno or node.body[-1].lineno
            body = tuple(line.strip() for line in lines[first - 1 : last] if line.strip())
            found[node.name] = (kind, "\n".join(lines[start - 1 : last]), body)
    return found
