"""File tools: read_file, list_dir, edit_file, write_file — all confined to the workspace.

Paths are checked (`resolve_path`), then opened one directory at a time without following
symlinks (`read_confined`, `write_confined`): a link swapped in between is refused.

edit_file and write_file note every file they change in `ctx.written`: a workspace's patch
takes the untracked files noted there and leaves out the rest (a check's outputs).

Loaded by `swarm.toolbox.coding_tools()` as `swarm._builtin_tools.files`.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import textwrap
from collections import Counter
from pathlib import Path

from swarm._pyast import parse as parse_python
from swarm.agent._confined import list_confined, read_confined, write_confined
from swarm.agent._fenced_files import imports_itself, merged
from swarm.agent._tool import ToolContext, tool, truncate
from swarm.agent._toolbox import resolve_path
from swarm.errors import ToolError

MAX_FILE_BYTES = 20_000_000
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BINARY_SNIFF = 8192
_CONTEXT_LINES = 2
"""Lines shown around an edit and around candidate matches."""
_WHOLE_FILE_CHARS = 3000
"""A file this short is shown whole when `old` matches nothing in it (a small model
guesses `old` rather than reading first; this saves it the read)."""


def _rel(ctx: ToolContext, path: Path) -> str:
    return path.relative_to(ctx.root.resolve()).as_posix() or "."


def _read_text(ctx: ToolContext, path: str) -> tuple[Path, str]:
    target, data = read_confined(ctx, path, MAX_FILE_BYTES)
    if b"\0" in data[:_BINARY_SNIFF]:
        raise ToolError(f"{path!r} is a binary file")
    try:
        return target, data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{path!r} is not UTF-8 text") from None


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start=first))


@tool(read_only=True)
def read_file(ctx: ToolContext, path: str, start: int | None = None, end: int | None = None) -> str:
    """Read a text file, with line numbers.

    Args:
        path: File path relative to the workspace root.
        start: First line to show (1-based, inclusive). Default: the first line.
        end: Last line to show (inclusive). Default: the last line.
    """
    try:
        _, text = _read_text(ctx, path)
    except ToolError as exc:
        raise _elsewhere(ctx, path, exc) from None
    lines = text.splitlines()
    first = 1 if start is None else start
    last = len(lines) if end is None else min(end, len(lines))
    if first < 1 or (end is not None and end < first):
        raise ToolError(f"bad range start={start} end={end}: lines are numbered from 1")
    if lines and first > len(lines):
        raise ToolError(f"start={first} is past the end: {path!r} has {len(lines)} lines")
    if not lines:
        return f"({path} is empty)"
    shown = _numbered(lines[first - 1 : last], first)
    if len(shown) > ctx.max_output_chars:
        hint = f"\n({path} has {len(lines)} lines; read a range with start and end)"
        return truncate(shown, ctx.max_output_chars - len(hint)) + hint
    return shown


@tool(read_only=True)
def list_dir(ctx: ToolContext, path: str = ".") -> str:
    """List a directory: one entry per line, directories with a trailing slash.

    Args:
        path: Directory relative to the workspace root.
    """
    target, found = list_confined(ctx, path)
    entries = sorted((f"{name}/" if is_dir else name) for name, is_dir in found if name != ".git")
    return "\n".join(entries) if entries else f"({_rel(ctx, target)} is empty)"


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _lines_of(text: str, old: str) -> str:
    """The lines where `old`'s occurrences (as `str.count` counts them) start: "2, 6"."""
    at, index = [], text.find(old)
    while index != -1:
        at.append(str(_line_of(text, index)))
        index = text.find(old, index + len(old))
    return ", ".join(at)


