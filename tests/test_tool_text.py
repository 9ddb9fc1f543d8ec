"""Tool calls written as text: every format open models use, repairs, and what is not a call."""

from __future__ import annotations

import json

import httpx
import pytest

from swarm.agent.events import CallCounts
from swarm.messages import ChatRequest, ChatResult, Message, ToolCall, ToolSpec
from swarm.providers._openai import OpenAIProvider
from swarm.providers._tool_text import (
    calls_from_text,
    read_calls,
    read_result_text,
    result_text,
    text_request,
)

NAMES = {"read_file", "write_file", "run_tests", "finish"}
READ = {"path": "a.py"}

FORMATS = [
    ("hermes", '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'),
    (
        "hermes",  # Qwen's, with no closing tag at the end of the reply
        'I will read it.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}',
    ),
    ("json", 'Reading.\n```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n```'),
    ("json", '{"name": "read_file", "arguments": {"path": "a.py"}}'),
    ("json", 'Sure: {"name": "read_file", "parameters": {"path": "a.py"}} - done.'),
    ("json", '```\n[{"name": "read_file", "arguments": {"path": "a.py"}}]\n```'),
    (
        "json",
        '{"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}',
    ),
    ("llama3", '<|python_tag|>{"name": "read_file", "parameters": {"path": "a.py"}}<|eom_id|>'),
    ("mistral", '[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "a.py"}}]'),
    ("mistral", '[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}'),
    ("function", '<function=read_file>{"path": "a.py"}</function>'),
    ("function", "<function=read_file>\n<parameter=path>\na.py\n</parameter>\n</function>"),
    (  # as Qwen2.5-Coder-1.5B wrote it on llama.cpp
        "function",
        '<tools>\n<function name="read_file">\n<arguments>\n<path>a.py</path>\n</arguments>\n'
        "</function>\n</tools>",
    ),
    ("function", '<function name="read_file">{"path": "a.py"}</function>'),
]


@pytest.mark.parametrize(("fmt", "text"), FORMATS)
def test_every_text_format_is_read(fmt: str, text: str) -> None:
    found = calls_from_text(text, NAMES)
    assert found.format == fmt
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [("read_file", READ)]
    assert found.problem == "" and found.repaired == 0
    assert "read_file" not in found.text  # the call is taken out of the prose


def test_calls_one_after_another_in_one_fence() -> None:
    """As Qwen2.5-Coder-1.5B wrote them on llama.cpp: two objects, no list, one fence."""
    text = (
        "```json\n"
        '{"name": "edit_file", "arguments": {"path": "m.py", "old": "a", "new": "b"}}\n'
        '{"name": "finish", "arguments": {"summary": "done"}}\n```'
    )
    found = calls_from_text(text, {"edit_file", "finish"})
    assert [c.name for c in found.calls] == ["edit_file", "finish"] and not found.problem


def test_a_value_written_as_a_python_triple_quoted_string_is_repaired() -> None:
    """As Qwen2.5-Coder-1.5B wrote file contents on llama.cpp."""
    text = (
        '```json\n{"name": "write_file", "arguments": {"path": "m.py", "content": """def f():\n'
        '    return 1\n"""}}\n```'
    )
    found = calls_from_text(text, {"write_file"})
    assert found.repaired == 1 and not found.problem
    assert json.loads(found.calls[0].arguments)["content"] == "def f():\n    return 1\n"
    nested = (  # a docstring inside: the value ends at the quotes a `}` or `,` follows
        '{"name": "edit_file", "arguments": {"path": "m.py", "old": "x", "new": """\n'
        'def f():\n    """Doc."""\n    return 1\n"""\n  }\n}'
    )
    found = calls_from_text(nested, {"edit_file"})
    new = json.loads(found.calls[0].arguments)["new"]
    assert new == '\ndef f():\n    """Doc."""\n    return 1\n'


def test_several_calls_in_one_reply() -> None:
    text = (
        '<|python_tag|>{"name": "read_file", "parameters": {"path": "a.py"}}; '
        '{"name": "run_tests", "parameters": {}}'
    )
    found = calls_from_text(text, NAMES)
    assert [c.name for c in found.calls] == ["read_file", "run_tests"]
    assert len({c.id for c in found.calls}) == 2
    hermes = "\n".join(
        f'<tool_call>{{"name": "{n}", "arguments": {{}}}}</tool_call>'
        for n in ("run_tests", "finish")
    )
    assert [c.name for c in calls_from_text(hermes, NAMES).calls] == ["run_tests", "finish"]


