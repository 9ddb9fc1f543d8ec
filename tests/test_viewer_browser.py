"""The viewer page in a real headless Chromium (Debian's; never a downloaded browser).

One test drives the whole page over a ~20k-span trace: first draw, pixels on the canvas,
hover/click details, zoom and pan, the critical-path, ledger and histogram panels, a
what-if prediction, and a screenshot. One finds its way around a 100k-span run: first
draw, the overview strip, search, grouping, colouring, first-token marks and the jump to
the critical path. Another draws a real run's merge queue: its panel, its batches in their
own lane, labelled."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, async_playwright

from swarm._analysis.loader import load_trace
from swarm._analysis.merges import merge_breakdown
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._tracing import semconv as sc
from swarm._viewer.chromium import CHROMIUM, CHROMIUM_ARGS
from swarm._viewer.serve import serve_viewer
from tests.test_analysis_merges import run_with_a_culprit

pytestmark = pytest.mark.browser


def require_chromium(path: Path = CHROMIUM) -> str:
    """The browser's path; a missing browser fails the test (it must not skip silently)."""
    if not path.is_file():
        pytest.fail(f"Chromium not found at {path}: run .ci/install to install it", False)
    return str(path)


def test_missing_chromium_fails_with_install_hint(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"\.ci/install"):
        require_chromium(tmp_path / "chromium")


@pytest.fixture(scope="module")
def large_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("browser") / "large.jsonl"
    n = write_synthetic_trace(path, agents=500, calls_per_agent=12, seed=7)
    return path, n


async def _js(page: Page, expr: str, arg: Any = None) -> Any:
    return await page.evaluate(expr, arg)


@dataclass
class Opened:
    page: Page
    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@asynccontextmanager
async def open_page(trace: Path, width: int = 1400) -> AsyncIterator[Opened]:
    """The viewer on `trace` in headless Chromium, loaded and drawn (`width`: the window's)."""
    executable = require_chromium()
    async with serve_viewer(trace) as url, async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = await browser.new_page(viewport={"width": width, "height": 1000})
            opened = Opened(page, url)
            page.on("pageerror", lambda e: opened.errors.append(str(e)))
            page.on(
                "console", lambda m: opened.errors.append(m.text) if m.type == "error" else None
            )
            page.on("request", lambda r: opened.requests.append(r.url))
            await page.goto(url)
            await page.wait_for_function(
                "window.__viewer && window.__viewer.complete && window.__viewer.summaryReady",
                timeout=60_000,
            )
            yield opened
        finally:
            await browser.close()


