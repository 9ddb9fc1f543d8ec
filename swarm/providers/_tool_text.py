"""Tool calls written as text: reading them from a reply, and asking for them in a prompt.

Open-weight models behind a server whose tool parser missed them (or that has none) write
their calls into the reply's text. `calls_from_text` recognises the shapes they use:

- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
- a fenced (```json) or bare JSON object `{"name": ..., "arguments": {...}}`, or a list
  of them (`parameters`, `args` and `input` are taken for `arguments`, and OpenAI's
  `{"function": {...}}` wrapper is unwrapped);
- Llama 3: `<|python_tag|>{"name": ..., "parameters": {...}}` (several joined by `;`);
- Mistral: `[TOOL_CALLS][{...}, ...]` and the newer `[TOOL_CALLS]name[ARGS]{...}`;
- `<function=name>{...}</function>`, and its XML form with `<parameter=key>value</parameter>`;
  `<function name="name"><arguments><key>value</key></arguments></function>` too;
- pythonic, as Llama 3.2 and 4 write them and vLLM's `pythonic` parser reads them:
  `write_file("a.py", "x = 1")` (a triple-quoted string too) or `[read_file(path="a.py")]`,
  in a fence or not;
  positional arguments take the tool's parameters in order (`tool_names` as a mapping
  from each name to its parameter names), and every argument must be a literal.

Arguments a JSON parser refuses are repaired where the intent is plain (raw newlines in
strings, a Python dict, trailing commas, arguments sent as a JSON string) and counted, so
a trace shows how often a model needed it. Text that clearly starts a call but cannot be
read (cut short, unbalanced) is reported as a `problem` for the model to be told.

`text_request` goes the other way for a server with no tool support at all
(`tool_calls = "text"`): the tools are described in the system prompt with the Hermes
format to answer in, earlier calls are written back as text and tool results become user
turns.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import itertools
import json
import re
import textwrap
import tokenize
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from swarm._pyast import parse as parse_python
from swarm._pyast import parse_expression
from swarm.messages import ChatRequest, ChatResult, Message, ToolCall

__all__ = [
    "TextCalls",
    "call_format_hint",
    "calls_from_text",
    "cut_file_call",
    "cut_finish",
    "read_calls",
    "text_request",
]

FORMATS = ("hermes", "function", "mistral", "llama3", "json", "pythonic")
"""The text formats recognised, in the order they are tried."""

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([\w.\-]+)>(.*?)(?:</function>|$)", re.DOTALL)
_FUNCTION_NAMED = re.compile(r'<function\s+name="([\w.\-]+)"\s*>(.*?)(?:</function>|$)', re.DOTALL)
_ARGUMENTS = re.compile(r"<arguments>(.*?)(?:</arguments>|$)", re.DOTALL)
_ELEMENT = re.compile(r"<([\w.\-]+)>\n?(.*?)\n?</\1>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([\w.\-]+)>\n?(.*?)\n?</parameter>", re.DOTALL)
_FENCE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
_MISTRAL_NAMED = re.compile(r"\[TOOL_CALLS\]\s*([\w.\-]+)\s*\[ARGS\]\s*", re.DOTALL)
_ARG_KEYS = ("arguments", "parameters", "args", "input")
_LOOKS_LIKE_CALL = re.compile(
    r"<tool_call>|<function[= ]|\[TOOL_CALLS\]|<\|python_tag\|>|[\"']name[\"']\s*:"
)


_ECHOED_TOOLS = re.compile(r"<tools>.*?</tools>", re.DOTALL)
"""The tool list (Qwen's chat template puts it in the system prompt so) written back in a
reply, as the 1.5B model did in each of one coder's 9 replies in a bench's add task."""
_INVENTED_RESULT = re.compile(r"<tool_response>.*?(?:</tool_response>|$)", re.DOTALL)
INVENTED_RESULT_PROBLEM = (
    "you wrote a tool's result yourself (<tool_response>); only a tool writes its result, "
    "in the next message, after you call it"
)


@dataclass(slots=True)
class TextCalls:
    """What a reply's text held: the calls found in it, and the text around them."""

    calls: list[ToolCall] = field(default_factory=list)
    text: str = ""
    """The reply's text with the calls taken out (stripped)."""
    format: str = ""
    """Which format the calls were written in (one of `FORMATS`), "" when none."""
    repaired: int = 0
    """Calls whose arguments needed a repair to parse."""
    problem: str = ""
    """Why text that starts a tool call could not be read ("" when nothing was amiss)."""


def calls_from_text(text: str, tool_names: Collection[str] = ()) -> TextCalls:
    """The tool calls written in `text`, however the model wrote them.

    `tool_names` (the tools offered) lets a bare JSON object count as a call only when it
    names one of them or has an arguments key, so a JSON answer (a plan) is not a call.
    """
    if not text or not (_LOOKS_LIKE_CALL.search(text) or _names_a_call(text, tool_names)):
        return TextCalls(text=text.strip() if text else "")
    for fmt, reader in _READERS:
        found = reader(text, tool_names)
        if found is not None and (found.calls or found.problem):
            found.format = fmt if found.calls else ""
            return found
    return TextCalls(text=text.strip())


def read_calls(result: ChatResult, request: ChatRequest, *, from_text: bool = True) -> None:
    """Mark how `result`'s calls came; with `from_text`, also read calls from its text.

    A reply with native calls may hold more in its text (the server's parser took one
    call and missed another written beside it): those, naming an offered tool and not
    already among the native ones, run first, as they came first in the reply."""
    native = result.message.tool_calls
    if native:
        result.tool_call_format = "native"
    text = result.message.content
    if not from_text or not request.tools or not text:
        return
    if "<tools>" in text:  # the prompt's tool list copied back: kept, it is copied again
        text = _ECHOED_TOOLS.sub("", text).strip()
        result.message = Message.assistant(text or None, native)
        if not text:
            return
    if "<tool_response>" in text:  # kept in the history, it teaches the model to go on
        text = _INVENTED_RESULT.sub("", text).strip()
        result.message = Message.assistant(text or None, native)
        result.tool_call_problem = INVENTED_RESULT_PROBLEM
    names = {t.name: tuple(t.parameters.get("properties", {})) for t in request.tools}
    found = calls_from_text(text, names)
    if native:
        seen = {(c.name, _canonical(c.arguments)) for c in native}
        extra = [
            c
            for c in found.calls
            if c.name in names and (c.name, _canonical(c.arguments)) not in seen
        ]
        if not extra:
            return
        calls, label = [*extra, *native], f"native+{found.format}"
    else:
        result.tool_call_problem = found.problem or result.tool_call_problem
        if not found.calls:
            return
        extra, calls, label = found.calls, found.calls, found.format
    written = None if native else text  # sent back as written (`Message.written`)
    result.message = Message.assistant(found.text or None, calls, written)
    result.tool_call_format = label
    result.text_tool_calls = len(extra)
    result.repaired_tool_calls = found.repaired
    if result.finish_reason == "stop":
        result.finish_reason = "tool_calls"


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


# -- the readers, one per format -----------------------------------------------------------


class _Builder:
    """Collects calls of one reply, numbering their ids and counting repairs."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.repaired = 0
        self.problem = ""

    def add(self, name: str, arguments: Any, repaired: bool) -> None:
        if isinstance(arguments, str):  # arguments sent as a JSON string
            value, fixed = _loads(arguments)
            if isinstance(value, dict):
                arguments, repaired = value, True
            elif fixed is None:
                arguments = {}
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            self.problem = f"the arguments of {name!r} are not a JSON object"
            return
        self.repaired += repaired
        call_id = f"call_text_{len(self.calls)}"
        self.calls.append(
            ToolCall.model_construct(
                id=call_id, name=name, arguments=json.dumps(arguments, ensure_ascii=False)
            )
        )

    def add_object(self, obj: Any, repaired: bool, tool_names: Collection[str]) -> bool:
        """Add `obj` if it is a call (or a list of calls); False when it is not one."""
        if isinstance(obj, list):
            items = [_as_call(o, tool_names) for o in obj]
            if not items or any(i is None for i in items):
                return False
            for item in items:
                assert item is not None
                self.add(item[0], item[1], repaired)
            return True
        found = _as_call(obj, tool_names)
        if found is None:
            return False
        self.add(found[0], found[1], repaired)
        return True

    def result(self, text: str) -> TextCalls:
        # ids from the calls themselves: the same reply gets the same ids (a journal's
        # replay hashes them), different replies different ones
        for i, c in enumerate(self.calls):
            digest = hashlib.sha1(f"{c.name}|{c.arguments}".encode(), usedforsecurity=False)
            self.calls[i] = c.model_copy(update={"id": f"call_{digest.hexdigest()[:10]}_{i}"})
        return TextCalls(self.calls, text.strip(), "", self.repaired, self.problem)


def _as_call(obj: Any, tool_names: Collection[str]) -> tuple[str, Any] | None:
    """(name, arguments) when `obj` is a call object, else None."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]
    name = obj.get("name") or obj.get("tool") or obj.get("tool_name")
    if not isinstance(name, str) or not name:
        return None
    args_key = next((k for k in _ARG_KEYS if k in obj), None)
    if args_key is None and name not in tool_names:
        return None
    extra = set(obj) - {"name", "tool", "tool_name", "type", "id", *_ARG_KEYS}
    if extra and name not in tool_names:
        return None  # a JSON answer that happens to have a "name" field
    return name, obj.get(args_key) if args_key else {}


def _hermes(text: str, tool_names: Collection[str]) -> TextCalls | None:
    if "<tool_call>" not in text:
        return None
    b = _Builder()
    for m in _HERMES.finditer(text):
        body = _unfence(m.group(1))
        value, repaired = _loads(body)
        if repaired is not None and b.add_object(value, repaired, tool_names):
            continue
        written = _pythonic(body, tool_names)  # `<tool_call>edit_file("a.py", ...)</tool_call>`
        if written is None or written.text:
            b.problem = _unreadable("<tool_call>", body)
            return b.result(text)
        for call in written.calls:
            b.add(call.name, json.loads(call.arguments), True)
    return b.result(_HERMES.sub("", text))


def _function(text: str, tool_names: Collection[str]) -> TextCalls | None:
    if "<function=" not in text:
        return _function_named(text) if "<function name=" in text else None
    b = _Builder()
    for m in _FUNCTION.finditer(text):
        name, body = m.group(1), m.group(2).strip()
        params = _PARAMETER.findall(body)
        if params:
            b.add(name, {k: _scalar(v) for k, v in params}, False)
            continue
        value, repaired = _loads(body or "{}")
        if repaired is None or not isinstance(value, dict):
            b.problem = _unreadable(f"<function={name}>", body)
            return b.result(text)
        b.add(name, value, repaired)
    return b.result(_FUNCTION.sub("", text))


def _function_named(text: str) -> TextCalls:
    """`<function name="x"><arguments><key>value</key>...</arguments></function>` (or a
    JSON object inside), possibly wrapped in `<tools>`: Qwen-Coder writes these too."""
    b = _Builder()
    for m in _FUNCTION_NAMED.finditer(text):
        name, body = m.group(1), m.group(2).strip()
        inner = _ARGUMENTS.search(body)
        body = inner.group(1).strip() if inner else body
        if body.startswith("{"):
            value, repaired = _loads(body)
            if repaired is None or not isinstance(value, dict):
                b.problem = _unreadable(f'<function name="{name}">', body)
                return b.result(text)
            b.add(name, value, repaired)
        else:
            b.add(name, {k: _scalar(v) for k, v in _ELEMENT.findall(body)}, False)
    rest = _FUNCTION_NAMED.sub("", text).replace("<tools>", "").replace("</tools>", "")
    return b.result(rest)


def _mistral(text: str, tool_names: Collection[str]) -> TextCalls | None:
    at = text.find("[TOOL_CALLS]")
    if at < 0:
        return None
    b = _Builder()
    named = list(_MISTRAL_NAMED.finditer(text))
    if named:  # [TOOL_CALLS]name[ARGS]{...}, possibly repeated
        for i, m in enumerate(named):
            end = named[i + 1].start() if i + 1 < len(named) else len(text)
            body = text[m.end() : end].strip()
            value, repaired = _loads(body)
            if repaired is None or not isinstance(value, dict):
                b.problem = _unreadable(f"[TOOL_CALLS]{m.group(1)}[ARGS]", body)
                return b.result(text)
            b.add(m.group(1), value, repaired)
        return b.result(text[:at])
    body = text[at + len("[TOOL_CALLS]") :].strip()
    value, repaired = _loads(_balanced(body) or body)
    if repaired is None or not b.add_object(value, repaired, tool_names):
        b.problem = _unreadable("[TOOL_CALLS]", body)
    return b.result(text[:at])


def _llama3(text: str, tool_names: Collection[str]) -> TextCalls | None:
    tag = "<|python_tag|>"
    at = text.find(tag)
    if at < 0:
        return None
    b = _Builder()
    rest = text[at + len(tag) :].replace("<|eom_id|>", "").replace("<|eot_id|>", "").strip()
    while rest:
        piece = _balanced(rest)
        if piece is None:
            b.problem = _unreadable(tag, rest)
            return b.result(text[:at])
        value, repaired = _loads(piece)
        if repaired is None or not b.add_object(value, repaired, tool_names):
            b.problem = _unreadable(tag, piece)
            return b.result(text[:at])
        rest = rest[len(piece) :].lstrip().lstrip(";").lstrip()
    return b.result(text[:at])


def _json(text: str, tool_names: Collection[str]) -> TextCalls | None:
    """Fenced blocks first; else JSON objects or lists standing in the prose."""
    b = _Builder()
    kept: list[str] = []
    cursor = 0
    at = 0
    while "```" in text and (m := _FENCE.search(text, at)) is not None:
        body, at = m.group(1).strip(), m.end()
        if not body.startswith(("{", "[")):
            continue
        if _add_all(b, body, tool_names):
            kept.append(text[cursor : m.start()])
            cursor = m.end()
        elif (whole := _fenced_json(text, m.start(1))) and _add_all(b, whole[0], tool_names):
            kept.append(text[cursor : m.start()])
            cursor = at = whole[1]
        elif _starts_call(body, tool_names):
            b.problem = _unreadable("```json", body)
    if b.calls or b.problem:
        kept.append(text[cursor:])
        return b.result("".join(kept))
    i = 0
    while True:
        start = _next_open(text, i)
        if start < 0:
            break
        piece = _balanced(text[start:])
        if piece is None:
            if _starts_call(text[start:], tool_names):
                b.problem = _unreadable("a JSON tool call", text[start:])
            break
        value, repaired = _loads(piece)
        if repaired is not None and b.add_object(value, repaired, tool_names):
            kept.append(text[cursor:start])
            cursor = i = start + len(piece)
        else:
            i = start + 1
    kept.append(text[cursor:])
    return b.result("".join(kept))


def _fenced_json(text: str, start: int) -> tuple[str, int] | None:
    """The JSON value a fence's body at `start` holds when a string in it holds a fence
    of its own (an edit of a README's code block), and where the outer fence ends."""
    begin = _next_open(text, start)
    piece = _balanced(text[begin:]) if begin >= 0 else None
    if piece is None:
        return None
    close = text.find("```", begin + len(piece))
    between = text[begin + len(piece) : close] if close >= 0 else "x"
    return (piece, close + 3) if not between.strip() else None


def _add_all(b: _Builder, body: str, tool_names: Collection[str]) -> bool:
    """Add the call (or list of calls) `body` holds, or the calls it writes one after the
    other (`{...}\n{...}`, as small models do); False, adding nothing, if it is not that."""
    value, repaired = _loads(body)
    if repaired is not None:
        return b.add_object(value, repaired, tool_names)
    found: list[tuple[Any, bool]] = []
    rest = body
    while rest:
        piece = _balanced(rest)
        if piece is None:
            return False
        value, repaired = _loads(piece)
        if repaired is None or _as_call(value, tool_names) is None:
            return False
        found.append((value, repaired))
        rest = rest[len(piece) :].lstrip().lstrip(",;").lstrip()
    for value, repaired in found:
        b.add_object(value, repaired, tool_names)
    return bool(found)


def _call_pattern(tool_names: Collection[str]) -> re.Pattern[str] | None:
    return _pattern_of(frozenset(n for n in tool_names if n))


@functools.lru_cache(maxsize=64)
def _pattern_of(names: frozenset[str]) -> re.Pattern[str] | None:
    """`name(` for any of `names` (built once per set of tools: every text reply asks)."""
    if not names:
        return None
    longest_first = sorted(names, key=len, reverse=True)
    return re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, longest_first)) + r")\s*\(")