@pytest.mark.parametrize(
    "text",
    [
        # raw newlines inside a JSON string: the commonest slip of a small model
        '```json\n{"name": "write_file", '
        '"arguments": {"path": "a.py", "content": "x = 1\ny = 2"}}\n```',
        "{'name': 'write_file', 'arguments': {'path': 'a.py', 'content': 'x = 1\\ny = 2'}}",
        '{"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\\ny = 2",},}',
        '{"name": "write_file", '
        '"arguments": "{\\"path\\": \\"a.py\\", \\"content\\": \\"x = 1\\\\ny = 2\\"}"}',
    ],
)
def test_arguments_are_repaired_and_counted(text: str) -> None:
    found = calls_from_text(text, NAMES)
    assert len(found.calls) == 1 and found.repaired == 1
    assert json.loads(found.calls[0].arguments) == {"path": "a.py", "content": "x = 1\ny = 2"}


def test_code_with_its_own_quotes_left_unescaped_in_a_value_is_repaired() -> None:
    """As Qwen2.5-Coder-1.5B wrote an edit: a docstring's quotes and a dict's, unescaped."""
    text = (
        '```json\n{\n  "name": "write_file",\n  "arguments": {\n    "path": "a.py",\n'
        '    "content": "def f(d):\\n    """Say "hi", twice."""\\n    return d["k"]"\n  }\n}\n```'
    )
    found = calls_from_text(text, NAMES)
    assert found.repaired == 1 and found.problem == ""
    content = 'def f(d):\n    """Say "hi", twice."""\n    return d["k"]'
    assert json.loads(found.calls[0].arguments) == {"path": "a.py", "content": content}


def test_a_path_left_unquoted_in_a_pythonic_call_is_read() -> None:
    """As the real 1.5B model wrote it; a bare name stays prose ("call read_file(path)")."""
    names = {"edit_file": ("path", "old", "new"), "read_file": ("path",)}
    text = '```\nedit_file(inventory/pricing.py, "calc_total", "order_total")\n```'
    (found,) = calls_from_text(text, names).calls
    assert json.loads(found.arguments) == {
        "path": "inventory/pricing.py",
        "old": "calc_total",
        "new": "order_total",
    }
    assert calls_from_text("Then call read_file(path) to see it.", names).calls == []


def test_a_pythonic_call_inside_tool_call_tags_is_read() -> None:
    """As the real 1.5B model wrote one: Hermes' tags around a Python call, JSON's `false`."""
    names = {"edit_file": ("path", "old", "new", "replace_all")}
    text = '<tool_call>edit_file("a.py", "x = 1", "x = 2", replace_all=false)</tool_call>'
    found = calls_from_text(text, names)
    assert found.format == "hermes" and found.repaired == 1 and found.problem == ""
    assert json.loads(found.calls[0].arguments) == {
        "path": "a.py",
        "old": "x = 1",
        "new": "x = 2",
        "replace_all": False,
    }


def test_python_quotes_with_json_names_are_read() -> None:
    """As the real 1.5B model wrote an edit: Python's quotes, JSON's `false`."""
    text = (
        '```json\n{\n  "name": "write_file",\n  "arguments": {\n    "path": \'a.py\',\n'
        '    "content": \'x = {"on": "true"}\\nnull_value = None\',\n'
        '    "append": false\n  }\n}\n```'
    )
    found = calls_from_text(text, NAMES)
    assert found.repaired == 1
    assert json.loads(found.calls[0].arguments) == {
        "path": "a.py",
        "content": 'x = {"on": "true"}\nnull_value = None',
        "append": False,
    }


def test_a_fenced_call_whose_value_holds_a_fence_is_read_whole() -> None:
    """An edit of a README's code block, as Qwen2.5-Coder-1.5B wrote it."""
    old, new = "```python\nf(1)\n```", "```python\nf(2)\n```"
    args = {"path": "README.md", "old": old, "new": new}
    text = f"Here:\n```json\n{json.dumps({'name': 'edit_file', 'arguments': args})}\n```\nDone."
    found = calls_from_text(text, NAMES | {"edit_file"})
    assert [json.loads(c.arguments) for c in found.calls] == [args]
    assert found.text == "Here:\n\nDone." and found.problem == ""