async def test_page_draws_and_answers(large_trace: tuple[Path, int], tmp_path: Path) -> None:
    path, n = large_trace
    assert n >= 15_000
    async with open_page(path) as opened:
        page, url, requests = opened.page, opened.url, opened.requests
        v = await _js(
            page,
            "({n: __viewer.spanCount, drawn: __viewer.drawnCount, first: __viewer.firstDrawMs})",
        )
        assert v["n"] == n
        assert v["drawn"] > 0 and v["first"] > 0

        # the canvas is not blank: many pixels differ from the background, in many colours
        pixels = await _js(
            page,
            """() => {
            const c = document.getElementById('timeline');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let lit = 0; const colours = new Set();
            for (let i = 0; i < d.length; i += 4) {
                if (Math.abs(d[i] - 11) + Math.abs(d[i+1] - 14) + Math.abs(d[i+2] - 19) > 30) {
                    lit++; colours.add((d[i] << 16) | (d[i+1] << 8) | d[i+2]);
                }
            }
            return {lit, colours: colours.size, total: d.length / 4};
        }""",
        )
        assert pixels["lit"] > pixels["total"] * 0.05, pixels
        assert pixels["colours"] > 6, pixels

        # panels: critical path list, ledger bars, per-tier histograms, legend
        assert await page.locator("[data-testid=critical-path] .crit-row").count() > 0
        assert await page.locator("[data-testid=ledger] .ledger-bar div").count() >= 2
        assert await page.locator("[data-testid=histograms] canvas").count() >= 4
        assert "critical path" in await page.locator("[data-testid=legend]").inner_text()
        assert await page.locator("[data-testid=merge-queue]").is_hidden()  # no merges

        # click a model call: the details panel shows its attributes and figures
        canvas = page.locator("#timeline")
        box = await canvas.bounding_box()
        assert box is not None
        target = await _js(
            page,
            """() => {
            const V = __viewer;
            for (let i = 0; i < V.spanCount; i++) if (V.kindName(i) === 'chat') {
                V.reveal(i); return i;
            }
            return -1;
        }""",
        )
        assert target >= 0
        await page.wait_for_timeout(50)  # one animation frame
        center = await _js(page, "(i) => __viewer.spanCenter(i)", target)
        assert center is not None and center["w"] > 20
        await page.mouse.move(box["x"] + center["x"], box["y"] + center["y"])
        await page.wait_for_selector("#tooltip:not([hidden])")
        assert "chat" in await page.locator("#tooltip").inner_text()
        await page.mouse.click(box["x"] + center["x"], box["y"] + center["y"])
        details = page.locator("[data-testid=details]")
        await details.locator("[data-testid=attributes]").wait_for()
        assert await _js(page, "__viewer.selected") == target
        text = await details.inner_text()
        for key in (sc.OUTPUT_TOKENS, sc.INPUT_TOKENS, sc.TIER, sc.COST_USD):
            assert key in text, key
        assert "TTFT" in text and "tok/s" in text and "output tokens" in text

        # zoom with the wheel, then pan by dragging: the view moves and is redrawn
        before = await _js(page, "__viewer.view()")
        frames = await _js(page, "__viewer.frames")
        await page.mouse.wheel(0, 400)
        await page.wait_for_function(f"__viewer.frames > {frames}")
        zoomed = await _js(page, "__viewer.view()")
        assert zoomed["t1"] - zoomed["t0"] > before["t1"] - before["t0"]
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        await page.mouse.move(x, y)
        await page.mouse.down()
        await page.mouse.move(x - 200, y - 120, steps=4)
        await page.mouse.up()
        panned = await _js(page, "__viewer.view()")
        assert panned["t0"] > zoomed["t0"] and panned["scrollY"] > zoomed["scrollY"]
        assert await _js(page, "__viewer.drawnCount") > 0

        # a row of the critical-path list selects its span
        row = page.locator("[data-testid=critical-path] .crit-row").first
        want = int(await row.get_attribute("data-span") or -1)
        await row.click()
        await page.wait_for_function(f"__viewer.selected === {want}")
        await details.locator("[data-testid=attributes]").wait_for()

        # what-if: another speed-tier model, fewer agents
        await page.select_option("#wf-speed", index=1)
        await page.fill("#wf-max", "8")
        await page.click("#wf-run")
        result = page.locator("[data-testid=whatif-result]")
        await page.wait_for_function("__viewer.whatif != null", timeout=30_000)
        assert "predicted wall-clock" in await result.inner_text()

        shot = tmp_path / "viewer.png"
        await page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 20_000
        assert opened.errors == []
        assert all(r.startswith(url) or r.startswith("data:") for r in requests), requests


async def _lit(page: Page, canvas: str) -> int:
    """Pixels of a canvas that differ from the page background."""
    lit: int = await _js(
        page,
        """(id) => {
        const c = document.getElementById(id), d = c.getContext('2d')
            .getImageData(0, 0, c.width, c.height).data;
        let lit = 0;
        for (let i = 0; i < d.length; i += 4)
            if (Math.abs(d[i] - 11) + Math.abs(d[i+1] - 14) + Math.abs(d[i+2] - 19) > 30) lit++;
        return lit;
    }""",
        canvas,
    )
    return lit


