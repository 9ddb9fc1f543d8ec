"""The viewer's web server: static page plus JSON endpoints, on loopback only.

Endpoints (what-if is computed per query and cached):

- `/`, `/static/*`        the page (shipped in the package; nothing is fetched from outside)
- `/api/spans`            binary span columns (see `swarm.viewer.payload`), ready at start
- `/api/span/{i}`         every detail of span i
- `/api/summary`          summary, latency ledgers, critical path, per-tier histograms:
                          computed in a worker thread once the server is up, so the page
                          draws the spans first (this answer waits until it is ready)
- `/api/whatif?speed=P/M&reasoning=P/M&max_agents=N`  predicted wall-clock and cost
"""

from __future__ import annotations

import argparse
import json
import sys
import webbrowser
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web

from swarm._serve import serve_app
from swarm.errors import SwarmError
from swarm.viewer.data import ViewerData

__all__ = ["build_app", "main_view", "serve_viewer"]

STATIC = Path(__file__).with_name("static")
_DATA: web.AppKey[ViewerData] = web.AppKey("data", ViewerData)
_WHATIF_CACHE: web.AppKey[dict[tuple[str, str, int | None], bytes]] = web.AppKey(
    "whatif_cache", dict
)
_SUMMARY_READY: web.AppKey[anyio.Event] = web.AppKey("summary_ready", anyio.Event)
_JSON = "application/json"
_NO_CACHE = {"Cache-Control": "no-store"}


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers=_NO_CACHE)


async def _spans(request: web.Request) -> web.Response:
    body = request.app[_DATA].spans_json
    return web.Response(body=body, content_type="application/octet-stream")


async def _summary(request: web.Request) -> web.Response:
    await request.app[_SUMMARY_READY].wait()
    if not request.app[_DATA].summary_json:
        raise web.HTTPInternalServerError(text="the summary could not be computed")
    return web.Response(body=request.app[_DATA].summary_json, content_type=_JSON)


async def _span(request: web.Request) -> web.Response:
    data = request.app[_DATA]
    try:
        i = int(request.match_info["i"])
    except ValueError:
        raise web.HTTPBadRequest(text="span index must be an integer") from None
    if not 0 <= i < len(data):
        raise web.HTTPNotFound(text=f"no span {i}: the trace has {len(data)}")
    return web.json_response(data.span_detail(i))


async def _whatif(request: web.Request) -> web.Response:
    q = request.query
    raw_max = q.get("max_agents", "").strip()
    try:
        max_agents = int(raw_max) if raw_max else None
    except ValueError:
        raise web.HTTPBadRequest(text="max_agents must be an integer") from None
    if max_agents is not None and max_agents < 1:
        raise web.HTTPBadRequest(text="max_agents must be at least 1")
    key = (q.get("speed", "").strip(), q.get("reasoning", "").strip(), max_agents)
    cache = request.app[_WHATIF_CACHE]
    if key not in cache:
        data = request.app[_DATA]
        try:
            result = await anyio.to_thread.run_sync(
                lambda: data.whatif(speed=key[0], reasoning=key[1], max_agents=max_agents)
            )
        except (KeyError, ValueError, SwarmError) as exc:
            raise web.HTTPBadRequest(text=f"what-if: {exc}") from None
        cache[key] = json.dumps(result, separators=(",", ":")).encode()
    return web.Response(body=cache[key], content_type=_JSON)


def build_app(data: ViewerData, summary_ready: anyio.Event | None = None) -> web.Application:
    """The aiohttp application serving `data` (no I/O until it is run). `/api/summary`
    waits for `summary_ready` (default: `data` is already summarized)."""
    app = web.Application()
    app[_DATA] = data
    if summary_ready is None:
        summary_ready = anyio.Event()
        data.summarize()
        summary_ready.set()
    app[_SUMMARY_READY] = summary_ready
    app[_WHATIF_CACHE] = {}
    app.router.add_get("/", _index)
    app.router.add_get("/api/spans", _spans)
    app.router.add_get("/api/summary", _summary)
    app.router.add_get("/api/span/{i}", _span)
    app.router.add_get("/api/whatif", _whatif)
    app.router.add_static("/static/", STATIC)
    return app


@asynccontextmanager
async def serve_viewer(
    trace_path: str | Path, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve the viewer for `trace_path`; yields its URL (port 0 picks a free port).

    The summary is computed in a worker thread while the page loads and draws the spans;
    leaving waits for it (seconds at most: it cannot be interrupted mid-computation)."""
    data = await anyio.to_thread.run_sync(ViewerData.build, Path(trace_path))
    ready = anyio.Event()
    app = build_app(data, ready)

    async def summarize() -> None:
        try:
            await anyio.to_thread.run_sync(data.summarize)
        finally:
            ready.set()  # on failure `/api/summary` answers 500 rather than hanging

    async with anyio.create_task_group() as tg:
        tg.start_soon(summarize)
        async with serve_app(
            app, host=host, port=port, access_log=None, handle_signals=False
        ) as url:
            yield f"{url}/"


async def _serve_forever(args: argparse.Namespace) -> int:
    async with serve_viewer(Path(args.trace), port=int(getattr(args, "port", 0) or 0)) as url:
        print(f"swarm trace view: {url}", flush=True)
        if not getattr(args, "no_browser", False):
            await anyio.to_thread.run_sync(webbrowser.open, url)
        await anyio.sleep_forever()
    return 0  # pragma: no cover - sleep_forever returns only by cancellation


def main_view(args: argparse.Namespace | Any) -> int:
    """`swarm trace view TRACE [--port N] [--no-browser]`: serve until Ctrl-C."""
    path = Path(args.trace)
    if not path.is_file():
        print(f"swarm trace view: no such trace file: {path}", file=sys.stderr)
        return 2
    try:
        return anyio.run(_serve_forever, args)
    except KeyboardInterrupt:
        print("swarm trace view: stopped", file=sys.stderr)
        return 0