def _names_a_call(text: str, tool_names: Collection[str]) -> bool:
    pattern = _call_pattern(tool_names)
    return pattern is not None and pattern.search(text) is not None


_MAX_ENDS = 400
"""Closing parentheses tried as the end of one pythonic call (its text may hold many)."""


def _pythonic(text: str, tool_names: Collection[str]) -> TextCalls | None:
    """`name(args)` calls of offered tools, each found by parsing from its name to the
    first `)` that closes a call Python can read; only calls whose arguments are all
    literals count (prose like "call write_file(path, content)" is not a call)."""
    pattern = _call_pattern(tool_names)
    if pattern is None:
        return None
    b = _Builder()
    kept: list[str] = []
    cursor = 0
    bindings = functools.cache(lambda: _literal_bindings(text))  # read only if a call needs it
    for m in pattern.finditer(text):
        if m.start() < cursor:
            continue
        found = _python_call(text, m.start(), tool_names, bindings)
        if found is None:
            continue
        name, arguments, end = found
        b.add(name, arguments, False)
        kept.append(text[cursor : m.start()])
        cursor = end
    if not b.calls:
        return None
    kept.append(text[cursor:])
    return b.result(_FENCE_LEFT.sub("", "".join(kept)))


_FENCE_LEFT = re.compile(r"```[\w-]*\s*```")
"""A fence the calls were taken out of, left empty."""