def test_a_quote_before_a_closing_bracket_in_code_does_not_end_the_value() -> None:
    code = 'x = {"k": 1}\ny = d["k"]'
    text = '{"name": "write_file", "arguments": {"path": "a.py", "content": "' + code + '"}}'
    (found,) = calls_from_text(text, NAMES).calls
    assert json.loads(found.arguments)["content"] == code


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "def f(',
        '```json\n{"name": "write_file", "arguments": {"path": "a.py", "content": "de',
        '[TOOL_CALLS][{"name": "write_file", "arguments": {"path": ',
    ],
)
def test_a_call_cut_short_is_a_problem_not_a_call(text: str) -> None:
    found = calls_from_text(text, NAMES)
    assert found.calls == [] and "not complete JSON" in found.problem


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"subtasks": [{"id": "a", "title": "x", "files": []}]}\n```',
        'The config is {"name": "swarm", "version": 2, "license": "MIT"}.',
        "Plain prose with no call in it.",
        "",
    ],
)
def test_answers_that_are_not_calls_stay_text(text: str) -> None:
    found = calls_from_text(text, NAMES)
    assert found.calls == [] and found.problem == "" and found.format == ""


def test_the_same_call_gets_the_same_id_and_another_call_another() -> None:
    one = calls_from_text('{"name": "read_file", "arguments": {"path": "a.py"}}', NAMES)
    again = calls_from_text('{"name": "read_file", "arguments": {"path": "a.py"}}', NAMES)
    other = calls_from_text('{"name": "read_file", "arguments": {"path": "b.py"}}', NAMES)
    assert one.calls[0].id == again.calls[0].id != other.calls[0].id


def _result(text: str, finish: str = "stop") -> ChatResult:
    return ChatResult(message=Message.assistant(text), finish_reason=finish)


def test_read_calls_marks_the_format_and_keeps_native_calls() -> None:
    tools = [ToolSpec(name="read_file")]
    request = ChatRequest(messages=[Message.user("go")], tools=tools)
    result = _result('<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call>')
    read_calls(result, request)
    assert result.tool_call_format == "hermes" and result.finish_reason == "tool_calls"
    assert result.message.content is None and result.message.tool_calls[0].name == "read_file"
    native = ChatResult(message=Message.assistant(None, result.message.tool_calls))
    read_calls(native, request)
    assert native.tool_call_format == "native"
    no_tools = _result('{"name": "read_file", "arguments": {}}')
    read_calls(no_tools, ChatRequest(messages=[Message.user("go")]))
    assert no_tools.message.tool_calls == []  # no tools offered: nothing is a call


async def test_a_call_read_from_text_goes_back_as_the_model_wrote_it() -> None:
    """Shown its text calls in the API's own form, Qwen2.5-Coder-1.5B behind llama.cpp
    (whose parser misses its fenced calls) began that form and ended the reply at once:
    5 empty replies in 6 samples, none in 6 with its own text shown back."""
    tools = [ToolSpec(name="read_file")]
    written = 'Reading.\n```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n```'
    result = _result(written)
    read_calls(result, ChatRequest(messages=[Message.user("go")], tools=tools))
    turn = result.message
    assert turn.written == written and turn.content == "Reading."
    call = turn.tool_calls[0]
    request = ChatRequest(
        messages=[Message.user("go"), turn, Message.tool(call, "x = 1"), Message.user("on")],
        tools=tools,
    )
    async with httpx.AsyncClient() as client:
        provider = OpenAIProvider("local", "http://127.0.0.1:9/v1", client=client)
        sent = json.loads(provider.payload("m", request))["messages"]
    assert sent[1] == {"role": "assistant", "content": written}
    assert sent[2] == {"role": "user", "content": result_text("read_file", "x = 1")}
    assert read_result_text(sent[2]["content"]) == ("read_file", "x = 1")
    assert sent[3] == {"role": "user", "content": "on"}
    # in text mode too, the history is what the model wrote
    assert text_request(request).messages[2].content == written
    # calls the server parsed go back in the API's own form
    native = ChatResult(message=Message.assistant(None, [call]), finish_reason="tool_calls")
    read_calls(native, request)
    assert native.message.written is None
    async with httpx.AsyncClient() as client:
        provider = OpenAIProvider("local", "http://127.0.0.1:9/v1", client=client)
        request = request.model_copy(update={"messages": [Message.user("go"), native.message]})
        again = json.loads(provider.payload("m", request))["messages"]
    assert again[1]["tool_calls"][0]["function"]["name"] == "read_file"


def test_a_tool_result_the_model_wrote_itself_is_dropped_and_named() -> None:
    """As Qwen2.5-Coder-1.5B did: its own `<tool_response>`, then (or instead of) a call."""
    request = ChatRequest(messages=[Message.user("go")], tools=[ToolSpec(name="run_tests")])
    alone = _result("<tool_response>\nFailed to run tests.\n</tool_response>\n")
    read_calls(alone, request)
    assert alone.message.content is None and alone.message.tool_calls == []
    assert "only a tool writes its result" in alone.tool_call_problem
    text = '<tool_response>\nall passed\n</tool_response>\n<tool_call>{"name": "run_tests"}'
    with_call = _result(text)
    read_calls(with_call, request)
    assert [c.name for c in with_call.message.tool_calls] == ["run_tests"]
    assert with_call.message.content is None


def test_the_tool_list_written_back_is_dropped_and_not_read_as_a_call() -> None:
    """As Qwen2.5-Coder-1.5B did: the prompt's `<tools>` list (tool specs, each with a
    name and parameters) copied into its reply, before its call or alone."""
    request = ChatRequest(messages=[Message.user("go")], tools=[ToolSpec(name="edit_file")])
    spec = (
        '{"type": "function", "function": {"name": "edit_file", "description": "Edit.", '
        '"parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}'
    )
    call = '<tool_call>{"name": "edit_file", "arguments": {"path": "a.py"}}</tool_call>'
    with_call = _result(f"<tools>\n{spec}\n</tools>\n{call}")
    read_calls(with_call, request)
    assert [c.arguments for c in with_call.message.tool_calls] == ['{"path": "a.py"}']
    assert with_call.message.content is None
    alone = _result(f"<tools>\n{spec}\n</tools>")
    read_calls(alone, request)
    assert alone.message.content is None and alone.message.tool_calls == []
    native = ToolCall(id="c", name="edit_file", arguments='{"path": "a.py"}')
    beside = ChatResult(message=Message.assistant("<tools>\n\n</tools>", [native]))
    read_calls(beside, request)
    assert beside.message.content is None and beside.message.tool_calls == [native]


def test_a_call_written_beside_native_calls_is_read_and_runs_first() -> None:
    """The server parsed `finish` but missed the edit the model wrote in its text."""
    tools = [ToolSpec(name="edit_file"), ToolSpec(name="finish")]
    request = ChatRequest(messages=[Message.user("go")], tools=tools)
    native = ToolCall(id="call_1", name="finish", arguments='{"summary": "done"}')
    edit = '{"name": "edit_file", "arguments": {"path": "a.py", "old": "1", "new": "2"}}'
    result = ChatResult(message=Message.assistant(edit, [native]), finish_reason="tool_calls")
    read_calls(result, request)
    assert [c.name for c in result.message.tool_calls] == ["edit_file", "finish"]
    assert result.tool_call_format == "native+json" and result.text_tool_calls == 1
    counts = CallCounts()
    counts.count(result)
    assert (counts.native, counts.parsed) == (1, 1)
    echoed = ChatResult(  # the same call in the text as in the API's field: not twice
        message=Message.assistant('{"name": "finish", "arguments": {"summary": "done"}}', [native])
    )
    read_calls(echoed, request)
    assert echoed.message.tool_calls == [native] and echoed.tool_call_format == "native"


def test_text_request_describes_tools_and_writes_history_as_text() -> None:
    first = calls_from_text('{"name": "read_file", "arguments": {"path": "a.py"}}', NAMES).calls
    request = ChatRequest(
        messages=[
            Message.system("You are a coder."),
            Message.user("fix it"),
            Message.assistant("Reading.", first),
            Message.tool(first[0], "x = 1"),
        ],
        tools=[ToolSpec(name="read_file", description="Read a file.")],
        tool_choice="auto",
    )
    out = text_request(request)
    assert out.tools == [] and out.tool_choice is None
    assert [m.role for m in out.messages] == ["system", "user", "assistant", "user"]
    assert "read_file: Read a file." in (out.messages[0].content or "")
    assert "<tool_call>" in (out.messages[2].content or "")
    assert out.messages[2].tool_calls == []
    assert "x = 1" in (out.messages[3].content or "")
    # what the model writes back in that format is read again
    assert calls_from_text(out.messages[2].content or "", NAMES).calls[0].name == "read_file"


PARAMS = {"read_file": ("path", "start", "end"), "write_file": ("path", "content"), "finish": ()}


def test_pythonic_calls_are_read_with_positional_arguments_in_order() -> None:
    """As Qwen2.5-Coder-1.5B wrote them in the real-model demo, and Llama 3.2 by design."""
    text = (
        "Here's how you can do it:\n1. Call the `write_file` function:\n```python\n"
        'write_file("inventory/item.py", """\nfrom dataclasses import dataclass\n\n'
        '@dataclass(frozen=True)\nclass Item:\n    name: str\n""")\n```\nThen finish.'
    )
    found = calls_from_text(text, PARAMS)
    assert found.format == "pythonic" and not found.problem
    (call,) = found.calls
    assert call.name == "write_file"
    arguments = json.loads(call.arguments)
    assert arguments["path"] == "inventory/item.py"
    assert arguments["content"].startswith("\nfrom dataclasses import dataclass")
    assert "```" not in found.text and found.text.endswith("Then finish.")
    listed = calls_from_text('[read_file(path="a.py", start=2), finish()]', PARAMS)
    assert [(c.name, json.loads(c.arguments)) for c in listed.calls] == [
        ("read_file", {"path": "a.py", "start": 2}),
        ("finish", {}),
    ]