def _candidates(text: str, old: str) -> str:
    """The places in `text` that look most like `old`, for a failed edit: their lines as
    they are, under a header naming them (numbered lines were copied into the next `old`,
    numbers and all)."""
    lines = text.splitlines()
    wanted = old.strip().splitlines()
    probe = wanted[0].strip() if wanted else ""
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(probe)
    scored: list[tuple[float, int]] = []
    for i, line in enumerate(lines):
        matcher.set_seq1(line.strip())
        if matcher.real_quick_ratio() >= 0.5 and matcher.quick_ratio() >= 0.5:
            ratio = matcher.ratio()
            if ratio >= 0.5:
                scored.append((ratio, i))
    if not scored:
        if len(text) <= _WHOLE_FILE_CHARS:  # a small file: its text, to copy `old` from
            return "no similar lines; the file now reads (copy `old` from it):\n" + text
        return "no similar lines found; read the file to see its current text"
    best = sorted(scored, key=lambda s: (-s[0], s[1]))[:3]
    shown = []
    for _, i in sorted(best, key=lambda s: s[1]):
        stop = min(len(lines), i + max(len(wanted), 1) + _CONTEXT_LINES)
        shown.append(f"lines {i + 1}-{stop}:\n" + "\n".join(lines[i:stop]))
    return "closest candidates (copy `old` from them exactly):\n" + "\n".join(shown)


_NUMBERED = re.compile(r"^ *\d+\t")
"""A line as read_file shows it: its number, a tab, its text."""


def _without_numbers(text: str) -> str | None:
    """`text` with read_file's line numbers taken off the lines that carry one (a model
    copies some lines from read_file's output and types others), or None when none does."""
    lines = text.splitlines(keepends=True)
    if not any(_NUMBERED.match(line) for line in lines):
        return None
    return "".join(_NUMBERED.sub("", line, count=1) for line in lines)


def _locate(text: str, path: str, old: str, new: str) -> tuple[int, int, str, str]:
    """Where `old` is in `text` (start, end), the text to put there, and how it was found.

    An exact, unique match first. A model that copied `old` from read_file's output with
    its line numbers, or got the indentation or the spaces at line ends wrong, still
    names one place: that place is edited, `new` indented as the file is, and the result
    says how it matched."""
    count = text.count(old)
    if count == 1:
        index = text.index(old)
        return index, index + len(old), new, ""
    if count > 1:
        raise ToolError(
            f"old text occurs {count} times in {path!r} (at lines {_lines_of(text, old)}); "
            "include more surrounding lines to make it unique, or pass replace_all=true "
            "to replace every one (a rename)"
        )
    bare = _without_numbers(old)
    if bare is not None:
        old, new = bare, _without_numbers(new) or new
        if text.count(old) == 1:
            index = text.index(old)
            return index, index + len(old), new, " (old matched without its line numbers)"
    found = _loose(text, old, new)
    if found is None:
        if new.strip() and new.strip() != old.strip() and text.count(new.strip()) == 1:
            line = _line_of(text, text.index(new.strip()))
            raise ToolError(  # a model that does not see its edit was made makes it again
                f"old text not found in {path!r}, but `new` is there (line {line}): this "
                "edit is already made"
            )
        raise ToolError(f"old text not found in {path!r}. {_candidates(text, old)}")
    return (*found, " (old matched ignoring indentation and spaces at line ends)")


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _loose(text: str, old: str, new: str) -> tuple[int, int, str] | None:
    """The one run of whole lines equal to `old`'s when each line is stripped; the span
    and `new` moved to the file's indentation. None when no run or more than one is."""
    wanted = old.strip("\n").splitlines()
    key = [line.strip() for line in wanted]
    if not any(key):
        return None
    lines = text.splitlines(keepends=True)
    stripped = [line.strip() for line in lines]
    n = len(key)
    hits = [i for i in range(len(lines) - n + 1) if stripped[i : i + n] == key]
    if len(hits) != 1:
        return None
    first = hits[0]
    start = sum(len(line) for line in lines[:first])
    end = start + sum(len(line) for line in lines[first : first + n])
    theirs = _indent(next(line for line in wanted if line.strip()))
    ours = _indent(next(line for line in lines[first : first + n] if line.strip()))
    moved = [
        ours + line[len(theirs) :] if line.strip() and line.startswith(theirs) else line
        for line in new.strip("\n").splitlines(keepends=True)
    ]
    replacement = "".join(moved)
    if lines[first + n - 1].endswith("\n") and not replacement.endswith("\n"):
        replacement += "\n"
    return start, end, replacement