_Bindings = Callable[[], Mapping[str, Any]]
"""A reply's `_literal_bindings`, read on first use (most calls name no variable)."""


def _literal_bindings(text: str) -> dict[str, Any]:
    """`name = literal` assignments of the Python programs a reply holds.

    Some models answer with a program instead of a call: `content = \"\"\"...\"\"\"`
    then `write_file("a.py", content)`. A call's argument that names such a variable
    takes its value; anything computed (an f-string, a call's result) stays unread."""
    bindings: dict[str, Any] = {}
    bodies = [m.group(1) for m in _FENCE.finditer(text)] or [text]
    for body in bodies:
        try:
            tree = parse_python(body)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in tree.body:
            if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    bindings[target.id] = value
    return bindings


def _python_call(
    text: str, start: int, tool_names: Collection[str], bindings: _Bindings
) -> tuple[str, dict[str, Any], int] | None:
    """(tool, arguments, end) of the Python call written at `start`, if it is one."""
    end = text.find(")", start)
    for _ in range(_MAX_ENDS):
        if end < 0:
            return None
        try:
            node = parse_expression(text[start : end + 1].strip())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            end = text.find(")", end + 1)
            continue
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return None
        arguments = _literal_arguments(node, node.func.id, tool_names, bindings)
        return None if arguments is None else (node.func.id, arguments, end + 1)
    return None


