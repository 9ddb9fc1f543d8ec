"""Names the task renames that the branch still shows.

Asked to "Rename `calc_total` to `order_total` everywhere", a swarm on a small model
renamed the definition, its callers and the tests (the rename tool does), but the coder
of "Update the README's example" changed one of the two README lines that named it: the
check passed (pytest does not read a README) and the run said "done". The task's words are
read for renames (`rename X to Y`); at the end of a run whose branch has the new name, the
lines that still hold the old one as a whole word (any text file of the worktree) go to the
coder that completes the task (`Coordinator._complete`), and the report names what is
still there. A task that renames nothing costs nothing: no git runs.
"""

from __future__ import annotations

import re
from pathlib import Path

from swarm.errors import WorkspaceError
from swarm.run._git import git

__all__ = ["left_behind", "renames"]

_RENAME = re.compile(
    r"\brenam(?:e|es|ing)\s+`?([A-Za-z_]\w*)`?\s+(?:to|into|as)\s+`?([A-Za-z_]\w*)`?", re.I
)
_SHOWN_LINES = 20
"""How many lines still holding an old name are kept (the rest are counted)."""
_LINE_CHARS = 160


def renames(*texts: str) -> list[tuple[str, str]]:
    """The (old, new) names `texts` ask to rename, in order, each once."""
    found = ((m.group(1), m.group(2)) for text in texts for m in _RENAME.finditer(text))
    return list(dict.fromkeys((old, new) for old, new in found if old != new))


async def left_behind(root: Path, pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    """For each (old, new) of `pairs` whose new name a file under `root` (a git worktree)
    holds, the `path:line: text` lines that still hold the old one; renames done
    everywhere (or not begun) are left out."""
    out: dict[str, list[str]] = {}
    for old, new in pairs:
        if not await _lines(root, new, limit=1):
            continue  # not begun: the new name is missing, which `_missing` reports
        if lines := await _lines(root, old, limit=_SHOWN_LINES):
            out[old] = lines
    return out


async def _lines(root: Path, name: str, *, limit: int) -> list[str]:
    try:
        found = await git(
            "grep", "-n", "-I", "-w", "-F", "--untracked", "--no-color", "-e", name, cwd=root
        )
    except WorkspaceError:
        return []  # none found (git grep exits 1)
    lines = found.splitlines()
    shown = [_short(line) for line in lines[:limit]]
    if len(lines) > limit > 1:
        shown.append(f"... and {len(lines) - limit} more")
    return shown


def _short(line: str) -> str:
    path, number, text = [*line.split(":", 2), "", ""][:3]
    text = " ".join(text.split())
    if len(text) > _LINE_CHARS:
        text = text[: _LINE_CHARS - 3] + "..."
    return f"{path}:{number}: {text}"
