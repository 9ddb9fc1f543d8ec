"""Serving an aiohttp application on a local address, as an async context manager.

The simulator server, the trace viewer and the tests' stand-in servers all need the same
thing: start on a port (0 picks a free one), hand back the base URL, and shut down on
every exit path, cancellation included.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from aiohttp import web

__all__ = ["serve_app"]


@asynccontextmanager
async def serve_app(
    app: web.Application, *, host: str = "127.0.0.1", port: int = 0, **runner: Any
) -> AsyncIterator[str]:
    """Serve `app`; yields `http://host:port` (the real port when `port` is 0)."""
    runner.setdefault("shutdown_timeout", 0.5)
    app_runner = web.AppRunner(app, **runner)
    await app_runner.setup()
    try:
        site = web.TCPSite(app_runner, host, port)
        await site.start()
        shown = f"[{host}]" if ":" in host else host
        yield f"http://{shown}:{app_runner.addresses[0][1]}"
    finally:
        with anyio.move_on_after(5, shield=True):
            await app_runner.cleanup()
