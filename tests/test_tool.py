"""`@tool`: schemas from hints and docstrings, argument validation, errors, threads; loading."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Literal

import anyio
import pytest
from pydantic import BaseModel, Field

from swarm.agent._tool import Finish, Tool, ToolContext, environ, scrub_env, tool, truncate
from swarm.agent._toolbox import BUILTIN_TOOL_NAMES, coding_tools, load_tools_from
from swarm.errors import ConfigError, ToolError
from swarm.messages import ToolSpec


@tool
def grep_lines(
    ctx: ToolContext,
    pattern: str,
    limit: int = 10,
    mode: Literal["fast", "exact"] = "fast",
    paths: list[str] | None = None,
) -> str:
    """Find lines matching a pattern.

    Longer explanation that is part of the description.

    Args:
        pattern: The regular expression
            to look for.
        limit (int): At most this many lines.
        mode: How to match.

    Returns:
        The matches.
    """
    return f"{ctx.root.name}:{pattern}:{limit}:{mode}:{paths}"


def test_schema_comes_from_hints_defaults_and_docstring() -> None:
    assert isinstance(grep_lines, Tool)
    assert grep_lines.name == "grep_lines"
    assert grep_lines.takes_context
    assert grep_lines.description == (
        "Find lines matching a pattern.\n\nLonger explanation that is part of the description."
    )
    schema = grep_lines.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["pattern"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert list(props) == ["pattern", "limit", "mode", "paths"]  # ToolContext excluded
    assert props["pattern"] == {
        "type": "string",
        "description": "The regular expression to look for.",
    }
    assert props["limit"] == {
        "type": "integer",
        "default": 10,
        "description": "At most this many lines.",
    }
    assert props["mode"]["enum"] == ["fast", "exact"]
    assert props["mode"]["description"] == "How to match."
    assert props["paths"]["default"] is None
    assert {"type": "array", "items": {"type": "string"}} in props["paths"]["anyOf"]
    assert "title" not in schema and all("title" not in p for p in props.values())


def test_spec_and_decorator_arguments() -> None:
    @tool(name="adder", description="Adds.")
    def add(a: int, b: Annotated[int, Field(ge=0)] = 1) -> int:
        return a + b

    assert not add.takes_context
    assert add.spec == ToolSpec(name="adder", description="Adds.", parameters=add.parameters)
    assert add.parameters["properties"]["b"]["minimum"] == 0


def test_parameter_names_that_shadow_basemodel_attributes() -> None:
    @tool
    def odd(json: str, copy: bool = False, schema: int = 0) -> str:
        """Odd names."""
        return f"{json}{copy}{schema}"

    assert set(odd.parameters["properties"]) == {"json", "copy", "schema"}


async def test_run_validates_and_calls(tmp_path: Path) -> None:
    ctx = ToolContext(root=tmp_path)
    out = await grep_lines.run('{"pattern": "x", "limit": "3", "paths": ["a"]}', ctx)
    assert out == f"{tmp_path.name}:x:3:fast:['a']"
    assert await grep_lines.run({"pattern": "y"}, ctx) == f"{tmp_path.name}:y:10:fast:None"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"pattern": ', "not valid JSON"),
        ("[1, 2]", "should be an object"),
        ("{}", "pattern: required argument missing"),
        ('{"pattern": "x", "limit": "many"}', "limit: Input should be a valid integer"),
        ('{"pattern": "x", "mode": "slow"}', "mode: Input should be 'fast' or 'exact'"),
        ('{"pattern": "x", "colour": 1}', "colour: unexpected argument"),
        (
            '{"type": "object", "properties": {"pattern": {"type": "string"}}}',
            "you sent the JSON schema of its arguments, not their values",
        ),
    ],
)
async def test_bad_arguments_become_tool_errors(
    tmp_path: Path, arguments: str, expected: str
) -> None:
    with pytest.raises(ToolError, match="grep_lines") as info:
        await grep_lines.run(arguments, ToolContext(root=tmp_path))
    assert expected in str(info.value)
    if "JSON" not in expected:
        assert 'Expected: {"pattern": string' in str(info.value)


async def test_empty_arguments_mean_none() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert await ping.run("") == "pong"
    assert await ping.run("  ") == "pong"


async def test_exceptions_become_tool_errors_but_finish_and_tool_error_pass() -> None:
    @tool
    def broken() -> str:
        raise KeyError("missing")

    @tool
    async def refuses() -> str:
        raise ToolError("no, because")

    @tool
    async def done(summary: str) -> str:
        raise Finish(summary)

    with pytest.raises(ToolError, match=r"^broken failed: KeyError: 'missing'$"):
        await broken.run("{}")
    with pytest.raises(ToolError, match=r"^no, because$"):
        await refuses.run("{}")
    with pytest.raises(Finish) as info:
        await done.run('{"summary": "all good"}')
    assert info.value.summary == "all good"


async def test_results_become_text_and_are_truncated(tmp_path: Path) -> None:
    class Point(BaseModel):
        x: int

    @tool
    def structured() -> dict[str, object]:
        return {"a": [1, 2], "p": Point(x=3)}

    @tool
    def long(ctx: ToolContext) -> str:
        return "h" * 60 + "t" * 60

    assert await structured.run("{}") == '{"a":[1,2],"p":{"x":3}}'
    out = await long.run("{}", ToolContext(root=tmp_path, max_output_chars=40))
    assert out.startswith("h" * 20) and out.endswith("t" * 20)
    assert "[… 80 characters cut …]" in out


async def test_context_tool_without_context_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="needs a ToolContext"):
        await grep_lines.run('{"pattern": "x"}')


async def test_sync_tools_run_in_a_thread_without_blocking_the_loop() -> None:
    @tool
    def slow() -> str:
        time.sleep(0.2)
        return "slept"

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        assert await slow.run("{}") == "slept"
        tg.cancel_scope.cancel()
    assert ticks >= 5  # a blocked loop would have ticked once


def test_truncate_keeps_head_and_tail() -> None:
    assert truncate("short", 10) == "short"
    cut = truncate("a" * 10 + "b" * 10, 10)
    assert cut == "aaaaa\n[… 10 characters cut …]\nbbbbb"


def test_scrub_env_drops_secrets() -> None:
    env = {
        "PATH": "/bin",
        "HOME": "/root",
        "OPENAI_API_KEY": "sk-1",
        "GITHUB_TOKEN": "t",
        "aws_secret_access_key": "s",
        "PGPASSWORD": "p",
        "GOOGLE_APPLICATION_CREDENTIALS": "/c.json",
        "SSH_AUTH_SOCK": "/s",
        "GIT_DIR": "/elsewhere/.git",
        "TRACEPARENT": "00-stale",
    }
    assert scrub_env(env) == {"PATH": "/bin", "HOME": "/root"}


def test_the_environment_copy_follows_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARM_TEST_PLAIN", "1")
    monkeypatch.setenv("SWARM_TEST_TOKEN", "t")
    assert environ()["SWARM_TEST_PLAIN"] == "1" and environ()["SWARM_TEST_TOKEN"] == "t"
    assert environ() is environ()  # not copied again while nothing changes
    scrubbed = scrub_env(os.environ)
    assert scrubbed["SWARM_TEST_PLAIN"] == "1" and "SWARM_TEST_TOKEN" not in scrubbed
    monkeypatch.setenv("SWARM_TEST_PLAIN", "2")
    monkeypatch.delenv("SWARM_TEST_TOKEN")
    assert environ()["SWARM_TEST_PLAIN"] == "2" and "SWARM_TEST_TOKEN" not in environ()
    assert scrub_env(os.environ)["SWARM_TEST_PLAIN"] == "2"


def test_default_context_env_is_an_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEREBRAS_API_KEY", "csk-secret")
    monkeypatch.setenv("MY_LLM_AUTH", "hunter2")  # no secret word in its name
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_TIME", "C")
    env = ToolContext(root=Path(".")).env
    assert "CEREBRAS_API_KEY" not in env and "MY_LLM_AUTH" not in env
    assert env["LANG"] == "C.UTF-8" and env["LC_TIME"] == "C" and "PATH" in env


def test_coding_tools_are_the_contract() -> None:
    tools = coding_tools()
    assert [t.name for t in tools] == list(BUILTIN_TOOL_NAMES)
    assert all(t.description for t in tools)
    assert [t.name for t in tools if not t.takes_context] == ["finish"]  # works anywhere
    props = {t.name: t.parameters["properties"] for t in tools}
    assert list(props["read_file"]) == ["path", "start", "end"]
    assert list(props["search"]) == ["pattern", "path", "glob"]
    assert list(props["edit_file"]) == ["path", "old", "new", "replace_all"]  # optional last
    assert list(props["run"]) == ["command", "timeout"]
    assert list(props["run_tests"]) == ["args"]
    assert list(props["git_diff"]) == ["path"]
    assert list(props["rename"]) == ["old", "new"]  # no path: {path, old, new} is edit_file's
    assert props["list_dir"]["path"]["default"] == "."
    assert [t.name for t in coding_tools(include=["finish", "read_file"])] == [
        "read_file",
        "finish",
    ]
    with pytest.raises(ConfigError, match="unknown built-in tools"):
        coding_tools(include=["rm_rf"])


def test_builtin_tools_never_import_as_top_level_tools() -> None:
    import sys

    coding_tools()
    assert "tools" not in sys.modules
    assert "swarm._builtin_tools.files" in sys.modules


def test_load_tools_from_a_user_file(tmp_path: Path) -> None:
    source = tmp_path / "mytools.py"
    source.write_text(
        "from swarm.agent._tool import tool\n"
        "@tool\n"
        "def shout(text: str) -> str:\n"
        '    """Shout."""\n'
        "    return text.upper()\n"
        "helper = 3\n"
    )
    tools = load_tools_from(source)
    assert [t.name for t in tools] == ["shout"]
    assert [t.name for t in load_tools_from(tmp_path)] == ["shout"]
    (tmp_path / "bad.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="boom"):
        load_tools_from(tmp_path / "bad.py")
    with pytest.raises(ConfigError, match="no such tool file"):
        load_tools_from(tmp_path / "missing.py")