@tool
def edit_file(ctx: ToolContext, path: str, old: str, new: str, replace_all: bool = False) -> str:
    """Replace an exact, unique snippet of a file with new text.

    Args:
        path: File path relative to the workspace root.
        old: The exact text to replace, including indentation; must occur exactly once
            (unless replace_all).
        new: The text to put in its place.
        replace_all: Replace every occurrence of `old` (a rename), not just a unique one.
    """
    if not old:
        raise ToolError("old is empty; to create or overwrite a file use write_file")
    if new == old:  # a small model "added" a test three times so, and said it was done
        raise ToolError(
            "`new` is the same as `old`: nothing would change. To add code after `old`, "
            "make `new` the text of `old` followed by your new lines"
        )
    resolve_path(ctx, path, writing=True)
    try:
        target, text = _read_text(ctx, path)
    except ToolError as exc:
        if str(exc).startswith("no such file") and not _same_name(ctx, path):
            raise ToolError(f"{exc}; to create it, call write_file(path, content)") from None
        raise _elsewhere(ctx, path, exc) from None
    if old not in text and "\r\n" in text:  # the model writes \n; the file uses \r\n
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
    if replace_all and text.count(old) > 1:
        return _replace_every(ctx, path, text, old, new)
    try:
        index, end, new, how = _locate(text, path, old, new)
    except ToolError:
        added = _new_definition(path, text, old, new)
        if added is None:
            raise
        index, end, new, how = added
    if (over := _over_a_header(path, text, index, end, new)) is not None:
        new, how = _beside(text, index, end, new, over)
    new, itself = _without_own_imports(path, text, new, text[:index] + new + text[end:])
    how += itself
    updated = text[:index] + new + text[end:]
    _refuse_broken_python(path, text, updated)
    _refuse_defined_again(path, text, updated)
    target = write_confined(ctx, path, updated.encode("utf-8"))
    ctx.written.note(_rel(ctx, target))
    first = _line_of(updated, index + len(new) - len(new.lstrip("\n")))
    lines = updated.splitlines()
    shown_from = max(1, first - _CONTEXT_LINES)
    shown_to = min(len(lines), first + new.count("\n") + _CONTEXT_LINES)
    excerpt = _numbered(lines[shown_from - 1 : shown_to], shown_from)
    done = f"edited {_rel(ctx, target)} at line {first}{how}:\n{excerpt}"
    return done + _lost_note(path, text, updated)


def _new_definition(path: str, text: str, old: str, new: str) -> tuple[int, int, str, str] | None:
    """An edit whose `old` is the first line of a definition the file does not have, and
    whose `new` is that definition whole (a model "edits" a function into being): the
    definition, put at the file's end (None: not such an edit)."""
    header = old.strip()
    if not path.endswith(".py") or "\n" in header or not new.strip().startswith(header):
        return None
    if old.lstrip("\n")[:1].isspace():
        return None  # a method's, maybe: which class it is meant for is not said
    body = textwrap.dedent(new).strip() + "\n"
    try:
        # the first line as a model copies it, its colon sometimes left off
        colon = "" if header.endswith(":") else ":"
        stub = parse_python(f"{header}{colon}\n    pass\n").body
        module, added = parse_python(text), parse_python(body)
    except (SyntaxError, ValueError):
        return None
    if len(stub) != 1 or not isinstance(stub[0], _DEFINITIONS):
        return None
    name = stub[0].name
    if any(isinstance(n, _DEFINITIONS) and n.name == name for n in module.body):
        return None
    if not any(isinstance(n, _DEFINITIONS) and n.name == name for n in added.body):
        return None
    kept = len(text.rstrip())  # what is there, then two blank lines (PEP 8), then it
    note = (
        f" (`old`, the first line of {name}, is not in the file: {name} is new, so it went "
        "at the end)"
    )
    return kept, len(text), ("\n\n\n" if kept else "") + body, note


