"""The viewer draws a large run while its span payload still streams in (headless Chromium).

The server holds every frame after the first (`serve_viewer(hold=...)`) until the test has
seen the page draw; then the page must end with the same picture as a page that drew only
once everything had arrived (`?whole`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.async_api import Browser, Page, async_playwright

from swarm._analysis.loader import HEAD_BYTES
from swarm._analysis.spanfile import SPANS_PER_LINE
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._tracing import semconv as sc
from swarm._viewer.chromium import CHROMIUM_ARGS
from swarm._viewer.data import ViewerData
from swarm._viewer.payload import decode, stream_spans
from swarm._viewer.serve import serve_viewer
from tests.test_viewer_browser import require_chromium

pytestmark = pytest.mark.browser

_PICTURE = """() => {
    const V = __viewer, c = document.getElementById('timeline');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let h = 0;
    for (let i = 0; i < d.length; i += 4)
        h = (Math.imul(h, 31) + d[i] + 7 * d[i+1] + 13 * d[i+2]) | 0;
    const lanes = [];
    for (let l = 0; V.laneLabel(l) != null; l++) lanes.push(V.laneLabel(l));
    return {n: V.spanCount, total: V.total, drawn: V.drawnCount, hash: h, lanes,
            critLane: V.critLane, complete: V.complete};
}"""


async def _picture(page: Page) -> dict[str, Any]:
    """The timeline fitted to the whole run, redrawn: its pixels' hash and what it shows."""
    await page.evaluate("() => { document.getElementById('reset').click(); __viewer.drawNow(); }")
    picture: dict[str, Any] = await page.evaluate(_PICTURE)
    return picture


async def _find_and_jump(page: Page) -> dict[str, Any]:
    await page.fill("[data-testid=search]", "t2017 ·")
    await page.wait_for_function("__viewer.matchCount > 0")
    crit_lane = await page.evaluate("__viewer.critLane")
    await page.click("[data-testid=crit-focus]")
    await page.wait_for_function(f"__viewer.laneVisible({crit_lane})")
    found: dict[str, Any] = await page.evaluate("({matches: __viewer.matchCount})")
    return found


_Held = tuple[Browser, Page, str, list[str]]


