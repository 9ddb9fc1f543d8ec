"""The rename tool: one Python name renamed in every Python file of the workspace at once.

A rename made by hand is an edit in each file that uses the name, and a model that makes
them one by one forgets some: a small model rewrote the module that imports the new name
and never renamed the definition, and the check then failed on an import. `rename` changes
every use in one call, token by token (`tokenize`), so only the name as a whole identifier
changes, never part of a longer one (`calc_total_v2`, `recalc_total`): definitions, calls,
imports, attributes (`pricing.calc_total`) and keyword arguments. In strings and comments
(docstrings, `__all__`, `mock.patch("pkg.calc_total")`) the name is changed where it
stands as a whole word, only when it cannot be a plain word of prose (it has an
underscore, a digit or a capital past its first letter: `calc_total`, `orderTotal`, not
`total`). Each file it changes must still parse. It takes no path: a call under another
name with `path`, `old` and `new` is an `edit_file`'s (`swarm.agent._steps`), one with
`old` and `new` alone this one's. Other files that still show the name
(documentation, configuration) are listed, for the model to change as it sees fit.

Loaded by `swarm.toolbox.coding_tools()` as `swarm._builtin_tools.rename`.
"""

from __future__ import annotations

import io
import keyword
import re
import tokenize
from pathlib import Path

from swarm._pyast import parse as parse_python
from swarm.agent._confined import read_confined, read_regular, write_confined
from swarm.agent._tool import ToolContext, tool
from swarm.agent._toolbox import workspace_files
from swarm.errors import ToolError

MAX_FILE_BYTES = 5_000_000
"""A larger Python file is left alone (generated code)."""
_LISTED_ELSEWHERE = 10
"""How many lines of other files that still show the name are listed."""
_TEXT_TOKENS = frozenset(
    {tokenize.STRING, tokenize.COMMENT}
    | ({tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set())
)


@tool
def rename(ctx: ToolContext, old: str, new: str) -> str:
    """Rename a Python name (function, class, variable) in every Python file at once.

    Its definition and every use, import, attribute and keyword argument change together.

    Args:
        old: The name as it is now, e.g. `calc_total`.
        new: The name it is to have, e.g. `order_total`.
    """
    for role, name in (("old", old), ("new", new)):
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ToolError(f"{role} must be a Python name (a-z, 0-9, _), not {name!r}")
    if old == new:
        raise ToolError(f"old and new are the same name ({old!r}): nothing to rename")
    root = ctx.root.resolve()
    in_text = _looks_like_code(old)
    changed: list[str] = []
    skipped: list[str] = []
    others: list[Path] = []
    has_new: list[str] = []
    for file in workspace_files(root):
        rel = file.relative_to(root).as_posix()
        if file.suffix != ".py":
            others.append(file)
            continue
        try:
            _, data = read_confined(ctx, rel, MAX_FILE_BYTES)
            before = data.decode("utf-8")
        except (ToolError, UnicodeDecodeError):
            continue
        if new in before and _whole_word(new).search(before):
            has_new.append(rel)  # told if nothing is renamed: done already?
        if old not in before:
            continue
        try:
            after, count = renamed(before, old, new, in_text=in_text)
        except (tokenize.TokenError, SyntaxError):
            skipped.append(rel)  # it does not parse now: not ours to touch
            continue
        if count:
            write_confined(ctx, rel, after.encode("utf-8"))
            ctx.written.note(rel)
            changed.append(f"{rel} ({count})")
    if not changed:
        why = f" ({', '.join(skipped)} does not parse)" if skipped else ""
        if has_new and not skipped:  # a small model asked for it again and again
            why = (
                f"; {new!r} is in {_listed(has_new)}: the rename looks made already. If it "
                "is, your change is done: call finish"
            )
        raise ToolError(f"no Python file uses the name {old!r}{why}")
    done = f"renamed {old} to {new} in {len(changed)} file(s): {', '.join(changed)}"
    if skipped:
        done += f". Not changed, as they do not parse: {', '.join(skipped)}"
    if shown := _still_shown(root, others, old):
        done += f". Other files still show {old!r} (change them if they mean the name):\n"
        done += "\n".join(shown)
    return done


def renamed(source: str, old: str, new: str, *, in_text: bool) -> tuple[str, int]:
    """`source` with the identifier `old` made `new` (and, with `in_text`, the word `old` in
    its strings and comments), and how many were changed; SyntaxError where the result
    does not parse (or tokenize's own error where the source does not tokenize)."""
    starts = [0]  # where each line begins, as tokenize counts lines (at "\n" alone)
    for line in source.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    word = _whole_word(old)
    spans: list[tuple[int, int]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        offset = starts[tok.start[0] - 1] + tok.start[1]
        if tok.type == tokenize.NAME and tok.string == old:
            spans.append((offset, offset + len(old)))
        elif in_text and tok.type in _TEXT_TOKENS:
            spans += [(offset + m.start(), offset + m.end()) for m in word.finditer(tok.string)]
        elif tok.type == tokenize.STRING:  # 3.11 keeps an f-string's code in its token
            for begin, end in _fstring_code(tok.string):
                found = word.finditer(tok.string, begin, end)
                spans += [(offset + m.start(), offset + m.end()) for m in found]
    # a token's text may differ from the source's (3.12's f-string parts unescape `{{`)
    spans = [(b, e) for b, e in spans if source[b:e] == old]
    if not spans:
        return source, 0
    out = source
    for begin, end in sorted(spans, reverse=True):
        out = out[:begin] + new + out[end:]
    parse_python(out)
    return out, len(spans)


def _fstring_code(literal: str) -> list[tuple[int, int]]:
    """Where the replacement fields' code is in an f-string literal (`{...}`, not `{{`)."""
    quote = min((i for i in (literal.find("'"), literal.find('"')) if i >= 0), default=0)
    if "f" not in literal[:quote].lower():
        return []
    regions: list[tuple[int, int]] = []
    depth, start, i = 0, 0, quote
    while i < len(literal):
        c = literal[i]
        if depth == 0 and c in "{}" and literal[i : i + 2] in ("{{", "}}"):
            i += 2
            continue
        if c == "{":
            depth += 1
            if depth == 1:
                start = i + 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                regions.append((start, i))
        i += 1
    return regions


def _listed(paths: list[str], most: int = 5) -> str:
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


def _whole_word(name: str) -> re.Pattern[str]:
    """`name` where it stands as a whole word (not inside `recalc_total`)."""
    return re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")


def _looks_like_code(name: str) -> bool:
    """Whether `name` cannot be a plain word of prose (see the module's docstring)."""
    return "_" in name.strip("_") or any(c.isdigit() for c in name) or name[1:] != name[1:].lower()


def _still_shown(root: Path, files: list[Path], old: str) -> list[str]:
    """`path:line:text` of the other files' lines that show `old` as a whole word."""
    word = _whole_word(old)
    found: list[str] = []
    for file in files:
        data = read_regular(file)
        if data is None or b"\0" in data[:8192] or old.encode() not in data:
            continue
        rel = file.relative_to(root).as_posix()
        for number, line in enumerate(data.decode(errors="replace").splitlines(), start=1):
            if word.search(line):
                found.append(f"{rel}:{number}:{line.strip()[:200]}")
                if len(found) == _LISTED_ELSEWHERE:
                    return [*found, "..."]
    return found