def _replace_every(ctx: ToolContext, path: str, text: str, old: str, new: str) -> str:
    """`edit_file` with `replace_all`: every occurrence of `old`, the lines they were on."""
    updated = text.replace(old, new)
    _refuse_broken_python(path, text, updated)
    _refuse_defined_again(path, text, updated)
    target = write_confined(ctx, path, updated.encode("utf-8"))
    ctx.written.note(_rel(ctx, target))
    count, lines = text.count(old), _lines_of(text, old)
    return f"replaced {count} occurrences in {_rel(ctx, target)} (lines {lines})"


def _refuse_clobbering(
    ctx: ToolContext, path: str, before: str, after: str, lost: list[str]
) -> None:
    """Refuse, once, a write_file that deletes more than half of a Python file's top-level
    functions and classes: a small model asked to add what is missing to a file wrote it
    anew as a class of its own, and every function of the file was gone. The same write
    asked for again is done (a rewrite can be meant)."""
    if not lost:
        return
    had = len(_definitions(before))
    if 2 * len(lost) <= had or ctx.written.asked_again(path, after):
        return
    shown = ", ".join(lost[:8]) + (" ..." if len(lost) > 8 else "")
    raise ToolError(
        f"not written: this would replace the whole of {path} and delete {shown} "
        f"({len(lost)} of its {had} functions and classes). To change "
        "a part, use edit_file; to add to it, write it whole with what it has kept. To "
        "replace it anyway, call write_file again with the same content."
    )


def _definitions(text: str) -> list[str]:
    try:
        module = parse_python(text)
    except (SyntaxError, ValueError):
        return []
    return [n.name for n in module.body if isinstance(n, _DEFINITIONS)]


def _without_own_imports(path: str, before: str, new: str, after: str) -> tuple[str, str]:
    """`new` (the text written into `path`, which then reads `after`) without the one-line
    top-level imports from `path`'s own module that `before` did not have, and what says
    so: a small model put `from mathutil import clamp` into `mathutil/__init__.py`, and
    the package no longer imported."""
    if not path.endswith(".py"):
        return new, ""
    try:
        tree = parse_python(after)
    except (SyntaxError, ValueError):
        return new, ""
    had, lines = {line.strip() for line in before.splitlines()}, after.splitlines()
    found = {
        statement
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and imports_itself(path, node)
        and node.lineno == node.end_lineno
        and (statement := lines[node.lineno - 1].strip()) not in had
    }  # fmt: skip
    if not found:
        return new, ""
    kept = "".join(line for line in new.splitlines(keepends=True) if line.strip() not in found)
    listed = ", ".join(f"`{statement}`" for statement in sorted(found))
    return kept, f" (left out {listed}: {path} is that module, and has its names already)"


def _refuse_broken_python(path: str, before: str, after: str) -> None:
    """Refuse an edit that would make a Python file that parses one that does not (a
    small model drops a bracket or an indent, and a failing run of the tests later says
    less about why): the error, and the lines around it as they would read."""
    if not path.endswith(".py"):
        return
    try:
        parse_python(after)
        return
    except (SyntaxError, ValueError) as exc:
        problem = exc
    try:
        parse_python(before)
    except (SyntaxError, ValueError):
        return  # it was broken already: an edit may be a step toward mending it
    line = problem.lineno if isinstance(problem, SyntaxError) else None
    shown = ""
    if line:
        lines = after.splitlines()
        first = max(1, line - _CONTEXT_LINES - 1)
        last = min(len(lines), line + _CONTEXT_LINES + 1)
        shown = f" The edited lines would read:\n{_numbered(lines[first - 1 : last], first)}\n"
    raise ToolError(
        f"refused: the edit would make {path} invalid Python ({_why_not(problem)}), so the "
        f"file is unchanged.{shown}Correct `new` and call edit_file again."
    )


