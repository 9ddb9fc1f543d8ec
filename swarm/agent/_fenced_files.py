"""Code shown in a fence, where a tool call was wanted, read as a `write_file` of it.

Small open models asked to change a file often answer with code instead of a call: the
whole file, or the functions they changed or added, under a path (`### app/pricing.py`,
`` `app/pricing.py`: ``), with the path in the fence's info string (```` ```python
app/pricing.py ````) or in a first-line comment (a fence holding several files, each
under such a comment, is one block per file), or with no path at all when the subtask
has one file, the reply's prose names one ("add this test to `tests/test_x.py`"), or one
of its Python files defines a function or class the block shows (`add`, beside the new
`clamp`). A fence indented in a list item takes that indent off its lines (CommonMark). That
reply changes nothing, and telling the model to call a tool rarely helps a model of that
size. `FencedFileWrites` (an `after_model` hook) reads such a reply, when it calls no
tool (or only `run_tests` or `finish`, which take the change as made: the writes go before
them) and was not cut off, as one `write_file` call per file shown, so the check judges
the change like any other. Blocks of one file are read in order, each on what the ones
before made of it (an import, then a function).

What a block becomes, and when it is refused:

- its path must be in the agent's scope (a subtask's files: paths, directories or
  globs), or, with no scope, a file the workspace already has; a block whose path is
  only inferred must be in that file's language;
- Python must parse, hold no elision (`# ... rest unchanged`, a lone `...`) and define
  something, but no function named as one of the agent's tools (`def finish(summary)`:
  how the model thinks a tool works), and no `test_*` function outside a test file. Of
  its top-level `from M import ...`, the names a module `M` of the workspace does not
  have (as the reply's earlier blocks leave it), and any from the file's own module, are
  left out: they would fail the file at import. When it keeps every top-level definition of the
  file it replaces (and every method of its classes), bar names the task mentions (a
  rename or a removal it asks for), it is the whole file (what aider calls the "whole"
  format), with the file's module docstring put back when the block leaves it out.
  Otherwise, when it holds only imports, functions and classes, they are put into the
  file: each replaces the definition of its name or is added at the end, each new import
  goes after the file's imports; the result must keep every definition too.
  A block with anything else (a script, example calls) is refused;
- another existing file must keep all of its lines (it may only grow), or be shown whole,
  changed: from its first line to its last, nothing elided (a README whose example a
  Markdown fence holds in a fence of its own); a new file is taken as written;
- two blocks that show a file whole two different ways: neither is taken.

A block that names its path but is refused becomes the reply's `tool_call_problem`,
which the agent tells the model (what would be lost, and that `edit_file` changes a part).
Calls made so are counted as read from text (`tool_call_format` `fenced-file`).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from swarm._pyast import parse as parse_python
from swarm.agent._steps import CUT_SHORT, call_arguments
from swarm.agent.hooks import Hooks, StepInfo
from swarm.messages import ChatResult, Message, ToolCall

__all__ = ["FencedFileWrites", "definitions_kept", "imports_itself", "merged"]

FORMAT = "fenced-file"
_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^`\n]*?)[ \t]*$")
_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z]\w{0,7})(?![\w/-])")
_ELIDED = re.compile(
    r"^\s*(?:\.\.\.|#.*(?:\.\.\.|rest of|existing code|unchanged|remains? the same|as before))",
    re.IGNORECASE | re.MULTILINE,
)
_LANGUAGES = {".py": {"python", "py", "python3", ""}, ".md": {"markdown", "md", ""}}
_AFTER_A_CHANGE = frozenset({"run_tests", "finish"})
"""Calls that take the change as made: a reply that shows code and makes only these
("now I run the tests") writes the code first."""
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
    """An `after_model` hook: a reply that calls no tool (or only `run_tests`, `finish`) but
    shows files or their functions in fences calls `tool` (`write_file(path, content)`)
    with each, before its own calls."""

    root: Path
    """The workspace the paths are relative to."""
    scope: Sequence[str] = ()
    """The files the agent works on: paths, directories (`src/util/`) or globs."""
    asked: str = ""
    """What the agent was asked to do: names it mentions may leave a file."""
    tool: str = "write_file"
    tools: frozenset[str] = frozenset()
    """The agent's tool names: code defining one (`def finish(summary): ...`) shows how the
    model thinks a tool works, not code for a file."""

    async def after_model(self, info: StepInfo, result: ChatResult) -> ChatResult | None:
        message = result.message
        shown, others = self._code_calls(message.tool_calls)
        text = "\n\n".join(filter(None, [message.content, *shown]))
        if result.finish_reason in CUT_SHORT or "`" not in text:
            return None
        if any(c.name not in _AFTER_A_CHANGE for c in others):
            return None  # it works with the tools: what it shows is not what it wrote
        if result.tool_call_problem:
            return None  # a tool call it meant to write: the model is told why it failed
        writes, problem = self._read(text)
        if not writes:
            if message.tool_calls:
                return None
            return result.model_copy(update={"tool_call_problem": problem}) if problem else None
        calls = [
            ToolCall(
                id=f"fenced-{info.step}-{i}",
                name=self.tool,
                arguments=json.dumps({"path": path, "content": content}),
            )
            for i, (path, content) in enumerate(writes.items())
        ]
        written = len(calls)
        calls += others  # its run_tests or finish, once the files are there
        native = message.written is None and bool(message.tool_calls)  # its calls, natively
        as_written = None if native else (message.written or message.content)
        changed = Message.assistant(message.content, calls, as_written)
        return result.model_copy(
            update={
                "message": changed,
                "finish_reason": "tool_calls",
                "tool_call_format": FORMAT,
                "text_tool_calls": written,
            }
        )

    def _code_calls(self, calls: Sequence[ToolCall]) -> tuple[list[str], list[ToolCall]]:
        """The calls under a name that is no tool's (or `tool` with no path) that carry
        code for a file, each as the fenced block it would be, and the other calls. Small
        models named their call after their subtask: `create_item_dataclass(content)`,
        `create_dataclass(path, code)`; a call whose arguments fit a tool is left to run
        as that tool (`Steps._execute`)."""
        shown: list[str] = []
        others: list[ToolCall] = []
        for call in calls:
            named = call.name in self.tools and (
                call.name != self.tool or '"path"' in call.arguments
            )
            block = None if named else _code(call)
            if block is None:
                others.append(call)
            else:
                shown.append(block)
        return shown, others

    def _read(self, text: str) -> tuple[dict[str, str], str]:
        """{path: new content} of the files `text` shows, and why a block that named its
        path was not taken ("" when none failed). Blocks of one file are taken in order,
        each on what the ones before made of it (an import, then a function)."""
        inferred = self._only_file() or self._only_mentioned(text)
        taken: dict[str, str] = {}
        wholes: dict[str, set[str]] = {}
        problem = ""
        for block in _blocks(text):
            path = self._in_place(block.path) if block.path else inferred or self._owner(block)
            if path is None or (block.path is None and not _fits(path, block.language)):
                continue
            content, why = self._content(path, block, taken)
            if content is not None:
                taken[path] = content
                if content == _ended(block.body):
                    wholes.setdefault(path, set()).add(content)
            elif block.path is not None and not problem:
                problem = why
        # a file shown whole two ways is ambiguous: neither is taken
        return {
            p: self._docstring_kept(p, got)
            for p, got in taken.items()
            if len(wholes.get(p, ())) <= 1
        }, problem

    def _docstring_kept(self, path: str, content: str) -> str:
        """`content` with the module docstring the file has now, when the model's whole
        file leaves it out (it rewrote the file from memory, not as a change to it)."""
        target = self.root / path
        if not path.endswith(".py") or not target.is_file():
            return content
        old = target.read_text(errors="replace")
        try:
            before, after = parse_python(old), parse_python(content)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return content
        if ast.get_docstring(after, clean=False) is not None or not before.body:
            return content
        if ast.get_docstring(before, clean=False) is None:
            return content
        docstring = _source(old, before.body[0])
        lines = content.splitlines(keepends=True)
        top = 0  # after the comments and blank lines it starts with (`# path`, a shebang)
        while top < len(lines) and (not lines[top].strip() or lines[top].lstrip().startswith("#")):
            top += 1
        return "".join([*lines[:top], docstring.rstrip("\n") + "\n\n", *lines[top:]])

    def _in_place(self, path: str) -> str:
        """`path` as the scope has it: a name the reply gave without its directories
        (`test_x.py` for the scope's `tests/test_x.py`) is the one scope file it ends."""
        relative = _normal(path)
        if relative is None or self._in_scope(relative, (self.root / relative).is_file()):
            return path
        ends = {e for e in map(_normal, self.scope) if e and e.endswith(f"/{relative}")}
        return ends.pop() if len(ends) == 1 else path

    def _only_file(self) -> str | None:
        """The scope's one file, when it is a single plain path."""
        if len(self.scope) != 1:
            return None
        only = self.scope[0]
        plain = not only.endswith("/") and not any(c in only for c in "*?[")
        return only if plain and _normal(only) is not None else None

    def _owner(self, block: _Block) -> str | None:
        """The one Python file of the scope that defines a name `block` defines too (a
        block with `add` and `clamp`, from a file that has `add`), for a block whose path
        the reply did not write and the scope does not settle."""
        if block.language not in _LANGUAGES[".py"]:
            return None
        try:
            shown = _defined(parse_python(block.body))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        owners = set()
        for entry in self.scope:
            relative = _normal(entry)
            if relative is None or not relative.endswith(".py"):
                continue
            try:
                source = (self.root / relative).read_text(errors="replace")
                if shown & _defined(parse_python(source)):
                    owners.add(relative)
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                continue
        return owners.pop() if len(owners) == 1 else None

    def _only_mentioned(self, text: str) -> str | None:
        """The one file of the scope the reply's prose names, if it names only one ("add
        this test to `tests/test_x.py`")."""
        named = {
            relative
            for m in _PATH.finditer(text)
            if (relative := _normal(m.group(1))) is not None
            and self._in_scope(relative, (self.root / relative).is_file())
        }
        return named.pop() if len(named) == 1 else None

    def _content(
        self, path: str, block: _Block, taken: Mapping[str, str]
    ) -> tuple[str | None, str]:
        """What `path` becomes with `block` (on what earlier blocks made of the files,
        `taken`, else the file as it is), or None and why not."""
        current = taken.get(path)
        relative = _normal(path)
        if relative is None:
            return None, f"the reply shows {path}, which is not a path inside the workspace"
        target = self.root / relative
        exists = current is not None or target.is_file()
        if not self._in_scope(relative, exists):
            return None, f"the reply shows {path}, not one of its files"
        old = (
            current
            if current is not None
            else target.read_text(errors="replace")
            if exists
            else None
        )
        body = _ended(block.body)
        if old is not None and body == old:
            return None, f"the reply shows {path} as it already is"
        if path.endswith(".py"):
            body = self._imports_that_resolve(relative, body, taken)
            return _python_content(path, body, old, self.asked, self.tools)
        if old is not None:
            kept = set(body.splitlines())
            lost = [line for line in old.splitlines() if line.strip() and line not in kept]
            if lost and not _whole(old, body):
                return None, (
                    f"the reply shows {path} without {len(lost)} of its lines "
                    f"(first: {lost[0].strip()[:60]!r}); show the whole file, or change a part "
                    "of it with edit_file"
                )
        return body, ""

    def _imports_that_resolve(self, path: str, body: str, taken: Mapping[str, str]) -> str:
        """`body` without the names its top-level `from M import ...` take from a module of
        the workspace that does not have them, or from `path`'s own module: a small
        model's test file took `test_add` from `mathutil`, which fails every test of the
        file at import."""
        try:
            tree = parse_python(body)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return body  # refused later, saying why
        lines = body.splitlines(keepends=True)
        for node in reversed(tree.body):  # from the end: the line numbers above stay true
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            itself = imports_itself(path, node)
            has = set[str]() if itself else self._names_of(node.module, taken)
            if has is None:
                continue  # not the workspace's, or what it has cannot be told
            kept = [alias for alias in node.names if alias.name in has]
            if len(kept) == len(node.names):
                continue
            names = ", ".join(
                alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
                for alias in kept
            )
            end = node.end_lineno or node.lineno
            lines[node.lineno - 1 : end] = [f"from {node.module} import {names}\n"] if kept else []
        return "".join(lines)

    def _names_of(self, module: str, taken: Mapping[str, str]) -> set[str] | None:
        """What `from module import name` can take from the workspace's `module` (as the
        reply's earlier blocks, `taken`, leave it): its top-level names and its package's
        modules (None: not a module of the workspace, or one that takes `*` from another)."""
        relative = module.replace(".", "/")
        base = self.root / relative
        file = f"{relative}/__init__.py" if base.is_dir() else f"{relative}.py"
        try:
            text = taken.get(file)
            if text is None:
                text = (self.root / file).read_text(errors="replace")
            tree = parse_python(text)
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        names = {n for n in _defined(tree) if "." not in n}
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                if any(alias.name == "*" for alias in node.names):
                    return None
                names.update((a.asname or a.name).partition(".")[0] for a in node.names)
        if base.is_dir():
            names.update(p.stem for p in base.glob("*.py"))
            names.update(p.name for p in base.iterdir() if (p / "__init__.py").is_file())
        return names

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


def _whole(old: str, body: str) -> bool:
    """Does `body`, which drops lines of a file that is not Python, show the file whole
    (from its first line to its last, nothing elided), changed, rather than a part of it?"""
    first_last = [line.strip() for line in old.splitlines() if line.strip()]
    shown = [line.strip() for line in body.splitlines() if line.strip()]
    if len(first_last) < 3 or not shown or _ELIDED.search(body):
        return False
    return (shown[0], shown[-1]) == (first_last[0], first_last[-1])


def _closing(lines: Sequence[str], start: int, fence: str, nests: bool) -> int | None:
    """The line that closes the block opened before `start` with `fence`. In a Markdown
    block (`nests`), a fence with an info string opens a block inside it (a README's
    ```` ```python ```` example), which the next bare fence closes; elsewhere any fence
    closes it (a model that forgot to close one block opens the next)."""
    depth = 0
    for j in range(start, len(lines)):
        if not lines[j].strip().startswith(fence):
            continue
        opened = _OPEN.match(lines[j])
        if nests and opened is not None and opened.group(2):
            depth += 1
        elif depth:
            depth -= 1
        else:
            return j
    return None


_CODE_KEYS = ("content", "code", "source")
_PATH_KEYS = ("path", "file", "file_path", "filename")


def _code(call: ToolCall) -> str | None:
    """`call`'s code as a fenced block under its path (none when it gives none), when it
    carries code (`content`, `code`, `source`) and is not a write's `path` and
    `content`, which a tool takes as they are."""
    arguments = call_arguments(call)
    code = next((v for k in _CODE_KEYS if isinstance(v := arguments.get(k), str)), None)
    path = next((v for k in _PATH_KEYS if isinstance(v := arguments.get(k), str)), None)
    if code is None or (path is not None and "content" in arguments):
        return None
    language = "python" if path is None or path.endswith(".py") else ""
    fence = "````" if "```" in code else "```"
    return f"{fence}{language} {path or ''}".rstrip() + f"\n{code.strip(chr(10))}\n{fence}"


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
        end = _closing(lines, i + 1, fence, info.strip().lower() in _LANGUAGES[".md"] - {""})
        if end is None:
            return  # an open fence: the rest is its body, cut off
        # a fence indented N spaces (in a list item) takes up to N off each line (CommonMark)
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        body = [_unindented(line, indent) for line in lines[i + 1 : end]]
        words = info.replace(":", " ").replace("=", " ").split()
        language = words[0].lower() if words and "." not in words[0] else ""
        path = _one_path(" ".join(words)) or _label(lines[:i])
        if path is None and body and _comment_path(body[0]) is not None:
            yield from _by_comment_paths(body, language)
        else:
            yield _Block("\n".join(body), language, path)
        i = end + 1


def _by_comment_paths(body: Sequence[str], language: str) -> Iterator[_Block]:
    """A fence whose first line is a comment naming a path (`# mathutil/__init__.py`), cut
    into one block per such comment at the start of a line: a small model showed a
    function and its test in one fence, each under its file's comment. The comments stay
    in the blocks (harmless in the files)."""
    start = 0
    for at in range(1, len(body) + 1):
        if at < len(body) and (body[at][:1].isspace() or _comment_path(body[at]) is None):
            continue
        yield _Block("\n".join(body[start:at]), language, _comment_path(body[start]))
        start = at


def _unindented(line: str, indent: int) -> str:
    """`line` with up to `indent` leading spaces taken off."""
    return line[min(indent, len(line) - len(line.lstrip(" "))) :]


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


def _python_content(
    path: str, body: str, old: str | None, asked: str, tools: frozenset[str]
) -> tuple[str | None, str]:
    """`path`'s new text from a Python block: the block itself when it is the whole file,
    else the file with the block's definitions put in (`merged`); None and why when
    neither is plainly meant."""
    try:
        tree = parse_python(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return None, f"the reply shows {path}, but it is not valid Python ({exc})"
    if elided := _ELIDED.search(body):
        return None, (
            f"the reply shows {path} with a part left out ({elided.group(0).strip()!r}): "
            "show the whole file, or change a part of it with edit_file"
        )
    now = _defined(tree)
    if not now and not (old is not None and _imports_only(tree, path)):
        return None, f"the reply shows {path} as code that defines nothing (a file defines names)"
    if not _tests_file(path) and (tests := sorted(n for n in now if n.startswith("test_"))):
        # the 1.5B model's `test_add` and `test_subtract`, shown under mathutil/__init__.py
        return None, (
            f"the reply's code for {path} defines {', '.join(tests)}: tests go in a test "
            "file (tests/test_*.py), not in the code they test"
        )
    if named := sorted(now & tools):
        return None, (
            f"the reply's code for {path} defines {', '.join(named)}, a tool: call a tool "
            "as the format above says, do not write it"
        )
    if old is None:
        return body, ""
    try:
        before = parse_python(old)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return body, ""  # the file as it is does not parse: any parsing whole is better
    mentioned = set(re.findall(r"\w+", asked))
    lost = _lost(before, tree, mentioned)
    if not lost:
        return body, ""
    if (whole := _merged_keeping(old, before, body, tree, mentioned)) is not None:
        return whole, ""
    shown = ", ".join(lost[:5]) + (" ..." if len(lost) > 5 else "")
    return None, (
        f"the reply shows {path} without {shown}, which the file defines now (writing "
        "it would delete them): show the whole file, or change a part of it with edit_file"
    )


def _merged_keeping(
    old: str, before: ast.Module, body: str, tree: ast.Module, mentioned: set[str]
) -> str | None:
    """`old` with `body`'s definitions put in (`merged`), when that keeps all it defines
    bar `mentioned` names; else None."""
    whole = merged(old, before, body, tree)
    if whole is None or _lost(before, parse_python(whole), mentioned):
        return None
    return whole


def definitions_kept(old: str, body: str, mentioned: set[str]) -> tuple[str, list[str]] | None:
    """For Python `body` written over `old`, dropping what `old` defines bar `mentioned`
    names: `old` with `body`'s imports, functions and classes put in, and what it kept
    (None: nothing dropped, or `body` is not only imports and definitions, or either does
    not parse)."""
    try:
        before, tree = parse_python(old), parse_python(body)
        lost = _lost(before, tree, mentioned)
        whole = _merged_keeping(old, before, body, tree, mentioned) if lost else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return None if whole is None else (whole, lost)


def imports_itself(path: str, node: ast.ImportFrom) -> bool:
    """Whether `node`, a `from M import ...` of the Python file `path`, takes from the
    file's own module (`from mathutil import clamp` in `mathutil/__init__.py`, or
    `from pkg.m import x` in `src/pkg/m.py`)."""
    own = PurePosixPath(path).with_suffix("").as_posix().removesuffix("/__init__")
    own = own.replace("/", ".")
    source = node.module or ""
    return node.level == 0 and bool(source) and (source == own or own.endswith(f".{source}"))


def _tests_file(path: str) -> bool:
    """Whether `path` is where tests live (pytest's `test_*.py`, `*_test.py`, a
    `conftest.py`, or a file under a `tests` or `test` directory)."""
    pure = PurePosixPath(path)
    name = pure.name
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
        or any(part in ("tests", "test") for part in pure.parts[:-1])
    )


def _imports_only(tree: ast.Module, path: str) -> bool:
    """Whether `tree` is imports alone (for a file that exists: they are put into it), none
    of them from `path`'s own module (a small model's `from mathutil import clamp` inside
    `mathutil/__init__.py`)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if imports_itself(path, node):
                return False
        elif not isinstance(node, ast.Import):
            return False
    return bool(tree.body)


def _lost(before: ast.Module, after: ast.Module, mentioned: set[str]) -> list[str]:
    """What `before` defines that `after` does not, bar names the task mentions."""
    gone = _defined(before) - _defined(after)
    return sorted(n for n in gone if n.rpartition(".")[2] not in mentioned)


_MERGEABLE = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def merged(old: str, before: ast.Module, body: str, snippet: ast.Module) -> str | None:
    """`old` with `snippet`'s definitions put in: each function or class replaces the one
    of its name, or is added at the end; each import not already there goes after the
    file's imports. None when the snippet holds anything else (a script, example calls):
    then it is not code for the file."""
    if not all(isinstance(node, _MERGEABLE) for node in snippet.body):
        return None
    lines = old.splitlines(keepends=True)
    spans = {
        node.name: (_first_line(node), node.end_lineno or node.lineno)
        for node in before.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    have = {line.strip() for line in lines}
    imports: list[str] = []
    added: list[str] = []
    replaced: dict[int, tuple[int, str]] = {}
    for node in snippet.body:
        source = _source(body, node)
        if isinstance(node, ast.Import | ast.ImportFrom):
            if source.strip() not in have:
                imports.append(source)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return None
        elif node.name in spans:
            first, last = spans[node.name]
            replaced[first] = (last, source)
        else:
            added.append(source)
    out: list[str] = []
    skip_to = 0
    after_imports = _after_imports(before)
    for number, line in enumerate(lines, start=1):
        if number == after_imports and imports:
            out.extend(imports)
        if number <= skip_to:
            continue
        if number in replaced:
            skip_to, source = replaced[number]
            out.append(source)
            continue
        out.append(line)
    if after_imports > len(lines) and imports:
        out.extend(imports)
    text = "".join(out).rstrip("\n") + "\n"
    for source in added:
        text += "\n\n" + source
    return text


def _first_line(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _source(text: str, node: ast.stmt) -> str:
    """`node`'s lines in `text`, decorators included, ending with a newline."""
    lines = text.splitlines(keepends=True)
    chunk = "".join(lines[_first_line(node) - 1 : node.end_lineno or node.lineno])
    return chunk.rstrip("\n") + "\n"


def _after_imports(tree: ast.Module) -> int:
    """The line new imports go before: after the file's last top-level import (or its
    docstring), so they come before the code that uses them."""
    last = 0
    for i, node in enumerate(tree.body):
        docstring = i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if isinstance(node, ast.Import | ast.ImportFrom) or docstring:
            last = node.end_lineno or node.lineno
        elif last or i > 0:
            break
    return last + 1


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
