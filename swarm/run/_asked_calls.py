"""Tool calls read against what the task and the subtask ask: `AskedRenames`,
`KeptDefinitions`, `NotATool`.

Renames no instruction asks for are refused before they run. The `rename` tool changes a
name in every Python file at once, which makes an unasked rename cheap to make and costly
to undo. A small model given "create the `Item` dataclass" called it ten times in a row
(`summary` to `order_summary`, `name` to `item_name`, `qty` to `quantity`, `BULK_DISCOUNT`
to `BULK_DISCOUNT_RATE`, ...): every caller and test changed with them, the check went
red on the dictionaries that still had `"name"` keys, and three fixers could not bring the
subtask back.

A rename is asked when the subtask's words (its title and instructions) name both the
old name and the new one ("Rename `calc_total` to `order_total`"), or name one of them and
the task's words name both (a planner's "Rename `calc_total` everywhere"). The task's
words alone do not ask it of every subtask: the coder of the `Item` dataclass made the
task's rename, and the rename's own coder, finding nothing to rename, tried it again
eleven times. Any other `rename` call is vetoed, and the agent reads why; the names may
still change by `edit_file`, one use at a time, where a change really needs it. A call
under another name with `old` and `new` alone is judged too: it runs as a `rename`
(`swarm.agent._steps`).

A definition is kept when an edit puts new code in its place. A small model asked to "Add
a function `clamp`" to a file holding `add` called `edit_file` with `old` the whole `add`
function and `new` the `clamp` function: `add` went, its test went red, and the coder,
sent back to put it back, made the same edit again. An `edit_file` on a Python file whose
`old` is whole top-level definitions and whose `new` defines other names in place of ones
no instruction names runs as adding `new` before `old`, and its answer says so
(`KeptDefinitions`). (An `old` that is a definition's first line alone, `edit_file` itself
reads as code to put before it.)

A function the subtask asks for is written, not called. A small model asked to "Add a
function `low_stock` to `stock.py`" called a tool `low_stock`, with a JSON schema for its
arguments, twice, and was told only that no tool has that name. Such a call is told what
the name is: the code its subtask asks it to write, and where.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from swarm._pyast import parse as parse_python
from swarm.agent._confined import read_regular
from swarm.agent._fenced_files import definitions_kept
from swarm.agent._steps import call_arguments
from swarm.agent.hooks import Hooks, StepInfo, Veto
from swarm.errors import WorkspaceError
from swarm.messages import ToolCall
from swarm.run._git import git

__all__ = ["AskedRenames", "KeptDefinitions", "NotATool"]

RENAME_TOOL = "rename"
_UNKNOWN = "error: unknown tool {!r}."
"""How the agent's answer to a call under no tool's name begins (`swarm.agent._steps`)."""
_MAX_READ_BYTES = 5_000_000
"""A larger file of the agent's is not read for a definition (as the rename tool)."""
_HEADER = re.compile(r"^(?:async[ \t]+def|def|class)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
"""A top-level definition's name, at the start of its line."""
_STARTS_A_DEFINITION = re.compile(r"(?:@|async[ \t]+def[ \t]|def[ \t]|class[ \t])")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_ANY_DEFINITION = re.compile(
    r"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+([A-Za-z_]\w*)", re.MULTILINE
)
_RENAMES = {"old", "new"}
"""A `rename` call's arguments: a call under another name with these alone runs as one."""


@dataclass(frozen=True)
class AskedRenames(Hooks):
    """A `before_tool` hook: vetoes a `rename` its subtask does not ask for."""

    subtask: frozenset[str]
    """Every word of the subtask's title and instructions."""
    task: frozenset[str]
    """Every word of the task's title and instructions."""
    files: tuple[str, ...] = ()
    """The subtask's files: where none is Python, a task's rename is theirs to make by
    `edit_file` (a README's example)."""
    tools: frozenset[str] = frozenset()
    """The agent's tool names: a call to another of them is no rename, and is not read."""

    async def before_tool(self, info: StepInfo, call: ToolCall) -> ToolCall | Veto | None:
        if call.name != RENAME_TOOL and call.name in self.tools:
            return None
        args = call_arguments(call)  # unreadable: the tool's own validation says why
        if call.name != RENAME_TOOL and set(args) != _RENAMES:
            return None
        old, new = args.get("old"), args.get("new")
        if not isinstance(old, str) or not isinstance(new, str) or old == new:
            return None
        named = [name in self.subtask for name in (old, new)]
        in_task = old in self.task and new in self.task
        if all(named) or (any(named) and in_task):
            return None
        if in_task and self.files and not any(f.endswith(".py") for f in self.files):
            # a README's coder, its rename vetoed, tried it again and again, three times over
            return Veto(
                f"Not renamed: `rename` changes Python code, and your files "
                f"({', '.join(self.files)}) are not Python. Where they show `{old}`, change "
                f'it with edit_file (old: "{old}", new: "{new}", replace_all: true).'
            )
        return Veto(
            f"Not renamed: your subtask does not ask to rename `{old}` to `{new}`. Rename "
            "only what your subtask asks to (another subtask may do the task's other "
            "renames); every other name stays as it is."
        )


@dataclass(frozen=True)
class KeptDefinitions(Hooks):
    """A `before_tool` hook: an `edit_file` that renames a test no instruction names by
    its first line is vetoed; one that would put new definitions in
    the place of top-level ones none names runs as adding the new code before them, and a
    `write_file` of a Python file that leaves them out as putting its code in beside them
    (`swarm.agent._fenced_files.definitions_kept`); the answer says what was kept."""

    named: frozenset[str]
    """Every word of the task's and the subtask's titles and instructions."""
    root: Path
    """The agent's worktree (local), where the file is read."""
    kept: dict[str, list[str]] = field(default_factory=dict, compare=False)
    """The names kept, by the id of the call that would have removed them."""

    async def before_tool(self, info: StepInfo, call: ToolCall) -> ToolCall | Veto | None:
        if call.name not in ("edit_file", "write_file"):
            return None
        args = call_arguments(call)
        path = args.get("path")
        if not isinstance(path, str) or not path.endswith(".py") or args.get("replace_all"):
            return None
        if call.name == "edit_file" and (renamed := self._renamed(args)) is not None:
            old, new = renamed
            return Veto(
                f"Not changed: this edit renames `{old}` to `{new}`, and no instruction asks "
                f"to rename `{old}`. To add `{new}`, write it whole beside `{old}`: make "
                f"`new` the new code followed by `old` unchanged."
            )
        changed = self._edit(path, args) if call.name == "edit_file" else self._write(path, args)
        if changed is None or not await self._committed(path, changed):
            return None
        self.kept[call.id] = changed
        return call.model_copy(update={"arguments": json.dumps(args)})

    def _renamed(self, args: dict[str, Any]) -> tuple[str, str] | None:
        """(old, new) when the edit in `args` swaps a test's first line for another
        definition's, the test named by no instruction: a small model's fixer made
        `def test_add` into `def test_clamp`, so the asked-for name was there, testing
        `add`, and the check passed."""
        old, new = args.get("old"), args.get("new")
        if not isinstance(old, str) or not isinstance(new, str):
            return None
        was, now = _HEADER.findall(old.strip()), _HEADER.findall(new.strip())
        one_line = "\n" not in old.strip() and "\n" not in new.strip()
        if not one_line or len(was) != 1 or len(now) != 1 or was == now:
            return None
        if not was[0].startswith("test") or was[0] in self.named:
            return None  # another function renamed so breaks its callers: the check says
        return was[0], now[0]

    def _edit(self, path: str, args: dict[str, Any]) -> list[str] | None:
        """What the edit in `args` would take away, with `args["new"]` made to keep it."""
        old, new = args.get("old"), args.get("new")
        if not isinstance(old, str) or not isinstance(new, str):
            return None
        in_old = _whole_definitions(old)  # a first line alone: edit_file keeps its body
        in_new = set(_HEADER.findall(new))
        gone = [n for n in in_old if n not in in_new and n not in self.named]
        if not gone or not in_new - set(in_old):
            return None
        text = self._text(path)
        at = -1 if text is None else text.find(old)
        if text is None or at < 0 or text.count(old) != 1 or (at and text[at - 1] != "\n"):
            return None  # not once, at the start of a line (a top-level one)
        body = old.lstrip("\n")
        args["new"] = old[: len(old) - len(body)] + new.strip("\n") + "\n\n\n" + body
        return gone

    def _write(self, path: str, args: dict[str, Any]) -> list[str] | None:
        """What the write in `args` would take away, with `args["content"]` made to keep
        it (a small model sent back for `test_clamp` wrote the test file without
        `test_add`)."""
        content, text = args.get("content"), self._text(path)
        if not isinstance(content, str) or text is None:
            return None
        kept = definitions_kept(text, content, set(self.named))
        if kept is None:
            return None
        args["content"], gone = kept
        return gone

    async def after_tool(self, info: StepInfo, call: ToolCall, text: str) -> str | None:
        gone = self.kept.pop(call.id, None)
        if gone is None or text.startswith("error"):
            return None
        listed = ", ".join(f"`{name}`" for name in gone)
        return (
            f"{text}\n(Kept {listed}: no instruction asks to remove "
            f"{'it' if len(gone) == 1 else 'them'}. Your new code went in beside it.)"
        )

    async def _committed(self, path: str, names: list[str]) -> bool:
        """Whether `path` as the worktree's commit has it (what the agent started from)
        defines every one of `names`: what the agent itself added, it may take away (a
        coder sent back to delete the near copy it wrote wrote the file without it)."""
        try:
            text = await git("show", f"HEAD:{PurePosixPath(path).as_posix()}", cwd=self.root)
        except WorkspaceError:
            return False  # a new file, or no commit: nothing there to keep
        defined = set(_ANY_DEFINITION.findall(text))
        return all(name.rpartition(".")[2] in defined for name in names)

    def _text(self, path: str) -> str | None:
        """The text of the agent's file `path` (None: not a regular file in the worktree,
        or too large to read)."""
        relative = PurePosixPath(path)
        if relative.is_absolute() or ".." in relative.parts:
            return None
        return _agent_text(self.root / relative)


def _agent_text(file: Path) -> str | None:
    """The text of an agent's `file` (None: not a regular file, or larger than
    `_MAX_READ_BYTES`); no FIFO read, no symlink followed."""
    try:
        if file.lstat().st_size > _MAX_READ_BYTES:
            return None
    except OSError:
        return None
    data = read_regular(file)
    return None if data is None else data.decode("utf-8", "replace")


def _whole_definitions(code: str) -> list[str]:
    """The names of the top-level functions and classes `code` holds whole, when it is
    one or more of them and nothing else ([]: not so)."""
    if not _STARTS_A_DEFINITION.match(code.lstrip("\n")):
        return []
    try:
        body = parse_python(code).body
    except (SyntaxError, ValueError):
        return []
    if not all(isinstance(node, _DEFINITIONS) for node in body):
        return []
    return [node.name for node in body if isinstance(node, _DEFINITIONS)]


@dataclass(frozen=True)
class NotATool(Hooks):
    """An `after_tool` hook: a call to no tool, under a name the subtask asks to define
    (or one that holds it: `add_clamp`) or one its files define, is told that the name is
    code (to write, or to change there), not a tool."""

    names: frozenset[str]
    """The code names the subtask asks for (`swarm.run._missing.asked_names`)."""
    files: tuple[str, ...] = ()
    fenced: bool = False
    """Whether code the model shows in a fence is written (`swarm.agent._fenced_files`):
    the way a small model writes code best."""
    root: Path | None = None
    """Where `files` are, to look for a definition of the name (None: not looked for)."""

    async def after_tool(self, info: StepInfo, call: ToolCall, text: str) -> str | None:
        unknown = _UNKNOWN.format(call.name)
        if not text.startswith(unknown):
            return None
        if (asked := self._asked_within(call.name)) is not None:
            where = f" in {', '.join(self.files)}" if self.files else ""
            how = "call edit_file or write_file"
            if self.fenced:
                how = f"show its code in a ```python fence under the file's path, or {how}"
            what = "it is" if asked == call.name else f"`{asked}` is"
            said = f"{what} code your subtask asks you to write{where}. To write it, {how}"
        elif (defined := self._defined(call.name)) is not None:
            # the 1.5B model called `apply_discount`, a function of pricing.py, as a tool
            said = f"it is code in {defined}. To change it, call edit_file on {defined}"
        else:
            return None
        return (
            f"error: `{call.name}` is not a tool: {said}; then call finish." + text[len(unknown) :]
        )

    def _asked_within(self, name: str) -> str | None:
        """The longest asked name that `name` is or holds between underscores: the 1.5B
        model asked for `test_clamp` called a tool `add_clamp`, after the task's title
        "Add clamp to mathutil"."""
        held = [n for n in self.names if re.search(rf"(?:^|_){re.escape(n)}(?:_|$)", name)]
        return max(held, key=len, default=None)

    def _defined(self, name: str) -> str | None:
        """The first of `files` that defines `name` (a function or a class)."""
        if self.root is None or not name.isidentifier():
            return None
        definition = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", re.MULTILINE)
        for file in self.files:
            if not file.endswith(".py"):
                continue
            text = _agent_text(self.root / file)
            if text is not None and definition.search(text):
                return file
        return None
