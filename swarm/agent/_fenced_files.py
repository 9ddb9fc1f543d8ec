"""A whole file shown in a fence, where a tool call was wanted, read as `write_file`.

Small open models asked to change a file often answer with the file itself: a path on
the line above a fenced block (`### app/pricing.py`, `` `app/pricing.py`: ``), in the
fence's info string (```` ```python app/pricing.py ````), or nothing at all when the
subtask has one file. That reply changes nothing, and telling the model to call a tool
rarely helps a model of that size. `FencedFileWrites` (an `after_model` hook) reads such a
reply, when it calls no tool and was not cut off, as one `write_file` call per file shown
(the format aider calls "whole"), so the check judges the change like any other.

Only what is plainly a whole file is taken:

- its path is in the agent's scope (a subtask's files: paths, directories or globs), or,
  with no scope, a file the workspace already has; a block whose path is only inferred
  (one file in scope, no path written) must be in that file's language;
- Python must parse, hold no elision (`# ... rest unchanged`, a lone `...`), and keep
  every top-level definition of the file it replaces and every method of its classes,
  except names the task itself mentions (a rename or a removal it asks for): a snippet
  of the one function the model changed is not the file;
- another existing file must keep all of its lines (it may only grow); a new file is
  taken as written;
- a path shown twice is ambiguous and taken from neither block.

A block that names a path but fails a rule becomes the reply's `tool_call_problem`, which
the agent tells the model (what was left out, and that `edit_file` changes a part). Calls
made so are counted as read from text (`tool_call_format` `fenced-file`).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from swarm.agent.hooks import Hooks, StepInfo
from swarm.messages import ChatResult, Message, ToolCall

__all__ = ["FencedFileWrites"]

FORMAT = "fenced-file"
_CUT = ("length", "repetition")
_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^`\n]*?)[ \t]*$")
_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z]\w{0,7})(?![\w/-])")
_ELIDED = re.compile(
    r"^\s*(?:\.\.\.|#.*(?:\.\.\.|rest of|existing code|unchanged|remains? the same|as before))",
    re.IGNORECASE | re.MULTILINE,
)
_LANGUAGES = {".py": {"python", "py", "python3", ""}}
_MAX_LABEL_CHARS = 160


@dataclass(frozen=True, slots=True)
class _Block:
    body: str
    language: str
    path: str | None
    """The path the reply wrote for it (info string, the line above, a first-line
    comment), or None."""


@dataclass
class FencedFileWrites(Hooks):
    """An `after_model` hook: a reply that calls no tool but shows whole files in fences
    calls `tool` (`write_file(path, content)`) with each instead."""

    root: Path
    """The workspace the paths are relative to."""
    scope: Sequence[str] = ()
    """The files the agent works on: paths, directories (`src/util/`) or globs."""
    asked: str = ""
    """What the agent was asked to do: names it mentions may leave a file."""
    tool: str = "write_file"

    async def after_model(self, info: StepInfo, result: ChatResult) -> ChatResult | None:
        message = result.message
        if message.tool_calls or result.finish_reason in _CUT or "`" not in (message.content or ""):
            return None
        if result.tool_call_problem:
            return None  # a tool call it meant to write: the model is told why it failed
        writes, problem = self._read(message.content or "")
        if not writes:
            return result.model_copy(update={"tool_call_problem": problem}) if problem else None
        calls = [
            ToolCall(
                id=f"fenced-{info.step}-{i}",
                name=self.tool,
                arguments=json.dumps({"path": path, "content": content}),
            )
            for i, (path, content) in enumerate(writes.items())
        ]
        changed = Message(role="assistant", content=message.content, tool_calls=calls)
        return result.model_copy(
            update={
                "message": changed,
                "finish_reason": "tool_calls",
                "tool_call_format": FORMAT,
                "text_tool_calls": len(calls),
            }
        )

    def _read(self, text: str) -> tuple[dict[str, str], str]:
        """{path: content} of the whole files `text` shows, and why a block that named
        its path was not taken ("" when none failed)."""
        blocks = list(_blocks(text))
        inferred = self._only_file()
        shown: dict[str, list[_Block]] = {}
        for block in blocks:
            path = block.path or inferred
            if path is not None and (block.path is not None or _fits(path, block.language)):
                shown.setdefault(path, []).append(block)
        writes: dict[str, str] = {}
        problem = ""
        for path, versions in shown.items():
            if len(versions) > 1:
                continue  # which one?
            why = self._refusal(path, versions[0])
            if why is None:
                writes[path] = _ended(versions[0].body)
            elif versions[0].path is not None and not problem:
                problem = why
        return writes, problem

    def _only_file(self) -> str | None:
        """The scope's one file, when it is a single plain path."""
        if len(self.scope) != 1:
            return None
        only = self.scope[0]
        plain = not only.endswith("/") and not any(c in only for c in "*?[")
        return only if plain and _normal(only) is not None else None

    def _refusal(self, path: str, block: _Block) -> str | None:
        """Why `block` is not taken as the whole of `path` (None: it is)."""
        relative = _normal(path)
        if relative is None:
            return f"the reply shows {path}, which is not a path inside the workspace"
        target = self.root / relative
        exists = target.is_file()
        if not self._in_scope(relative, exists):
            return None if block.path is None else f"the reply shows {path}, not one of its files"
        old = target.read_text(errors="replace") if exists else None
        if old is not None and _ended(block.body) == old:
            return None if block.path is None else f"the reply shows {path} as it already is"
        if path.endswith(".py"):
            return _python_refusal(path, block.body, old, self.asked)
        if old is not None:
            kept = set(block.body.splitlines())
            lost = [line for line in old.splitlines() if line.strip() and line not in kept]
            if lost:
                return (
                    f"the reply shows {path} without {len(lost)} of its lines "
                    f"(first: {lost[0].strip()[:60]!r}); show the whole file, or change a part "
                    "of it with edit_file"
                )
        return None

    def _in_scope(self, relative: str, exists: bool) -> bool:
        if not self.scope:
            return exists
        for entry in self.scope:
            entry = entry.strip().removeprefix("./")
            if relative == entry or fnmatch.fnmatchcase(relative, entry):
                return True
            if entry.endswith("/") and relative.startswith(entry):
                return True
        return False


