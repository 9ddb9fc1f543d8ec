"""Secure by default (issue 34): what a library user builds gets the best sandbox the
machine offers, and `NoSandbox()` is an explicit opt-out that warns once."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest

from swarm._sandbox import NoSandbox, UnsandboxedWarning, bwrap_problem, default_sandbox
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.agent.mcp import McpServer, mcp_tools
from swarm.run._environment import CheckEnvironment
from swarm.run._workspace import Workspace
from tests.sandboxing import needs_bwrap
from tests.test_sandbox import repo

__all__ = ["repo"]

TOOLS = {t.name: t for t in coding_tools()}
SERVER = Path(__file__).parent / "agent_scripts" / "mcp_server.py"
HOST_MAP = os.readlink("/proc/self/ns/pid")
"""This process's PID namespace (a sandboxed command has its own)."""


@needs_bwrap
async def test_a_tool_context_built_by_hand_runs_commands_in_bubblewrap(tmp_path: Path) -> None:
    ctx = ToolContext(root=tmp_path)
    assert ctx.sandbox.kind == "bwrap"
    out = await TOOLS["run"].run({"command": "readlink /proc/self/ns/pid"}, ctx)
    assert HOST_MAP not in " ".join(out.split())


@needs_bwrap
async def test_a_workspace_context_and_a_check_environment_run_in_bubblewrap(repo: Path) -> None:
    assert CheckEnvironment.resolve(repo).sandbox.kind == "bwrap"
    async with Workspace.open(repo, name="w") as ws:
        namespace = "import os; print(os.readlink('/proc/self/ns/pid'))"
        ctx = ws.context(check=f'{sys.executable} -c "{namespace}"')
        assert ctx.sandbox.kind == "bwrap"
        out = await TOOLS["run_tests"].run({}, ctx)  # the interpreter is shown, and runs
        assert out.startswith("PASSED") and HOST_MAP not in " ".join(out.split()), out


def test_no_sandbox_is_an_opt_out_that_warns_once() -> None:
    why = "chosen by test_no_sandbox_is_an_opt_out_that_warns_once"  # once per process each
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NoSandbox(why=why)
        NoSandbox(why=why)
        ToolContext(root=Path("."), sandbox=NoSandbox(why=why))
    assert [w.category for w in caught] == [UnsandboxedWarning]
    assert "no sandbox" in str(caught[0].message) and why in str(caught[0].message)


def test_the_default_sandbox_is_one_per_process() -> None:
    assert default_sandbox() is default_sandbox()
    expected = "none" if bwrap_problem() else "bwrap"
    assert default_sandbox().kind == expected


@needs_bwrap
async def test_an_mcp_stdio_server_runs_in_the_sandbox_without_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_LLM_AUTH", "hunter2-mcp")
    command = [sys.executable, str(SERVER), "stdio"]
    async with mcp_tools(McpServer("calc", command=command)) as tools:
        where = await next(t for t in tools if t.name == "where").run({}, None)
    namespace, secret = where.split(" | ")
    assert namespace != HOST_MAP and secret == "MY_LLM_AUTH=-"
    async with mcp_tools(McpServer("calc", command=command, sandbox=NoSandbox())) as tools:
        where = await next(t for t in tools if t.name == "where").run({}, None)
    assert where.split(" | ")[0] == HOST_MAP  # the explicit opt-out: on the host