@asynccontextmanager
async def _held(
    path: Path, hold: anyio.Event, head_bytes: int = HEAD_BYTES
) -> AsyncIterator[_Held]:
    """The viewer on `path`, its frames after the first held until `hold` (see
    `serve_viewer`), and a Chromium page on it: browser, page, URL and the page's errors."""
    served = serve_viewer(path, hold=hold, head_bytes=head_bytes)
    async with served as url, async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=require_chromium(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(url)
            yield browser, page, url, errors
        finally:
            await browser.close()


async def test_first_draw_comes_before_the_payload_ends(huge_trace: tuple[Path, int]) -> None:
    path, n = huge_trace
    hold = anyio.Event()
    async with _held(path, hold) as (browser, page, url, errors):
        await page.wait_for_function("window.__viewer && __viewer.ready", timeout=60_000)
        first = await page.evaluate(_PICTURE)
        assert not first["complete"] and first["total"] == n
        assert 0 < first["n"] < n  # drawn from the first frame alone
        assert first["drawn"] > 100 and first["critLane"] == -1  # critical path: last
        # every agent's lane is there at once, coarse (its agent's bar), in the overview too
        agents = len(first["lanes"]) - 1
        assert agents == await page.evaluate("__viewer.overviewLanes") > 3300

        hold.set()
        await page.wait_for_function("__viewer.complete && __viewer.summaryReady")
        streamed = await _picture(page)
        assert streamed["n"] == n and streamed["lanes"] == first["lanes"]
        # the first screen's lanes were whole in the first frame: nothing more to draw
        assert streamed["drawn"] == first["drawn"]
        streamed_finds = await _find_and_jump(page)

        whole = await browser.new_page(viewport={"width": 1400, "height": 1000})
        await whole.goto(f"{url}?whole")
        await whole.wait_for_function("window.__viewer && __viewer.complete", timeout=60_000)
        assert await whole.evaluate("__viewer.firstDrawSpans") == n
        assert await _picture(whole) == streamed
        assert await _find_and_jump(whole) == streamed_finds
        assert errors == []


def test_frames_decode_alone_and_together(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_synthetic_trace(path, agents=40, calls_per_agent=6, seed=5)
    frames: list[bytes] = []
    data = ViewerData.build(path, on_frame=frames.append)
    assert len(frames) >= 2 and b"".join(frames) == data.spans_bytes
    first = decode(frames[0])  # the first frame alone: lanes, tables and spans, no crit yet
    agents = data.trace.op.count(sc.OP_AGENT)
    assert first["n"] == len(data) and len(first["lanes"]) == 1 + agents
    assert "crit" not in first
    whole = decode(data.spans_bytes)
    assert whole["start"][: len(first["start"])] == first["start"]
    assert len(whole["crit"]) == len(whole["parent"]) == len(data)
    assert [whole["crit"][data.page[i]] for i in data.crit] == [1] * len(data.crit)

    small: list[bytes] = []  # frames cut smaller: the same spans in the same order
    stream_spans(data.trace, small.append, first=10)
    assert len(small) > 3 and decode(b"".join(small)) == whole


def _streams(frames: list[bytes]) -> list[list[bytes]]:
    """The frames cut into streams: each starts with a frame whose header has `n`."""
    out: list[list[bytes]] = []
    for f in frames:
        if "n" in decode(f):
            out.append([])
        out[-1].append(f)
    return out


HEAD = 1
"""The preview's size in these tests: a trace's first line."""


@pytest.fixture
def uncached(tmp_path: Path) -> tuple[Path, int]:
    """A trace copied from elsewhere (no column cache); with `head_bytes=1` (`HEAD`), its
    head is its first line."""
    path = tmp_path / "copied.jsonl"
    return path, write_synthetic_trace(path, agents=100, calls_per_agent=6, seed=7)


def test_a_trace_without_its_cache_is_previewed_from_its_head(
    uncached: tuple[Path, int],
) -> None:
    path, n = uncached
    frames: list[bytes] = []
    data = ViewerData.build(path, on_frame=frames.append, head_bytes=HEAD)
    preview, whole = _streams(frames)
    head = decode(b"".join(preview))
    assert head["preview"] and head["n"] == SPANS_PER_LINE < n and "crit" not in head
    assert b"".join(whole) == data.spans_bytes and not decode(whole[0])["preview"]
    again: list[bytes] = []  # the cache was written meanwhile: no preview next time
    ViewerData.build(path, on_frame=again.append, head_bytes=HEAD)
    assert _streams(again) == [whole]


async def test_page_draws_the_preview_then_the_whole_trace(uncached: tuple[Path, int]) -> None:
    path, n = uncached
    hold = anyio.Event()
    async with _held(path, hold, head_bytes=HEAD) as (browser, page, url, errors):
        await page.wait_for_function("window.__viewer && __viewer.ready", timeout=60_000)
        first = await page.evaluate("({p: __viewer.preview, n: __viewer.spanCount})")
        assert first == {"p": True, "n": SPANS_PER_LINE}
        hold.set()
        await page.wait_for_function("__viewer.complete && __viewer.summaryReady")
        assert not await page.evaluate("__viewer.preview")
        after = await _picture(page)
        assert after["n"] == n
        fresh = await browser.new_page(viewport={"width": 1400, "height": 1000})
        await fresh.goto(url)  # the payload is whole now: no preview
        await fresh.wait_for_function("window.__viewer && __viewer.complete")
        assert await fresh.evaluate("__viewer.firstDrawSpans") > SPANS_PER_LINE
        assert await _picture(fresh) == after
        assert errors == []
