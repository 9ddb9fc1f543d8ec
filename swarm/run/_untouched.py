"""Files a subtask names that its change leaves as they were.

Asked to "add type hints to every public function in pricing.py, stock.py and report.py",
a small model called `finish` with files of the three unhinted; the check passed (hints
change no behaviour), and no real-model demo branch of two stops held every hint. The
planner's `files` for a subtask are the files it is to change: a finished coder whose
change works in some of them and leaves another as it was (or does not make a new one) is
asked once to do its part there too, or to say why that file needs nothing, and the
report says which files are still untouched. A change made wholly in other files says the
planner's list was a guess, and is not sent back. Test files are left out (a planner
lists them for the check to run, `{files}`, changed or not), and so are folders and
wildcards.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from swarm.run._diff import header_path
from swarm.run._strays import DEFAULT_PATTERNS, is_test_file

__all__ = ["untouched_files", "untouched_prompt"]

_SIDE = re.compile(r"^(?:\+\+\+ b/|--- a/|rename (?:from|to) )(.+)$", re.MULTILINE)


def untouched_files(
    patch: str, files: Sequence[str], root: Path, tests: Sequence[str] = DEFAULT_PATTERNS
) -> list[str]:
    """The files of `files` (a subtask's, relative to the worktree `root`) that `patch`
    neither changes nor makes, when it changes at least one of them (a change made
    wholly elsewhere says the list was wrong, not the change); folders, wildcards and
    test files are left out."""
    changed = {p for line in patch.splitlines() if (p := header_path(line)) is not None}
    changed.update(side.strip() for side in _SIDE.findall(patch))
    if changed.isdisjoint(files):  # its work is elsewhere: the planner's list was a guess
        return []
    return [
        path
        for path in dict.fromkeys(files)
        if path not in changed
        and not path.endswith("/")
        and not any(c in path for c in "*?[")
        and not (root / path).is_dir()
        and not _is_test(PurePosixPath(path), tests)
    ]


def _is_test(path: PurePosixPath, tests: Sequence[str]) -> bool:
    """A test file (by `tests`, pytest's `python_files`) or one in a tests folder: a
    planner lists those for the check to run (`{files}`), whether they change or not."""
    return is_test_file(path.name, tests) or any(p in ("tests", "test") for p in path.parts[:-1])


def untouched_prompt(files: list[str]) -> str:
    """What a coder whose change leaves files of its subtask as they were is told, once."""
    one = len(files) == 1
    listed = ", ".join(files)
    return (
        f"Your subtask names {listed}, and your change leaves {'it' if one else 'them'} as "
        f"{'it was' if one else 'they were'}. Do your subtask's part in "
        f"{'it' if one else 'each of them'} too (read_file shows a file), run run_tests, "
        "then call finish. If a file needs no change, call finish and say why."
    )