_UNQUOTED_PATH = re.compile(r"[\w-]+(?:[./][\w-]+)+")
"""A path a model left unquoted, which Python reads as a division or an attribute."""


def _literal_arguments(
    node: ast.Call, name: str, tool_names: Collection[str], bindings: _Bindings
) -> dict[str, Any] | None:
    params = list(tool_names[name]) if isinstance(tool_names, Mapping) else []
    if len(node.args) > len(params) or any(isinstance(a, ast.Starred) for a in node.args):
        return None

    def value(arg: ast.expr, param: str) -> Any:
        if isinstance(arg, ast.Name) and arg.id in (known := bindings()):
            return known[arg.id]
        if isinstance(arg, ast.Name) and arg.id in _PYTHON_NAMES:  # JSON's `false`
            return json.loads(arg.id)
        if param.endswith("path") and isinstance(arg, ast.BinOp | ast.Attribute):
            written = ast.unparse(arg).replace(" ", "")  # `edit_file(pkg/a.py, ...)`
            if _UNQUOTED_PATH.fullmatch(written):
                return written
        return ast.literal_eval(arg)

    try:
        out = {params[i]: value(a, params[i]) for i, a in enumerate(node.args)}
        for k in node.keywords:
            if k.arg is None:
                return None
            out[k.arg] = value(k.value, k.arg)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return out