def test_a_program_calling_tools_with_its_literal_variables_is_read() -> None:
    """Qwen2.5-Coder-1.5B answered the real-model demo with programs like this one."""
    text = (
        "```python\npath = 'mathutil.py'\ncontent: str = '''def clamp(x, lo, hi):\n"
        "    return max(lo, min(x, hi))\n'''\nwrite_file(path, content)\n"
        "print(run_tests())\n```"
    )
    found = calls_from_text(text, {**PARAMS, "run_tests": ()})
    assert [c.name for c in found.calls] == ["write_file", "run_tests"]
    arguments = json.loads(found.calls[0].arguments)
    clamp = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
    assert arguments == {"path": "mathutil.py", "content": clamp}
    # a value computed at run time is not guessed
    computed = "```python\ncontent = open('a.py').read()\nwrite_file('b.py', content)\n```"
    assert calls_from_text(computed, PARAMS).calls == []


def test_prose_naming_a_tool_is_not_a_pythonic_call() -> None:
    for text in (
        "Call write_file(path, content) to create it.",  # names, not literals
        "Use the `read_file` function first.",
        "x = read_file('a.py', 1, 2, 3)",  # more arguments than the tool takes
        "obj.read_file('a.py')",  # a method, not the tool
    ):
        found = calls_from_text(text, PARAMS)
        assert found.calls == [], text


