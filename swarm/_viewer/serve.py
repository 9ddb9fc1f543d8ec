"""The viewer's web server: static page plus JSON endpoints, on loopback only.

Endpoints (what-if is computed per query and cached):

- `/`, `/static/*`        the page (shipped in the package; nothing is fetched from outside)
                          (`/?whole`: the page draws only once every span has arrived)
- `/api/spans`            binary span columns (see `swarm._viewer.payload`), streamed: each
                          frame goes out as soon as it is built (a trace without a fresh
                          column cache: a preview of its head first, then the whole)
- `/api/span/{i}`         every detail of span i
- `/api/summary`          summary, latency ledgers, critical path, per-tier histograms:
                          computed in a worker thread once the server is up, so the page
                          draws the spans first (this answer waits until it is ready)
- `/api/whatif?speed=P/M&reasoning=P/M&max_agents=N`  predicted wall-clock and cost
- `/api/scorecard`        per provider/model and per role: `swarm trace scorecard`'s rows
- `/api/live?since=N&v=V` following a run (`follow=True`): its live state, the bars after
                          the N-th (see `swarm._viewer.live`), once there is news after
                          version V (a long poll: `_Following`); `{"live": false}` otherwise

Following a run, the page long-polls `/api/live` (`static/live.js`) and draws the run as it
goes; the trace is loaded only once the run has ended, and `/api/spans` answers then, so
the same page becomes the ordinary viewer of the finished trace without a reload.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import webbrowser
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web

from swarm._analysis.loader import HEAD_BYTES
from swarm._serve import serve_app
from swarm._viewer.data import ViewerData
from swarm._viewer.live import Follower
from swarm._viewer.scorecard import scorecard_json
from swarm.errors import SwarmError

__all__ = ["build_app", "main_view", "serve_viewer"]

STATIC = Path(__file__).with_name("static")
_WHATIF_CACHE: web.AppKey[dict[tuple[str, str, int | None], bytes]] = web.AppKey(
    "whatif_cache", dict
)
_SCORECARD: web.AppKey[dict[str, bytes]] = web.AppKey("scorecard", dict)
_POLL_S = 0.1
"""How often a followed run's files are read: a read finding nothing new costs two small
`open`s, and this is most of the delay from a span's write to the page (see `_Following`)."""
_LONG_POLL_S = 10.0
_JSON = "application/json"
_NO_CACHE = {"Cache-Control": "no-store"}


class _Loading:
    """The data as it becomes ready: the server answers before the trace is loaded.

    The page and its script load while the spans are built, and the span payload's frames
    go out as they are built (the page draws from the first); the summary starts only once
    `/api/spans` went out, because computing it holds the GIL for seconds, which would
    delay the very payload the drawing waits for.

    `hold`: a test seam; frames after the first wait for it, in the build and in the
    answer (so a test can see the page draw from the first frame alone)."""

    def __init__(
        self,
        data: ViewerData | None = None,
        hold: anyio.Event | None = None,
        head_bytes: int = HEAD_BYTES,
    ) -> None:
        self.data = data
        self.head_bytes = head_bytes
        self.error = ""
        self.frames: list[bytes] = [] if data is None else [data.spans_bytes]
        self.hold = hold
        self.changed = anyio.Event()
        """Set (and replaced) when a frame was added or the build ended."""
        self.built = anyio.Event()
        self.wanted = anyio.Event()
        self.summarized = anyio.Event()
        if data is not None:
            self.built.set()

    async def get(self) -> ViewerData:
        await self.built.wait()
        if self.data is None:
            raise web.HTTPInternalServerError(text=f"the trace could not be loaded: {self.error}")
        return self.data

    def _changed(self, frame: bytes | None = None) -> None:
        if frame is not None:
            self.frames.append(frame)
        self.changed.set()
        self.changed = anyio.Event()

    async def build(self, path: Path) -> None:
        def on_frame(frame: bytes) -> None:  # in the worker thread
            anyio.from_thread.run_sync(self._changed, frame)
            if self.hold is not None:  # the build waits too: the page sees this frame alone
                anyio.from_thread.run(self.hold.wait)

        try:
            build = functools.partial(ViewerData.build, head_bytes=self.head_bytes)
            self.data = await anyio.to_thread.run_sync(build, path, on_frame)
            # a request from now on gets the whole payload alone, without a preview first
            # (one under way holds the list it started from)
            self.frames = [self.data.spans_bytes]
        finally:
            self.built.set()  # on failure every endpoint answers 500 rather than hanging
            self._changed()

    async def summarize(self) -> None:
        await self.wanted.wait()
        try:
            if self.data is not None:
                await anyio.to_thread.run_sync(self.data.summarize)
        finally:
            self.summarized.set()