def _refuse_defined_again(path: str, before: str, after: str) -> None:
    """Refuse a change that defines a top-level function or class of a Python file once
    more than the file did (a model that does not see its edit was made makes it again:
    three passing copies of one `clamp` were merged), saying where the one there is.
    Decorated definitions (`@overload`) may repeat."""
    if not path.endswith(".py"):
        return
    try:
        old, new = parse_python(before).body if before else [], parse_python(after)
    except (SyntaxError, ValueError):
        return  # _refuse_broken_python's to say
    had = Counter(n.name for n in old if isinstance(n, _DEFINITIONS))
    at: dict[str, list[int]] = {}
    for n in new.body:
        if isinstance(n, _DEFINITIONS) and not n.decorator_list:
            at.setdefault(n.name, []).append(n.lineno)
    again = [name for name, lines in at.items() if len(lines) > max(1, had[name])]
    if not again:
        return
    where = ", ".join(f"{name} at lines {', '.join(map(str, at[name]))}" for name in again)
    raise ToolError(
        f"refused: {path} would define {', '.join(again)} more than once ({where}), so "
        "the file is unchanged. If the definition there is what you meant, that change is "
        "already made (read_file shows the file); to change it, edit the one that is there."
    )


def _lost_note(path: str, before: str, after: str) -> str:
    lost = _lost_definitions(path, before, after)
    if not lost:
        return ""
    return (
        f"\nNote: {', '.join(lost)} {'is' if len(lost) == 1 else 'are'} no longer defined "
        "in it. To add code beside a definition, keep the definition's lines in `new`."
    )