def test_a_content_written_as_javascript_lines_joined_is_read() -> None:
    """As Qwen2.5-Coder-1.5B wrote a new file: its lines in a list, `.join('\\n')`."""
    text = (
        '```json\n{\n  "name": "write_file",\n  "arguments": {\n    "path": "app/item.py",\n'
        '    "content": [\n      "from dataclasses import dataclass",\n      "",\n'
        '      "@dataclass",\n      "class Item:",\n      "    name: str"\n'
        "    ].join('\\n')\n  }\n}\n```"
    )
    found = calls_from_text(text, NAMES)
    assert found.repaired == 1 and found.calls[0].name == "write_file"
    content = json.loads(found.calls[0].arguments)["content"]
    assert content == "from dataclasses import dataclass\n\n@dataclass\nclass Item:\n    name: str"


def test_a_triple_quoted_value_with_a_docstring_inside_and_no_comma_after_is_read() -> None:
    """As Qwen2.5-Coder-1.5B wrote an edit: `new` as a Python triple-quoted string holding a
    function with its own docstring, and no comma before the next key."""
    text = (
        '```json\n{\n  "name": "edit_file",\n  "arguments": {\n    "path": "m.py",\n'
        '    "old": "def clamp(x):",\n    "new": """\ndef clamp(x):\n'
        '    """Clamp x."""\n    return x\n"""\n    "replace_all": false\n  }\n}\n```'
    )
    found = calls_from_text(text, {"edit_file"})
    assert found.repaired == 1 and found.calls[0].name == "edit_file"
    arguments = json.loads(found.calls[0].arguments)
    assert arguments["new"] == '\ndef clamp(x):\n    """Clamp x."""\n    return x\n'
    assert arguments["replace_all"] is False