_READERS = (
    ("hermes", _hermes),
    ("function", _function),
    ("mistral", _mistral),
    ("llama3", _llama3),
    ("json", _json),
    ("pythonic", _pythonic),
)


# -- JSON, leniently -------------------------------------------------------------------------


def _loads(text: str) -> tuple[Any, bool | None]:
    """(value, repaired): repaired is False for valid JSON, True when a repair was needed,
    None when nothing could read it."""
    try:
        return json.loads(text), False
    except ValueError:
        pass
    try:  # raw newlines and tabs inside strings: the commonest slip of a small model
        return json.loads(text, strict=False), True
    except ValueError:
        pass
    if ".join(" in text:  # a value written as JavaScript: `["line 1", "line 2"].join('\n')`
        text = _JOINED.sub(_joined, text)
    cleaned = re.sub(r",\s*([}\]])", r"\1", text)
    try:
        return json.loads(cleaned, strict=False), True
    except ValueError:
        pass
    if '"""' in text:  # a value written as a Python triple-quoted string (code, mostly)
        quoted = _TRIPLE.sub(_triple_quoted, text)
        try:
            return json.loads(quoted, strict=False), True
        except ValueError:
            pass
    if text.count('"') > 4:  # code with its own quotes in a value, left unescaped
        try:
            return json.loads(_escape_stray_quotes(text), strict=False), True
        except ValueError:
            pass
    try:  # a Python literal: single quotes, True/False/None (or JSON's true/false/null)
        return ast.literal_eval(_python_names(text)), True
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None, None