@tool
def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Create or overwrite a file with the given content (parent directories are created).

    Args:
        path: File path relative to the workspace root.
        content: The whole new content of the file.
    """
    try:
        before: str | None = _read_text(ctx, path)[1]
    except ToolError:
        before = None
    if before and _PLACEHOLDER.fullmatch(content):
        raise ToolError(
            f"the content is a placeholder ({content.strip()[:40]!r}), not the file's text: "
            "nothing was written. Give the whole new text, or change a part with edit_file"
        )
    content, echo = _echo_undone(path, content)
    content, note = _python_checked(path, content, before)
    content, itself = _without_own_imports(path, before or "", content, content)
    note = echo + note + itself
    data = content.encode("utf-8")
    if before == content:  # a model that does not see its work is done writes it again
        return (
            f"{_rel(ctx, resolve_path(ctx, path, writing=True))} already holds exactly this "
            f"content ({len(data)} bytes): nothing changed"
        )
    _refuse_defined_again(path, before or "", content)
    lost = _lost_definitions(path, before, content) if before is not None else []
    _refuse_clobbering(ctx, path, before or "", content, lost)
    target = write_confined(ctx, path, data)
    ctx.written.note(_rel(ctx, target))
    done = f"wrote {len(data)} bytes to {_rel(ctx, target)}{note}"
    if before is None:
        others = _same_name(ctx, path)
        if others:
            done += f" (a new file; {', '.join(others)} exists: did you mean that?)"
        return done
    if lost:
        done += (
            f". It replaced the whole file: {', '.join(lost)} "
            f"{'is' if len(lost) == 1 else 'are'} no longer in it. If that was not meant, "
            "put back what is missing (edit_file changes part of a file)"
        )
    return done


_PLACEHOLDER = re.compile(r"\s*(?:(?:#\s*)?(?:\.\.\.|…)\s*)*")
"""Text made only of elisions (`...`, `# ...`): a fixer of the 1.5B model wrote
`...\n...` over `pricing.py`, as Python it parses (an `Ellipsis`), three times."""
_SEARCH_HIT = re.compile(r"^[^\s:]+:\d+:")
"""A line as search shows it: the file's path, the line's number, then its text."""


def _echo_undone(path: str, content: str) -> tuple[str, str]:
    """`content` with read_file's line numbers taken off when every line carries one (a
    small model writes back what read_file showed it), and a note saying so; refused when
    every line is a search hit (`README.md:7:from inventory import ...`: a model wrote
    search's output over the README)."""
    lines = [line for line in content.splitlines() if line.strip()]
    if not lines:
        return content, ""
    if all(_SEARCH_HIT.match(line) for line in lines):
        raise ToolError(
            f"content for {path} is search output (`path:line:text` on every line), not the "
            "file's text: nothing was written. Give the whole new text of the file, or "
            "change a part with edit_file"
        )
    if all(_NUMBERED.match(line) for line in lines):
        bare = _without_numbers(content) or content
        return bare, " (read_file's line numbers taken off)"
    return content, ""


def _python_checked(path: str, content: str, before: str | None) -> tuple[str, str]:
    """`content` for a Python file, unindented when every line of it was indented (as a
    small model writes code inside a JSON string) and only so it parses, and a note for
    the tool's result: that, or where it does not parse (refused over a file that parses,
    as `edit_file` refuses to break one). Indented so, it is a part of a
    file: written over the file `before` it would delete the definitions it leaves out,
    so its definitions are put into the file instead (`_put_in`)."""
    if not path.endswith(".py"):
        return content, ""
    try:
        parse_python(content)
        return content, ""
    except (SyntaxError, ValueError) as exc:
        problem = exc
    unindented = textwrap.dedent(content).strip("\n").rstrip() + "\n"
    if unindented.strip() and unindented != content.strip("\n").rstrip() + "\n":
        try:
            part = parse_python(unindented)
        except (SyntaxError, ValueError):
            pass
        else:
            if before is not None and (put := _put_in(path, before, unindented, part)):
                return put
            return unindented, " (every line was indented: written without that indent)"
    if before is not None and _parses(before):
        # a small model wrote `test_clamp() -> None:` (no `def`) over a test file, and its
        # fixers then had a broken file to mend, not a test to write
        raise ToolError(
            f"refused: the content is not valid Python ({_why_not(problem)}), and {path} "
            "is, so the file is unchanged. Correct `content` and call write_file again"
        )
    return content, f". It is not valid Python ({_why_not(problem)}): fix it before running tests"


def _parses(text: str) -> bool:
    try:
        parse_python(text)
    except (SyntaxError, ValueError):
        return False
    return True


def _put_in(path: str, before: str, part: str, tree: ast.Module) -> tuple[str, str] | None:
    """`before` with the definitions of `part` put in (each in place of the one of its
    name, or at the end), when writing `part` whole would lose definitions the file has
    and putting it in loses none; else None."""
    try:
        now = parse_python(before)
    except (SyntaxError, ValueError):
        return None
    if not _gone(now, tree):
        return None
    text = merged(before, now, part, tree)
    if text is None or _lost_definitions(path, before, text):
        return None
    names = [n.name for n in tree.body if isinstance(n, _DEFINITIONS)]
    return text, (
        f" (every line was indented, as a part of a file is: {', '.join(names) or 'its imports'}"
        " put into the file, each in place of the definition of its name or at the end; the "
        "rest of the file is as it was)"
    )


def _why_not(problem: SyntaxError | ValueError) -> str:
    """Where and why Python does not parse: `line 6: closing parenthesis ...`."""
    if isinstance(problem, SyntaxError):
        return f"line {problem.lineno}: {problem.msg}" if problem.lineno else problem.msg
    return str(problem)


_SCAN_LIMIT = 5000
"""Directory entries looked at for a file of the same name elsewhere."""


def _same_name(ctx: ToolContext, path: str) -> list[str]:
    """Files elsewhere in the workspace named as `path` is (at most 3), for a model that
    left out or invented a directory (`pricing.py` for `inventory/pricing.py`)."""
    name = Path(path).name
    root = ctx.real_root
    found: list[str] = []
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in (".git", ".venv", "node_modules"))
        seen += len(dirs) + len(files)
        if name in files:
            found.append((Path(folder) / name).relative_to(root).as_posix())
        if len(found) > 3 or seen > _SCAN_LIMIT:
            return []
    return [f for f in found if f != path]


