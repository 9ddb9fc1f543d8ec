"""MCP client tools: the tools of Model Context Protocol servers, as an agent's `Tool`s.

    git = McpServer("git", command=["python", "-m", "mcp_server_git"], prefix="mcp_")
    async with mcp_tools(git) as tools:
        result = await Agent("coder", model, tools=[*tools, *coding_tools()]).run(prompt)

(`prefix` keeps the server's `git_diff` apart from swarm's own.)

A server is a command speaking MCP over its stdin/stdout, or a streamable-HTTP URL; the
official `mcp` SDK does the protocol. `mcp_tools` connects to every server, lists its
tools (names, descriptions and JSON schemas as the server gives them, with an optional
prefix), and keeps the connections open for the block. A call's arguments are checked by
the server; its error results, a server that crashes or hangs up mid-call (`ToolError`:
the model reads what happened) and calls that take longer than `call_timeout_s` go back to
the model as tool errors. A server that cannot be started or listed raises `McpError`;
an error raised inside the block leaves it as itself, not wrapped in the SDK's task
groups' `ExceptionGroup`s.
Each call's `execute_tool` span carries `swarm.mcp.server`.

A stdio server runs in a sandbox (`McpServer.sandbox`; default `default_sandbox()`,
bubblewrap where it works, network off), in its `cwd` (writable; default an empty
directory of its own), seeing its executable's installation and the files its command
line names read-only, with the allow-listed environment (`command_env`) plus its `env`.
A server that needs the network or more of the machine gets a sandbox that allows it
(`make_sandbox(network=...)`, `BwrapSandbox(SandboxPolicy(read_only=...))`), or
`sandbox=NoSandbox()` (warned once).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from pydantic import BaseModel, ConfigDict

from swarm._sandbox import Launch, Sandbox, default_sandbox
from swarm._sandbox._interpreter import prefixes
from swarm.agent._tool import Tool, command_env, environ
from swarm.errors import McpError, ToolError, alone

__all__ = ["MCP_SERVER", "McpServer", "mcp_tools"]

MCP_SERVER = "swarm.mcp.server"
"""Span attribute: the `McpServer.name` an `execute_tool` span's tool came from."""


class _AnyArguments(BaseModel):
    """MCP arguments pass through as given: the server validates them against its schema."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class McpServer:
    """One MCP server: a command (stdio) or a URL (streamable HTTP)."""

    name: str
    """A label for spans and errors (`git`, `search`)."""
    command: Sequence[str] = ()
    """The server's command line, for a stdio server."""
    url: str | None = None
    """The endpoint (`http://127.0.0.1:8000/mcp`), for a streamable-HTTP server."""
    env: Mapping[str, str] | None = None
    """Extra environment for a stdio server (over the SDK's minimal default one)."""
    cwd: Path | None = None
    prefix: str = ""
    """Put before each tool's name (`git_`), when two servers' names could clash."""
    call_timeout_s: float = 60.0
    """A call taking longer is abandoned; the model is told."""
    connect_timeout_s: float = 30.0
    errlog: TextIO | None = field(default=None, compare=False)
    """Where a stdio server's stderr goes (default: this process's stderr)."""
    sandbox: Sandbox | None = field(default=None, compare=False)
    """Where a stdio server runs; None: `default_sandbox()` (see the module)."""

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise McpError(f"MCP server {self.name}: give a command or a url (exactly one)")


@asynccontextmanager
async def mcp_tools(*servers: McpServer) -> AsyncIterator[list[Tool]]:
    """Connect to `servers`; their tools, usable while the block runs."""
    tools: list[Tool] = []
    try:
        async with AsyncExitStack() as stack:
            for server in servers:
                client = await _connect(stack, server)
                tools.extend(await _list(client, server))
            yield tools
    except BaseExceptionGroup as group:
        one = alone(group)
        if one is None:
            raise
        raise one from one.__cause__