_STATE: web.AppKey[_Loading] = web.AppKey("state", _Loading)


class _Following:
    """A followed run and the news of it: `/api/live?v=V` waits (up to `_LONG_POLL_S`)
    until the follower's `version` is past V, so the page hears of a span as soon as the
    server has read it, not at its next poll. A span's delay to the page is then the run's
    trace flush (every 0.5 s), this server's read (every `_POLL_S`) and one request."""

    def __init__(self, follower: Follower) -> None:
        self.follower = follower
        self._news = anyio.Event()

    def announce(self) -> None:
        self._news.set()
        self._news = anyio.Event()

    async def after(self, version: int) -> Follower:
        f = self.follower
        with anyio.move_on_after(_LONG_POLL_S):
            while f.version == version and not f.done:
                await self._news.wait()
        return f


_FOLLOWING: web.AppKey[list[_Following]] = web.AppKey("following", list)


_EARLY_FETCH = '<script>window.__spans = fetch("/api/spans");'


async def _index(request: web.Request) -> web.StreamResponse:
    if not request.app[_FOLLOWING]:
        return web.FileResponse(STATIC / "index.html", headers=_NO_CACHE)
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    # following: the spans are asked for once the run has ended (live.js says when)
    page = page.replace(_EARLY_FETCH, '<script src="/static/live.js"></script><script>')
    return web.Response(text=page, content_type="text/html", headers=_NO_CACHE)


async def _live(request: web.Request) -> web.Response:
    following = request.app[_FOLLOWING]
    if not following:
        return web.json_response({"live": False, "done": True})
    try:
        since = int(request.query.get("since", "0"))
        version = int(request.query.get("v", "-1"))
    except ValueError:
        raise web.HTTPBadRequest(text="since and v must be integers") from None
    follower = await following[0].after(version)
    body = json.dumps(follower.snapshot(since), separators=(",", ":"))
    return web.Response(text=body, content_type=_JSON, headers=_NO_CACHE)


async def _follow(following: _Following, state: _Loading, ended: anyio.Event | None) -> None:
    """Read the run's files as they grow until it has ended, then load its trace."""
    follower = following.follower
    while not follower.done:
        seen = follower.version
        if follower.grew():  # decoding spans can take a while: not on the event loop
            await anyio.to_thread.run_sync(follower.poll)
        else:
            follower.idle()
        if ended is not None and ended.is_set():
            follower.end()
            await anyio.to_thread.run_sync(follower.poll)
            if not follower.root_seen:  # a run that never wrote its root: draw what is there
                follower.root_seen = True
            following.announce()
            break
        if follower.version != seen:
            following.announce()
        await anyio.sleep(_POLL_S)
    await state.build(follower.path)


async def _spans(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE]
    while not state.frames and not state.built.is_set():
        await state.changed.wait()
    if not state.frames:
        await state.get()  # the load failed: answers 500
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    await response.prepare(request)
    sent, frames = 0, state.frames
    while True:
        changed = state.changed
        if sent < len(frames):
            await response.write(frames[sent])
            sent += 1
            if sent == 1 and state.hold is not None:
                await state.hold.wait()
        elif state.built.is_set():
            break
        else:
            await changed.wait()
    await response.write_eof()
    state.wanted.set()
    return response