def _elsewhere(ctx: ToolContext, path: str, exc: ToolError) -> ToolError:
    """`exc`, naming the file the model likely meant when `path` is not there."""
    if not str(exc).startswith("no such file"):
        return exc
    others = _same_name(ctx, path)
    return ToolError(f"{exc}; did you mean {' or '.join(map(repr, others))}?") if others else exc


def _over_a_header(
    path: str, text: str, start: int, end: int, new: str
) -> tuple[str, int, bool] | None:
    """The definition (`def add`) whose first line, and not its body, an edit replaces with
    whole definitions of other names: what a small model does to add a function "at" one.
    Done as written, the old body would stay behind under the new code and its name be
    gone; the edit puts the new code before it instead (`_beside`). Also: its column, and
    whether `old` starts at or before its decorators (else new code would take them)."""
    if not path.endswith(".py"):
        return None
    try:
        before, added = parse_python(text), parse_python(textwrap.dedent(new))
    except (SyntaxError, ValueError):
        return None
    made = {n.name for n in ast.walk(added) if isinstance(n, _DEFINITIONS)}
    if not made:
        return None
    starts = _line_starts(text)
    for node in ast.walk(before):
        if not isinstance(node, _DEFINITIONS) or node.name in made:
            continue
        header, body = starts[node.lineno - 1], starts[node.body[0].lineno - 1]
        if start <= header < end <= body:
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            top = min([d.lineno for d in node.decorator_list] + [node.lineno])
            return f"{kind} {node.name}", node.col_offset, start <= starts[top - 1]
    return None


def _beside(
    text: str, start: int, end: int, new: str, over: tuple[str, int, bool]
) -> tuple[str, str]:
    """`new` put before the definition `over` whose first line `old` held (`start:end`),
    that definition kept whole: the text to put at `start:end`, and what the result says.
    Raises the refusal it replaces when that would not parse, or would put the new code
    under the definition's decorators."""
    what, column, whole = over
    gap = "\n\n" if column else "\n\n\n"  # PEP 8: two blank lines between top-level ones
    replacement = new.rstrip("\n") + gap + text[start:end]
    name = what.split()[1]
    fits = whole  # else the new code would go between a decorator and its definition
    if fits:
        try:
            parse_python(text[:start] + replacement + text[end:])
        except (SyntaxError, ValueError):
            fits = False
    if not fits:
        raise ToolError(
            f"refused: `old` holds the first line of `{what}` but not its body, and `new` "
            f"defines other names: the body of {name} would be left under your code, and "
            f"{name} gone. To add code beside it, make `new` your code followed by `old` "
            f"unchanged; to replace {name}, put all of it in `old`"
        )
    note = (
        f" (`old` held only the first line of `{what}`: your code went before it and "
        f"{name} was kept whole; to replace {name}, put all of it in `old`)"
    )
    return replacement, note


def _line_starts(text: str) -> list[int]:
    """The offset where each line of `text` starts."""
    starts, at = [], 0
    for line in text.splitlines(keepends=True):
        starts.append(at)
        at += len(line)
    return [*starts, at]


def _lost_definitions(path: str, before: str, after: str) -> list[str]:
    """Top-level functions and classes of a Python file that its new text no longer has."""
    if not path.endswith(".py"):
        return []
    try:
        old, new = parse_python(before), parse_python(after)
    except (SyntaxError, ValueError):
        return []
    return _gone(old, new)


def _gone(old: ast.Module, new: ast.Module) -> list[str]:
    """Top-level functions and classes `old` defines and `new` does not."""
    kept = {n.name for n in new.body if isinstance(n, _DEFINITIONS)}
    return [n.name for n in old.body if isinstance(n, _DEFINITIONS) and n.name not in kept]