_JOINED = re.compile(
    r'\[((?:\s*"(?:[^"\\\n]|\\.)*"\s*,)*\s*"(?:[^"\\\n]|\\.)*"\s*,?\s*)\]'
    r"\s*\.join\(\s*(['\"])((?:[^'\"\\]|\\.)*)\2\s*\)"
)
"""A list of JSON strings joined the JavaScript way (one file's lines, as the 1.5B model
wrote a `write_file` content)."""


def _joined(m: re.Match[str]) -> str:
    """`_JOINED`'s list as the one JSON string it makes (unchanged if it is not JSON)."""
    try:
        lines = json.loads(f"[{m.group(1).rstrip().rstrip(',')}]")
        separator = json.loads(f'"{m.group(3)}"')
    except ValueError:
        return m.group(0)
    return json.dumps(separator.join(lines))


_PYTHON_NAMES = {"true": "True", "false": "False", "null": "None"}


def _python_names(text: str) -> str:
    """`text` with JSON's `true`, `false` and `null` outside strings as Python names: a
    model that quotes its strings Python's way keeps JSON's names (`'new': 'x', "replace_all":
    false`). Each is as long as its replacement, so nothing else moves."""
    if not any(name in text for name in _PYTHON_NAMES):
        return text
    out = list(text)
    starts = list(itertools.accumulate(map(len, io.StringIO(text)), initial=0))
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NAME and tok.string in _PYTHON_NAMES:
                at = starts[tok.start[0] - 1] + tok.start[1]
                out[at : at + len(tok.string)] = _PYTHON_NAMES[tok.string]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    return "".join(out)


# `"key": """..."""`: a JSON value written as a Python triple-quoted string
# ends where JSON goes on: a comma, a close, or the next key with its comma left out (the
# value's own docstring quotes are inside it then, as the 1.5B model wrote one)
_TRIPLE = re.compile(r'(?<=:)\s*"""(.*?)"""(?=\s*(?:([,}\]])|"[\w-]{1,64}"\s*:))', re.DOTALL)


def _triple_quoted(m: re.Match[str]) -> str:
    """`_TRIPLE`'s value as a JSON string, and the comma before the next key if it was
    left out."""
    return json.dumps(m.group(1)) + ("" if m.group(2) else ",")


_NEXT_KEY = re.compile(r'\s*,\s*"[^"\\\n]{1,64}"\s*:')
_NEXT_ITEM = re.compile(r'\s*,\s*["{\[\d\-tfn]')
_BLANK = re.compile(r"\s*")


def _escape_stray_quotes(text: str) -> str:
    """`text` with each `"` inside a string that does not end it escaped: a quote ends a
    string only where JSON could go on after it (a key's colon; the close of the object
    or list the string is in; a comma, then the next key or item; the end), so
    `"new": "def f(d):\n    \"""Doc.\"""\n    return d["k"]"` keeps its quotes as text."""
    out: list[str] = []
    opened: list[str] = []  # the objects and lists the scan is in
    in_string = escaped = is_key = False
    last = ""  # the last character outside strings that was not blank
    for i, ch in enumerate(text):
        if not in_string:
            if ch == '"':
                in_string, is_key = True, last in "{," and opened[-1:] == ["{"]
            elif ch in "{[":
                opened.append(ch)
            elif ch in "}]" and opened:
                opened.pop()
            if not ch.isspace():
                last = ch
            out.append(ch)
            continue
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            if _ends_string(text, i + 1, is_key, opened[-1] if opened else ""):
                in_string, last = False, '"'
            else:
                out.append("\\")
        out.append(ch)
    return "".join(out)


def _ends_string(text: str, at: int, is_key: bool, inside: str) -> bool:
    """Can a string end just before `at`: is what follows what JSON allows there?"""
    blank = _BLANK.match(text, at)
    rest = blank.end() if blank else at
    if is_key:
        return text.startswith(":", rest)
    if rest == len(text):
        return True
    if text[rest] in "}]":  # and after the close, what may follow a value (`d["k"]`)
        after = _BLANK.match(text, rest + 1)
        follows = text[after.end() : after.end() + 1] if after else ""
        return text[rest] == {"{": "}", "[": "]"}.get(inside) and follows in ("", ",", "}", "]")
    return bool((_NEXT_KEY if inside == "{" else _NEXT_ITEM).match(text, at))


