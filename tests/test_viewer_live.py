"""`swarm solve --view` in a real headless Chromium (Debian's): the demo run on the
built-in simulator, followed live, then the ordinary viewer of its trace.

The page must show lanes filling in and the estimated finish moving before the run ends,
and, once it has ended, be the same page `swarm trace view` serves for the trace."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from playwright.async_api import Page, async_playwright

from swarm._viewer.chromium import CHROMIUM_ARGS
from swarm._viewer.serve import serve_viewer
from tests.test_viewer_browser import require_chromium

pytestmark = pytest.mark.browser

ROOT = Path(__file__).parent.parent
_FAST = '[providers.sim]\nkind = "sim"\ntime_scale = 0.1\n'
_FINGERPRINT = """() => ({
    spans: __viewer.spanCount,
    stats: document.getElementById('stats').textContent,
    crit: document.getElementById('crit-total').textContent,
    ledger: document.getElementById('ledger').textContent,
    live: document.getElementById('live') !== null,
    body: [...document.body.children].map((e) => e.tagName + '#' + e.id).join(','),
})"""


async def _url(process: Process, seen: list[str]) -> str:
    """The live view's URL, from the run's stderr."""
    assert process.stderr is not None
    buf = ""
    async for chunk in process.stderr:
        buf += chunk.decode()
        seen.append(chunk.decode())
        m = re.search(r"live view: (http://127\.0\.0\.1:\d+/)", buf)
        if m:
            return m.group(1)
    raise AssertionError(f"no URL from solve --view: {buf}")


async def _final(page: Page) -> dict[str, Any]:
    await page.wait_for_function(
        "window.__viewer && window.__viewer.complete && window.__viewer.summaryReady",
        timeout=120_000,
    )
    result: dict[str, Any] = await page.evaluate(_FINGERPRINT)
    return result


async def test_solve_view_shows_the_run_live_then_its_trace(tmp_path: Path) -> None:
    executable = require_chromium()
    cmd = [sys.executable, "-m", "swarm", "solve", str(ROOT / "tasks" / "refactor.md")]
    cmd += ["--view", "--no-browser", "--json", "--state-dir", str(tmp_path / "state")]
    cmd += ["--traces-dir", str(tmp_path / "traces")]
    # the simulator at a tenth of its latencies: seconds of run, still several estimates
    (tmp_path / "swarm.toml").write_text(_FAST)
    stderr: list[str] = []
    async with await anyio.open_process(cmd, cwd=tmp_path) as process:
        try:
            with anyio.fail_after(60):
                url = await _url(process, stderr)
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=executable, headless=True, args=CHROMIUM_ARGS
                )
                page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                await page.goto(url)
                # lanes fill in, and the estimate moves, while the run still goes
                await page.wait_for_function(
                    "__live.lanes >= 2 && !__live.done", timeout=60_000, polling=100
                )
                await page.wait_for_function(
                    "new Set(__live.estimates.map((e) => e[0] + e[1])).size >= 2 && !__live.done",
                    timeout=60_000,
                    polling=100,
                )
                moving = await page.evaluate("__live.estimate")
                assert moving.startswith("estimated finish: in ")
                live = await _final(page)
                assert not live["live"]  # the live section has gone
                [trace] = (tmp_path / "traces").glob("*.jsonl")
                async with serve_viewer(trace) as plain_url:
                    plain = await browser.new_page(viewport={"width": 1400, "height": 1000})
                    await plain.goto(plain_url)
                    assert await _final(plain) == live  # the same page as `trace view`
                assert errors == []
                await browser.close()
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            await process.wait()
        assert process.stdout is not None
        out = "".join([chunk.decode() async for chunk in process.stdout])
    report = json.loads(out) if out.strip().startswith("{") else {}
    assert report.get("status") == "done", "".join(stderr)[-2000:]
