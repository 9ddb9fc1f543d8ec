"""Names a subtask asks for that its change leaves nowhere in the repository.

A small model asked to "Add test_clamp to tests/test_mathutil.py" wrote a second `clamp`
into the test file instead; the check passed (it ran the one old test) and the run said
"done" with no test of `clamp`. A subtask's title and instructions are read for the code
names they ask for: `test_*` names, names called with arguments (`clamp(x, lo, hi)`) and
names in backticks and snake_case names (`order_total`: no word of prose has an inner
underscore), bar Python's keywords, builtins and standard modules and the tools that run
code (`pytest`). Those no file of the worktree holds before the change (as a
whole word, tracked or new) are new names; a name already there may go (a rename). After
the coder's turn, each new name still nowhere is missing: the coder is asked once to add
it, and the report says what is still missing.

What a merged subtask added, a later one may take away: a small model given "Update the
README's example" renamed `order_total`, which the subtask before it had just made, to
`order_total_new`, and the run said "done". A name a merged subtask was asked for, in the
worktree when a later subtask starts and not named by that subtask's words, is kept: the
coder that takes it away is asked once to put it back, and the report says what is gone.
"""

from __future__ import annotations

import builtins
import keyword
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from swarm.errors import WorkspaceError
from swarm.run._git import git

__all__ = [
    "asked_names",
    "missing_names",
    "missing_prompt",
    "named_files",
    "taken_prompt",
    "words",
]

_TEST = re.compile(r"\btest_\w+")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\([^()\n]*\)")
_BACKTICKED = re.compile(r"`([A-Za-z_]\w*)`")
_SNAKE = re.compile(r"\b[A-Za-z]\w*?[A-Za-z0-9]_[A-Za-z0-9]\w*")
_PATHS = re.compile(r"[\w.-]*(?:/[\w.-]+)+|[\w-]+\.(?:py|md|rst|txt|toml|json|cfg|ini|ya?ml)\b")
"""Paths (`tests/test_x.py`): files, not names the code is asked to define."""
_TOOLS = frozenset({"pytest", "python", "python3", "pip", "git", "ruff", "mypy", "tox", "uv"})
_MIN_LENGTH = 3
_MAX_NAMES = 12


def asked_names(*texts: str) -> list[str]:
    """The code names `texts` ask for, in order, each once."""
    text = _PATHS.sub(" ", "\n".join(texts))
    found = [
        *_TEST.findall(text),
        *(m.group(1) for m in _CALLED.finditer(text)),
        *_BACKTICKED.findall(text),
        *_SNAKE.findall(text),
    ]
    return [name for name in dict.fromkeys(found) if _is_code_name(name)][:_MAX_NAMES]


def words(*texts: str) -> frozenset[str]:
    """Every word of `texts` (runs of letters, digits and `_`): the names they mention."""
    return frozenset(re.findall(r"\w+", " ".join(texts)))


def _is_code_name(name: str) -> bool:
    return (
        len(name) >= _MIN_LENGTH
        and not keyword.iskeyword(name)
        and not hasattr(builtins, name)
        and name not in sys.stdlib_module_names
        and name not in _TOOLS
    )


async def missing_names(root: Path, names: list[str]) -> list[str]:
    """Those of `names` no file under `root` (a git worktree) holds as a whole word."""
    if not names:
        return []
    patterns = [arg for name in names for arg in ("-e", name)]
    try:
        found = await git(
            "grep", "-o", "-h", "-I", "-w", "-F", "--untracked", "--no-color", *patterns, cwd=root
        )
    except WorkspaceError:
        found = ""  # none found (git grep exits 1)
    held = set(found.split())
    return [name for name in names if name not in held]


def named_files(root: Path, *texts: str) -> tuple[str, ...]:
    """The paths `texts` name that are files under `root`, in order, each once."""
    named = dict.fromkeys(m.group(0) for m in _PATHS.finditer("\n".join(texts)))
    return tuple(
        name
        for name in named
        if not name.startswith("/") and ".." not in name.split("/") and (root / name).is_file()
    )


def missing_prompt(missing: list[str], files: tuple[str, ...], fenced: bool = False) -> str:
    """What a coder whose change left out names its subtask asks for is told, once;
    `fenced`: code it shows in a fence is written (`swarm.agent._fenced_files`), the way
    a small model writes code best."""
    listed = ", ".join(f"`{name}`" for name in missing)
    where = f" (your files: {', '.join(files)})" if files else ""
    how = "with edit_file or write_file"
    if fenced and (python := [f for f in files if f.endswith(".py")]):
        # the 1.5B model sent back for `test_clamp` said three times it had added it
        how = (
            f"by showing the whole new text of {' or '.join(python)} in a ```python fence "
            f"under its path, or {how}"
        )
    return (
        f"Your subtask asks for {listed}, but no file in your worktree has "
        f"{'it' if len(missing) == 1 else 'them'} now. Add what is missing{where} {how}, "
        "keeping what is there, then call `finish`."
    )


def taken_prompt(taken: Mapping[str, str]) -> str:
    """What a coder whose change took away names merged subtasks added is told, once;
    `taken` maps each name to the subtask that added it."""
    listed = ", ".join(f"`{name}` (added by {by})" for name, by in taken.items())
    it = "it" if len(taken) == 1 else "them"
    return (
        f"Your change takes away {listed}: the task needs {it}, and your subtask does not "
        f"ask to rename or remove {it}. Put {it} back under the same name (rename back what "
        "you renamed), run run_tests, then call finish."
    )