def _blocks(text: str) -> Iterator[_Block]:
    """The closed fenced blocks of `text`, each with the path it names, if any."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence, info = opened.group(1), opened.group(2)
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)), None
        )
        if end is None:
            return  # an open fence: the rest is its body, cut off
        body = lines[i + 1 : end]
        words = info.replace(":", " ").replace("=", " ").split()
        language = words[0].lower() if words and "." not in words[0] else ""
        path = _one_path(" ".join(words)) or _label(lines[:i])
        if path is None and body:
            path = _comment_path(body[0])  # kept in the file: a comment is harmless there
        yield _Block("\n".join(body), language, path)
        i = end + 1


def _label(before: Sequence[str]) -> str | None:
    """The path written on the line above a fence: the line is the path (in backticks or
    bold), a heading, or a short line ending with a colon naming one path."""
    for line in reversed(before[-2:]):
        stripped = line.strip()
        if not stripped:
            continue
        if len(stripped) > _MAX_LABEL_CHARS:
            return None
        bare = stripped.strip("#*` ").removesuffix(":").strip("*` ")
        if _PATH.fullmatch(bare) or stripped.startswith("#") or stripped.endswith(":"):
            return _one_path(stripped)
        return None
    return None


def _comment_path(line: str) -> str | None:
    """The path a first-line comment names (`# app/x.py`, `// File: app/x.js`)."""
    stripped = line.strip()
    for mark in ("#", "//", "--"):
        if stripped.startswith(mark):
            rest = stripped[len(mark) :].strip()
            rest = re.sub(r"^(?:file(?:name)?|path)\s*:\s*", "", rest, flags=re.IGNORECASE)
            return rest if _PATH.fullmatch(rest) else None
    return None


def _one_path(text: str) -> str | None:
    found = {m.group(1) for m in _PATH.finditer(text)}
    return found.pop() if len(found) == 1 else None


def _normal(path: str) -> str | None:
    """`path` relative and normalised, or None when it leaves the workspace."""
    pure = PurePosixPath(path.strip().removeprefix("./"))
    if pure.is_absolute() or ".." in pure.parts or ".git" in pure.parts or not pure.parts:
        return None
    return str(pure)


def _fits(path: str, language: str) -> bool:
    """Whether a block in `language` may be `path` (for a path the reply did not write)."""
    suffix = PurePosixPath(path).suffix
    return language in _LANGUAGES.get(suffix, {suffix.lstrip("."), ""})


def _ended(body: str) -> str:
    return body.rstrip("\n") + "\n"


def _python_refusal(path: str, body: str, old: str | None, asked: str) -> str | None:
    try:
        tree = ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"the reply shows {path}, but it is not valid Python ({exc})"
    if elided := _ELIDED.search(body):
        return (
            f"the reply shows {path} with a part left out ({elided.group(0).strip()!r}): "
            "show the whole file, or change a part of it with edit_file"
        )
    now = _defined(tree)
    if not now:
        return f"the reply shows {path} as code that defines nothing (a file defines names)"
    if old is None:
        return None
    try:
        before = ast.parse(old)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the file as it is does not parse: any parsing whole is better
    mentioned = set(re.findall(r"\w+", asked))
    lost = sorted(n for n in _defined(before) - now if n.rpartition(".")[2] not in mentioned)
    if lost:
        shown = ", ".join(lost[:5]) + (" ..." if len(lost) > 5 else "")
        return (
            f"the reply shows {path} without {shown}, which the file defines now (writing "
            "it would delete them): show the whole file, or change a part of it with edit_file"
        )
    return None


def _defined(tree: ast.Module) -> set[str]:
    """Top-level names a module defines, and `Class.method` for its classes' methods."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{item.name}")
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names