async def _connect(stack: AsyncExitStack, server: McpServer) -> Client:
    timeout = server.connect_timeout_s  # each request's (the handshake's too)
    if server.url is not None:
        client = Client(server.url, read_timeout_seconds=timeout)
    else:
        params = await _sandboxed(stack, server)
        transport = stdio_client(params, errlog=server.errlog or sys.stderr)
        client = Client(transport, read_timeout_seconds=timeout)
    try:  # no fail_after here: entering the client opens its task group for the block
        return await stack.enter_async_context(client)
    except Exception as exc:
        where = server.url or " ".join(server.command)
        raise McpError(f"MCP server {server.name} ({where}) did not start: {exc}") from exc


async def _sandboxed(stack: AsyncExitStack, server: McpServer) -> StdioServerParameters:
    """The stdio server's command line as its sandbox runs it (released with the stack)."""
    sandbox = server.sandbox if server.sandbox is not None else default_sandbox()
    argv = list(server.command)
    found = shutil.which(argv[0], path=environ().get("PATH"))
    if found is not None:
        argv[0] = found
    sandbox = sandbox.with_read_only(_shown(argv))
    cwd = server.cwd
    if cwd is None:
        cwd = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="swarm-mcp-")))
    env = {**command_env(environ()), **(server.env or {})}
    lane = await stack.enter_async_context(sandbox.lane())
    launch = sandbox.launch(argv, cwd=cwd, env=env, lane=lane)
    stack.push_async_callback(_release, sandbox, launch)  # once the server has ended
    return StdioServerParameters(
        command=launch.argv[0], args=launch.argv[1:], env=launch.env, cwd=launch.cwd
    )


async def _release(sandbox: Sandbox, launch: Launch) -> None:
    """Free what the sandbox made for the server (its cgroups), bounded: its namespace's
    last processes may take a moment to go after the client has stopped it."""
    with anyio.CancelScope(shield=True):
        for _ in range(500):  # 5 s at most
            if sandbox.release(launch):
                return
            await anyio.sleep(0.01)


def _shown(argv: Sequence[str]) -> list[Path]:
    """What a server's command line needs to see: its executable's installation (a
    venv's and its base interpreter's prefix, or the executable's directory) and the
    files and directories it names by absolute path."""
    paths: list[Path] = []
    exe = Path(argv[0])
    if exe.is_absolute():
        real = exe.resolve()
        paths += prefixes(exe) if real.parent.name == "bin" else [real.parent]
    for word in argv[1:]:
        given = Path(word)
        if given.is_absolute() and os.path.exists(given):
            paths.append(given.resolve())
    return [p for p in dict.fromkeys(paths) if p != Path("/") and not p.is_relative_to("/usr")]


async def _list(client: Client, server: McpServer) -> list[Tool]:
    try:
        with anyio.fail_after(server.connect_timeout_s):
            listed = await client.list_tools()
    except Exception as exc:
        raise McpError(f"MCP server {server.name}: could not list its tools: {exc}") from exc
    return [
        Tool(
            name=server.prefix + t.name,
            description=t.description or "",
            parameters=dict(t.input_schema),
            fn=_caller(client, server, t.name),
            takes_context=False,
            span_attributes={MCP_SERVER: server.name},
            _args=_AnyArguments,
        )
        for t in listed.tools
    ]


def _caller(client: Client, server: McpServer, name: str) -> Any:
    async def call(**arguments: Any) -> str:
        try:
            with anyio.fail_after(server.call_timeout_s):
                result = await client.call_tool(name, arguments)
        except TimeoutError:
            raise ToolError(
                f"{name} (MCP server {server.name}) did not answer in {server.call_timeout_s}s"
            ) from None
        except Exception as exc:  # the server hung up, crashed or sent nonsense
            raise ToolError(f"{name} (MCP server {server.name}) failed: {exc}") from exc
        text = "\n".join(_text(part) for part in result.content)
        if result.is_error:
            raise ToolError(text or f"{name} failed")
        return text

    call.__name__ = name
    return call


def _text(part: Any) -> str:
    """One content block as text (images and binary resources by their type only)."""
    text = getattr(part, "text", None)
    if isinstance(text, str):
        return text
    resource = getattr(part, "resource", None)
    if resource is not None and isinstance(getattr(resource, "text", None), str):
        return str(resource.text)
    mime = getattr(part, "mime_type", None) or getattr(resource, "mime_type", None)
    return f"[{getattr(part, 'type', 'content')}{f' {mime}' if mime else ''}]"