async def test_finding_the_culprit_in_100k_spans(huge_trace: tuple[Path, int]) -> None:
    path, n = huge_trace
    assert n >= 100_000
    async with open_page(path) as opened:
        page = opened.page
        first = await _js(page, "({n: __viewer.spanCount, drawn: __viewer.drawnCount})")
        assert first["n"] == n and first["drawn"] > 100

        # lanes by subtask and role; the overview strip shows every lane, lit
        assert await _js(page, "__viewer.laneLabel(1)") == "t0 · planner"
        assert re.fullmatch(r"t\d+ · coder", await _js(page, "__viewer.laneLabel(2)"))
        assert await _js(page, "__viewer.groups()") == []  # not grouped yet
        assert await _js(page, "__viewer.overviewLanes") >= 3300
        assert await _lit(page, "overview") > 5000
        # clicking the overview's bottom scrolls the timeline to the last lanes
        ov = await page.locator("[data-testid=overview]").bounding_box()
        assert ov is not None
        await page.mouse.click(ov["x"] + ov["width"] / 2, ov["y"] + ov["height"] - 2)
        await page.wait_for_function("__viewer.view().scrollY > 10000")

        # jump to the critical path: the lane holding most of it comes into view
        crit_lane = await _js(page, "__viewer.critLane")
        assert crit_lane >= 0
        assert not await _js(page, "(l) => __viewer.laneVisible(l)", crit_lane)
        await page.click("[data-testid=crit-focus]")
        await page.wait_for_function(f"__viewer.laneVisible({crit_lane})")

        # search: every span of one subtask, Enter goes to the first, shown and selected
        await page.fill("[data-testid=search]", "t2017 ·")
        await page.wait_for_function("__viewer.matchCount > 0")
        count = await _js(page, "__viewer.matchCount")
        assert 5 < count < 100
        assert "spans" in await page.locator("[data-testid=search-count]").inner_text()
        await page.press("[data-testid=search]", "Enter")
        await page.wait_for_function("__viewer.selected >= 0")
        chosen = await _js(page, "__viewer.laneName(__viewer.selected)")
        assert chosen.startswith("t2017 · ")
        assert await _js(page, "__viewer.laneVisible(__viewer.laneOf(__viewer.selected))")

        # zoomed in on one of its model calls: first-token marks on the chat bars
        await _js(
            page,
            """() => { const V = __viewer, l = V.laneOf(V.selected);
            for (let i = 0; i < V.spanCount; i++)
                if (V.laneOf(i) === l && V.kindName(i) === 'chat') { V.reveal(i); return; } }""",
        )
        await page.wait_for_function("__viewer.ttftMarks > 0")

        # grouping by role and by provider; colouring by provider
        await page.select_option("[data-testid=group-by]", "role")
        groups = await _js(page, "__viewer.groups()")
        assert {"role · coder", "role · planner"} <= set(groups)
        await page.select_option("[data-testid=group-by]", "provider")
        assert all(g.startswith("provider · ") for g in await _js(page, "__viewer.groups()"))
        await page.select_option("[data-testid=color-by]", "provider")
        legend = await page.locator("[data-testid=legend]").inner_text()
        assert "chat · " in legend and "first token" in legend

        # the ledger's two columns say what they are
        columns = await page.locator("[data-testid=ledger-columns]").inner_text()
        assert "critical path" in columns and "whole run (shared)" in columns
        assert opened.errors == []


@pytest.fixture(scope="module")
def merge_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    report, _ = run_with_a_culprit(tmp_path_factory.mktemp("merges"))
    assert report.status == "done" and report.trace is not None, report
    return Path(report.trace)


async def test_merge_queue_panel_and_batches(merge_trace: Path) -> None:
    async with open_page(merge_trace) as opened:
        page = opened.page
        panel = page.locator("[data-testid=merge-queue]")
        assert await panel.is_visible()
        text = await panel.inner_text()
        m = merge_breakdown(load_trace(merge_trace))  # the figures the page must show
        assert m is not None
        green, red_n, cancelled = (m.by_outcome[k] for k in ("green", "red", "cancelled"))
        assert f"{m.batches} ({green} green, {red_n} red, {cancelled} cancelled)" in text
        assert "waiting for a check slot" in text and "checking" in text
        assert f"max {m.size_max}" in text and f"split rounds\t{m.splits}" in text
        assert await panel.locator(".ledger-bar div").count() >= 2  # checking, git
        legend = await page.locator("[data-testid=legend]").inner_text()
        assert "merge batch · red" in legend
        assert ("merge split" in legend) == (m.splits > 0)

        # the red batch sits in the merge queue lane; hovering it names size and outcome
        red = await _js(
            page,
            """() => {
            const V = __viewer;
            const i = V.mergeSpans.find((j) => V.mergeLabel(j).includes('red'));
            V.reveal(i); return i;
        }""",
        )
        assert await _js(page, "(i) => __viewer.laneName(i)", red) == "merge queue"
        await page.wait_for_timeout(50)  # one animation frame
        center = await _js(page, "(i) => __viewer.spanCenter(i)", red)
        box = await page.locator("#timeline").bounding_box()
        assert box is not None and center is not None
        await page.mouse.move(box["x"] + center["x"], box["y"] + center["y"])
        await page.wait_for_selector("#tooltip:not([hidden])")
        assert " · red" in await page.locator("#tooltip").inner_text()
        assert opened.errors == []
