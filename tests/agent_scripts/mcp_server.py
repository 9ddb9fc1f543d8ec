"""An MCP server written with the official SDK's server API, for swarm's MCP tests.

python mcp_server.py stdio
python mcp_server.py http PORT
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("calc")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "slept"


@server.tool()
def where() -> str:
    """Where the server runs: its PID namespace, and a secret it should not see."""
    return f"{os.readlink('/proc/self/ns/pid')} | MY_LLM_AUTH={os.environ.get('MY_LLM_AUTH', '-')}"


@server.tool()
def crash() -> str:
    """Kill the server mid-call."""
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
