"""A published MCP server as agent tools: `mcp-server-git` from PyPI (the Model Context
Protocol project's reference git server, a dev dependency), started as a real process over
stdio against a real repository. It runs offline: it only reads and writes the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm import Agent, AgentResult, Tool
from swarm.agent._toolbox import coding_tools
from swarm.agent.mcp import MCP_SERVER, McpServer, mcp_tools
from swarm.errors import UsageError
from swarm.testing import ScriptedModel, call
from tests.test_readme import calc_repo

GIT_TOOLS = {
    "git_status",
    "git_diff_unstaged",
    "git_diff_staged",
    "git_diff",
    "git_commit",
    "git_add",
    "git_reset",
    "git_log",
    "git_create_branch",
    "git_checkout",
    "git_show",
    "git_branch",
}


@asynccontextmanager
async def git_server(repo: Path, log: Path) -> AsyncIterator[list[Tool]]:
    """`mcp-server-git --repository repo`, confined to `repo`, its stderr in `log`."""
    with log.open("a") as errlog:
        server = McpServer(
            "git",
            command=[sys.executable, "-m", "mcp_server_git", "--repository", str(repo)],
            errlog=errlog,
        )
        async with mcp_tools(server) as tools:
            yield tools


def tool_texts(result: AgentResult[str]) -> list[str]:
    return [m.content or "" for m in result.messages if m.role == "tool"]


async def test_the_model_sees_the_servers_tools_with_their_schemas(tmp_path: Path) -> None:
    repo = calc_repo(tmp_path)
    async with git_server(repo, tmp_path / "git.log") as tools:
        model = ScriptedModel(["nothing to do"])
        await Agent("gitter", model, tools=tools).run("look around")
    offered = {spec.name: spec for spec in model.requests[0].tools}
    assert GIT_TOOLS <= set(offered)
    log = offered["git_log"]
    assert log.description == "Shows the commit logs"
    assert log.parameters["required"] == ["repo_path"]
    assert log.parameters["properties"]["max_count"] == {
        "default": 10,
        "title": "Max Count",
        "type": "integer",
    }
    assert offered["git_add"].parameters["properties"]["files"]["type"] == "array"


async def test_calls_return_the_servers_real_results(tmp_path: Path) -> None:
    repo = calc_repo(tmp_path)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    async with git_server(repo, tmp_path / "git.log") as tools:
        model = ScriptedModel(
            [
                call("git_log", repo_path=str(repo), max_count=1),
                call("git_diff_unstaged", repo_path=str(repo)),
                "add() fixed, not committed",
            ]
        )
        result = await Agent("gitter", model, tools=tools).run("what changed?")
    log, diff = tool_texts(result)
    assert f"Commit: {head}" in log and "Message: init" in log
    assert "-    return a - b\n+    return a + b" in diff
    assert result.output == "add() fixed, not committed"
    model.assert_complete()


async def test_bad_arguments_come_back_to_the_model_as_tool_errors(tmp_path: Path) -> None:
    repo = calc_repo(tmp_path)
    async with git_server(repo, tmp_path / "git.log") as tools:
        model = ScriptedModel(
            [
                call("git_log", repo_path=str(repo), max_count="lots"),  # fails the schema
                call("git_status", repo_path=str(tmp_path)),  # outside --repository
                call("git_status", repo_path=str(repo)),  # the session still works
                "clean",
            ]
        )
        result = await Agent("gitter", model, tools=tools).run("status?")
    bad_type, outside, status = tool_texts(result)
    assert bad_type.startswith("error: ") and "max_count" in bad_type
    assert "valid integer" in bad_type
    assert outside.startswith("error: ") and "outside the allowed repository" in outside
    assert "nothing to commit, working tree clean" in status
    assert result.output == "clean"


async def test_execute_tool_spans_name_the_mcp_server(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    repo = calc_repo(tmp_path)
    async with git_server(repo, tmp_path / "git.log") as tools:
        model = ScriptedModel([call("git_status", repo_path=str(repo)), "clean"])
        await Agent("gitter", model, tools=tools).run("status?")
    executed = [s for s in spans.get_finished_spans() if s.name.startswith("execute_tool")]
    assert [s.name for s in executed] == ["execute_tool git_status"]
    assert executed[0].attributes is not None
    assert executed[0].attributes[MCP_SERVER] == "git"


async def test_the_module_docstrings_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As written, with `python` the interpreter that has mcp-server-git installed."""
    import swarm.agent.mcp as module

    example = textwrap.dedent(module.__doc__.split("\n\n")[1])
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(calc_repo(tmp_path))
    model = ScriptedModel([call("finish", summary="nothing to do")])
    scope = {"McpServer": McpServer, "mcp_tools": mcp_tools, "Agent": Agent}
    scope |= {"coding_tools": coding_tools, "model": model, "prompt": "look around"}
    code = compile(
        f"async def main():\n{textwrap.indent(example, '    ')}\n    return result", "ex", "exec"
    )
    exec(code, scope)
    result = await scope["main"]()  # type: ignore[operator]
    assert result.output == "nothing to do"
    offered = {spec.name for spec in model.requests[0].tools}
    assert {"mcp_git_diff", "git_diff", "read_file"} <= offered


async def test_an_error_inside_the_block_leaves_it_as_itself(tmp_path: Path) -> None:
    repo = calc_repo(tmp_path)
    with pytest.raises(UsageError, match=r"two tools are named git_diff .*prefix="):
        async with git_server(repo, tmp_path / "git.log") as tools:
            Agent("gitter", ScriptedModel(["x"]), tools=[*tools, *coding_tools()])