def _unfence(body: str) -> str:
    m = _FENCE.fullmatch(body.strip())
    return m.group(1).strip() if m else body


def _scalar(value: str) -> Any:
    """A `<parameter>` value: JSON when it parses as a number, bool, list or object."""
    stripped = value.strip()
    if stripped[:1] in "[{" or stripped in ("true", "false", "null") or _is_number(stripped):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    return value


def _is_number(text: str) -> bool:
    return bool(re.fullmatch(r"-?\d+(\.\d+)?", text))


def _next_open(text: str, start: int) -> int:
    found = [i for i in (text.find("{", start), text.find("[", start)) if i >= 0]
    return min(found) if found else -1


def _balanced(text: str) -> str | None:
    """The JSON object or list `text` starts with, up to its matching bracket (strings and
    escapes respected); None when it never closes."""
    opener = text[:1]
    if opener not in "{[" or not opener:
        return None
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return text[: i + 1]
    return None


def _starts_call(text: str, tool_names: Collection[str]) -> bool:
    head = text[:200]
    if '"name"' not in head:
        return False
    return any(f'"{k}"' in text for k in _ARG_KEYS) or any(f'"{n}"' in head for n in tool_names)


def _unreadable(where: str, body: str) -> str:
    snippet = body.strip().replace("\n", " ")
    snippet = snippet if len(snippet) <= 80 else snippet[:60] + " … " + snippet[-15:]
    return f"the tool call after {where} is not complete JSON: {snippet}"


_CUT_FINISH = re.compile(
    r"""["']name["']\s*:\s*["']finish["'].*?["']summary["']\s*:\s*"(?P<summary>(?:[^"\\]|\\.)*)""",
    re.S,
)
_SUMMARY_CHARS = 500


def cut_finish(text: str) -> ToolCall | None:
    """The `finish` call a reply cut short was writing (its summary ran on until the cap,
    or round in a loop until it was stopped), with the summary as far as it got; None
    when the reply was not writing one. Only `finish`: its one argument is a summary,
    and a cut one still says the agent is done, where a cut file's content is not a file.
    A 1.5B model sent its cut `finish` three times over, each told it ran nothing."""
    found = _CUT_FINISH.search(text)
    if found is None:
        return None
    raw = found["summary"].rstrip("\\")
    try:
        summary = json.loads(f'"{raw}"')
    except ValueError:
        summary = raw
    summary = " ".join(summary.split())
    if len(summary) > _SUMMARY_CHARS:
        summary = summary[:_SUMMARY_CHARS].rsplit(" ", 1)[0]
    arguments = json.dumps({"summary": f"{summary} (cut short)"})
    digest = hashlib.sha1(f"finish|{arguments}".encode(), usedforsecurity=False)
    return ToolCall(id=f"call_{digest.hexdigest()[:10]}_0", name="finish", arguments=arguments)


_CUT_FILE_TOOL = re.compile(r"""["']name["']\s*:\s*["'](?P<tool>edit_file|write_file)["']""")
_WHOLE_STRING = '["\']{key}["\']\\s*:\\s*"(?P<value>(?:[^"\\\\]|\\\\.)*)"'
_CUT_STRING = '["\']{key}["\']\\s*:\\s*(?P<quote>"""|")'
_UNFINISHED_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?\Z")


def cut_file_call(text: str) -> ToolCall | None:
    """The `edit_file` or `write_file` call a reply stopped as a loop was writing, its text
    (`new`, `content`) kept to its last whole line: what came before the loop, and one
    round of it. None when the reply was not writing one, or its other arguments are not
    whole. A 1.5B model sent back for `test_clamp` wrote it right, then went on adding
    asserts round and round until it was stopped; the check judges what is kept."""
    found = _CUT_FILE_TOOL.search(text)
    if found is None:
        return None
    tool, rest = found["tool"], text[found.end() :]
    key = "new" if tool == "edit_file" else "content"
    arguments: dict[str, str] = {}
    for name in ("path", "old") if tool == "edit_file" else ("path",):
        whole = re.search(_WHOLE_STRING.format(key=name), rest)
        if whole is None:
            return None
        try:
            arguments[name] = json.loads(f'"{whole["value"]}"')
        except ValueError:
            return None
    opened = re.search(_CUT_STRING.format(key=key), rest)
    if opened is None:
        return None
    raw = rest[opened.end() :]
    if opened["quote"] == '"':  # JSON-escaped up to its closing quote, or the cut
        raw = _UNFINISHED_ESCAPE.sub("", re.match(r'(?:[^"\\]|\\.)*', raw, re.S)[0])  # type: ignore[index]
        try:
            raw = json.loads(f'"{raw}"')
        except ValueError:
            return None
    else:
        raw = raw.split('"""', 1)[0]
    body = raw[: raw.rfind("\n") + 1]
    if arguments["path"].endswith(".py"):
        body = _parsing_head(body)
    if not body.strip():
        return None
    arguments[key] = body
    encoded = json.dumps(arguments)
    digest = hashlib.sha1(f"{tool}|{encoded}".encode(), usedforsecurity=False)
    return ToolCall(id=f"call_{digest.hexdigest()[:10]}_0", name=tool, arguments=encoded)