async def _summary(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    data = await state.get()
    state.wanted.set()
    await state.summarized.wait()
    if not data.summary_json:
        raise web.HTTPInternalServerError(text="the summary could not be computed")
    return web.Response(body=data.summary_json, content_type=_JSON)


async def _span(request: web.Request) -> web.Response:
    data = await request.app[_STATE].get()
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
        data = await request.app[_STATE].get()
        try:
            result = await anyio.to_thread.run_sync(
                lambda: data.whatif(speed=key[0], reasoning=key[1], max_agents=max_agents)
            )
        except (KeyError, ValueError, SwarmError) as exc:
            raise web.HTTPBadRequest(text=f"what-if: {exc}") from None
        cache[key] = json.dumps(result, separators=(",", ":")).encode()
    return web.Response(body=cache[key], content_type=_JSON)


async def _scorecard(request: web.Request) -> web.Response:
    cache = request.app[_SCORECARD]
    if "body" not in cache:
        data = await request.app[_STATE].get()
        cache["body"] = await anyio.to_thread.run_sync(scorecard_json, data.trace)
    return web.Response(body=cache["body"], content_type=_JSON)


def build_app(data: ViewerData | _Loading) -> web.Application:
    """The aiohttp application serving `data` (no I/O until it is run); given
    `ViewerData`, it is summarized here and now."""
    app = web.Application()
    if isinstance(data, ViewerData):
        data.summarize()
        data = _Loading(data)
        data.wanted.set()
        data.summarized.set()
    app[_STATE] = data
    app[_WHATIF_CACHE] = {}
    app[_SCORECARD] = {}
    app[_FOLLOWING] = []
    app.router.add_get("/", _index)
    app.router.add_get("/api/live", _live)
    app.router.add_get("/api/spans", _spans)
    app.router.add_get("/api/summary", _summary)
    app.router.add_get("/api/span/{i}", _span)
    app.router.add_get("/api/whatif", _whatif)
    app.router.add_get("/api/scorecard", _scorecard)
    app.router.add_static("/static/", STATIC)
    return app


@asynccontextmanager
async def serve_viewer(
    trace_path: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    hold: anyio.Event | None = None,
    follow: bool = False,
    ended: anyio.Event | None = None,
    head_bytes: int = HEAD_BYTES,
) -> AsyncIterator[str]:
    """Serve the viewer for `trace_path`; yields its URL (port 0 picks a free port).

    The URL answers at once; the trace loads in a worker thread meanwhile, its span frames
    go out as they are built, and the summary after the spans went out (see `_Loading`,
    which also says what `hold` is for). Leaving while either runs waits for it (seconds:
    a computation cannot be interrupted midway). A trace that cannot be loaded raises
    here, when leaving.

    `head_bytes`: how much of a trace without a fresh cache is drawn first (a preview).
    `follow`: the run is still going (the file may not exist yet); the page shows it live
    until it ends (`ended` set by a run in this process, else its root span written and
    the files quiet), then becomes the ordinary viewer."""
    state = _Loading(hold=hold, head_bytes=head_bytes)
    app = build_app(state)
    path = Path(trace_path)
    try:
        async with anyio.create_task_group() as tg:
            if follow:
                following = _Following(Follower(path))
                app[_FOLLOWING].append(following)
                tg.start_soon(_follow, following, state, ended)
            else:
                tg.start_soon(state.build, path)
            tg.start_soon(state.summarize)
            async with serve_app(
                app, host=host, port=port, access_log=None, handle_signals=False
            ) as url:
                yield f"{url}/"
            if not follow:  # a followed run may never end while we serve it
                await state.built.wait()  # a load error is raised, not swallowed by the cancel
            tg.cancel_scope.cancel()  # a summary nobody asked for is not computed
    except BaseExceptionGroup as group:  # the caller's own error, not wrapped by our group
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group
        raise


async def _serve_forever(args: argparse.Namespace) -> int:
    port = int(getattr(args, "port", 0) or 0)
    follow = bool(getattr(args, "follow", False))
    async with serve_viewer(Path(args.trace), port=port, follow=follow) as url:
        print(f"swarm trace view: {url}", flush=True)
        if not getattr(args, "no_browser", False):
            await anyio.to_thread.run_sync(webbrowser.open, url)
        await anyio.sleep_forever()
    return 0  # pragma: no cover - sleep_forever returns only by cancellation


def main_view(args: argparse.Namespace | Any) -> int:
    """`swarm trace view TRACE [--port N] [--no-browser]`: serve until Ctrl-C."""
    path = Path(args.trace)
    if not path.is_file() and not getattr(args, "follow", False):
        print(f"swarm trace view: no such trace file: {path}", file=sys.stderr)
        return 2
    try:
        return anyio.run(_serve_forever, args)
    except KeyboardInterrupt:
        print("swarm trace view: stopped", file=sys.stderr)
        return 0
