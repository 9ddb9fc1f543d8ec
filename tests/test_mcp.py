"""MCP servers as agent tools: stdio and streamable HTTP, against real server processes
written with the official SDK (tests/agent_scripts/mcp_server.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import anyio
import pytest

from swarm import Agent
from swarm._tracing.setup import run_tracing
from swarm.agent.events import ToolCallEvent
from swarm.agent.mcp import MCP_SERVER, McpServer, mcp_tools
from swarm.errors import McpError
from swarm.testing import ScriptedModel, call

SERVER = Path(__file__).parent / "agent_scripts" / "mcp_server.py"


_LOGS: list[TextIO] = []


@pytest.fixture(autouse=True)
def _close_logs() -> Iterator[None]:
    yield
    while _LOGS:
        _LOGS.pop().close()


def stdio_server(tmp_path: Path, prefix: str = "", call_timeout_s: float = 60.0) -> McpServer:
    """The test server over stdio, its stderr (tracebacks of failing tools) in a file."""
    _LOGS.append((tmp_path / "server.log").open("a"))
    return McpServer(
        "calc",
        command=[sys.executable, str(SERVER), "stdio"],
        errlog=_LOGS[-1],
        prefix=prefix,
        call_timeout_s=call_timeout_s,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def http_url(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    log = (tmp_path / "http.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "http.log").read_text()
                assert time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()
        log.close()


async def test_stdio_server_tools_have_names_schemas_and_results(tmp_path: Path) -> None:
    async with mcp_tools(stdio_server(tmp_path, prefix="calc_")) as tools:
        by_name = {t.name: t for t in tools}
        assert set(by_name) == {"calc_add", "calc_divide", "calc_slow", "calc_where", "calc_crash"}
        assert by_name["calc_add"].description == "Add two integers."
        assert by_name["calc_add"].parameters["required"] == ["a", "b"]
        model = ScriptedModel(
            [[call("calc_add", a=2, b=40), call("calc_divide", a=1, b=0)], "done"]
        )
        result = await Agent("calc", model, tools=tools).run("compute")
    texts = [m.content for m in result.messages if m.role == "tool"]
    assert texts[0] == "42"
    assert texts[1] is not None and texts[1].startswith("error: Error executing tool divide")
    assert result.output == "done"


async def test_bad_arguments_go_back_to_the_model(tmp_path: Path) -> None:
    async with mcp_tools(stdio_server(tmp_path)) as tools:
        model = ScriptedModel([call("add", a="x"), "ok"])
        result = await Agent("calc", model, tools=tools).run("compute")
    text = next(m.content for m in result.messages if m.role == "tool") or ""
    assert text.startswith("error:") and "validation error" in text


async def test_http_server_tools_and_spans_name_the_server(http_url: str, tmp_path: Path) -> None:
    with run_tracing("mcp", traces_dir=tmp_path):
        async with mcp_tools(McpServer("remote", url=http_url)) as tools:
            model = ScriptedModel([call("add", a=1, b=2), "three"])
            result = await Agent("calc", model, tools=tools).run("1+2")
    assert [m.content for m in result.messages if m.role == "tool"] == ["3"]
    spans = [json.loads(line) for line in (tmp_path / "mcp.jsonl").read_text().splitlines()]
    text = json.dumps(spans)
    assert '"execute_tool add"' in text
    assert MCP_SERVER in text and '"remote"' in text


async def test_a_server_that_crashes_mid_call_is_a_tool_error(tmp_path: Path) -> None:
    async with mcp_tools(stdio_server(tmp_path)) as tools:
        model = ScriptedModel([call("crash"), call("add", a=1, b=1), "gave up"])
        result = await Agent("calc", model, tools=tools).run("crash it")
    texts = [m.content or "" for m in result.messages if m.role == "tool"]
    assert texts[0].startswith("error: crash (MCP server calc) failed")
    assert texts[1].startswith("error: add (MCP server calc) failed")  # it stays down
    assert result.output == "gave up"


async def test_a_slow_call_times_out_and_a_cancelled_one_leaves_the_session_usable(
    tmp_path: Path,
) -> None:
    async with mcp_tools(stdio_server(tmp_path, call_timeout_s=0.5)) as tools:
        model = ScriptedModel([call("slow", seconds=30), "late"])
        result = await Agent("calc", model, tools=tools).run("wait")
        text = next(m.content for m in result.messages if m.role == "tool") or ""
        assert "did not answer in 0.5s" in text

        started = anyio.Event()

        def seen(event: object) -> None:
            if isinstance(event, ToolCallEvent):
                started.set()

        agent = Agent("calc", ScriptedModel([call("slow", seconds=30)]), tools=tools)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: agent.run("wait", on_event=seen))
            with anyio.fail_after(10):
                await started.wait()
            tg.cancel_scope.cancel()
        after = await Agent("calc", ScriptedModel([call("add", a=2, b=2), "4"]), tools=tools).run(
            "2+2"
        )
        assert [m.content for m in after.messages if m.role == "tool"] == ["4"]


async def test_a_server_that_cannot_start_is_an_mcp_error(tmp_path: Path) -> None:
    missing = McpServer("nope", command=[os.fspath(tmp_path / "no-such-server")])
    with pytest.raises(McpError, match="MCP server nope"):
        async with mcp_tools(missing):
            pass
    with pytest.raises(McpError, match="exactly one"):
        McpServer("both", command=["x"], url="http://127.0.0.1:1/mcp")