_TRIMMED_LINES = 30
"""How many lines at the end of a cut Python text are taken off, at most, to make it parse."""


def _parsing_head(code: str) -> str:
    """The longest head of `code`, in whole lines and at most `_TRIMMED_LINES` shorter,
    that parses as Python (dedented: `new` may be a method); "" when none does."""
    lines = code.splitlines(keepends=True)
    for end in range(len(lines), max(0, len(lines) - _TRIMMED_LINES), -1):
        head = "".join(lines[:end])
        try:
            parse_python(textwrap.dedent(head))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        return head
    return ""


# -- asking for calls as text ------------------------------------------------------------------


def call_format_hint(tool_names: Collection[str], written: str = "") -> str:
    """How to write a call, shown to a model that wrote none (or one swarm could not read):
    in the Hermes tags when the model's last call read from its text was written so
    (`written`, a `FORMATS` name), else as a fenced JSON object. Shown the tags, a model
    served by llama.cpp (which turns them into special tokens) that wrote its calls as
    fenced JSON began a native call and ended the reply at once."""
    example = next(iter(sorted(tool_names)), "finish")
    call = f'{{"name": "{example}", "arguments": {{...}}}}'
    shown = f"<tool_call>\n{call}\n</tool_call>" if written == "hermes" else f"```json\n{call}\n```"
    return (
        f"Call exactly one tool per reply, written as:\n{shown}\n"
        "with `arguments` a JSON object (escape newlines in strings as \\n). "
        f"Tools: {', '.join(sorted(tool_names))}."
    )


def result_text(tool: str, content: str | None) -> str:
    """A tool's result as a user turn's text, for a model that called the tool in text."""
    return f"<tool_response name={tool!r}>\n{content or ''}\n</tool_response>"


_RESULT_TURN = re.compile(
    r"<tool_response name=(['\"])(?P<name>[^'\"]*)\1>\n(?P<content>.*)\n</tool_response>\Z", re.S
)


def read_result_text(text: str) -> tuple[str, str] | None:
    """(tool, content) of a user turn `result_text` wrote; None for any other text."""
    m = _RESULT_TURN.match(text)
    return (m["name"], m["content"]) if m else None


def text_request(request: ChatRequest) -> ChatRequest:
    """`request` for a server that takes no `tools`: described in the system prompt,
    earlier calls written back as `<tool_call>` text, tool results as user turns."""
    if not request.tools:
        return request
    lines = [
        "You can call these tools. To call one, answer with",
        '<tool_call>\n{"name": "TOOL", "arguments": {...}}\n</tool_call>',
        "and nothing after it; the result comes back in the next message.",
        "",
    ]
    for t in request.tools:
        lines.append(f"- {t.name}: {t.description}".rstrip())
        lines.append(f"  arguments schema: {json.dumps(t.parameters, separators=(',', ':'))}")
    guide = "\n".join(lines)
    messages: list[Message] = []
    for m in request.messages:
        if m.role == "assistant" and m.tool_calls:
            if m.written is not None:
                messages.append(Message.assistant(m.written))
                continue
            written = "\n".join(
                f'<tool_call>\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}\n'
                "</tool_call>"
                for c in m.tool_calls
            )
            messages.append(Message.assistant(((m.content or "") + "\n" + written).strip()))
        elif m.role == "tool":
            messages.append(Message.user(result_text(m.name or "", m.content)))
        else:
            messages.append(m)
    if messages and messages[0].role == "system":
        messages[0] = Message.system(f"{messages[0].content or ''}\n\n{guide}")
    else:
        messages.insert(0, Message.system(guide))
    return request.model_copy(update={"messages": messages, "tools": [], "tool_choice": None})
