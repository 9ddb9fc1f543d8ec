"""The slowest calls and waits, and labels that stay on their rows, in a real headless
Chromium (Debian's): the demo run's trace, in a window narrow enough to squeeze the
panels."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swarm._tracing import semconv as sc
from swarm._viewer.data import ViewerData
from tests.test_viewer_browser import open_page

pytestmark = pytest.mark.browser

DEMO = Path(__file__).parent.parent / "traces" / "examples" / "demo.jsonl"
_SHOWN = """() => { const T = __slowest, C = __viewer.columns();
    return T.shown.map((i) => ({i, dur: C.end[i] - C.start[i], start: C.start[i],
        provider: C.providers[C.provider[i]], kind: C.kinds[C.kind[i]]})); }"""
_WRAPPED = """() => [...document.querySelectorAll(
        '.ledger-legend > span, .crit-row > span, .slowest td')]
    .filter((e) => e.offsetParent !== null)
    .filter((e) => e.getClientRects().length > 1 || e.scrollHeight > e.clientHeight + 1
        || e.getBoundingClientRect().height > 24)
    .map((e) => e.textContent)"""


async def test_slowest_table_sorts_filters_and_jumps(tmp_path: Path) -> None:
    trace = tmp_path / "demo.jsonl"
    shutil.copyfile(DEMO, trace)
    data = ViewerData.build(trace)
    timed = {sc.OP_CHAT, sc.OP_TOOL, "wait"}
    spans = [p for p, i in enumerate(data.order) if data.trace.op[i] in timed]
    providers = {data.trace.provider[data.order[p]] for p in spans} - {""}
    async with open_page(trace, width=400) as opened:
        page = opened.page
        await page.wait_for_function("__slowest.ready")
        assert await page.evaluate("__slowest.matched") == len(spans)
        rows = await page.evaluate(_SHOWN)
        durations = [r["dur"] for r in rows]
        assert durations == sorted(durations, reverse=True) and len(rows) > 5
        # the longest of all: nothing longer among the spans the table covers
        longest = max(data.trace.duration_s(data.order[p]) for p in spans) * 1e3
        assert abs(durations[0] - longest) < 1e-3

        await page.click("[data-testid=slowest] th[data-sort=start]")
        starts = [r["start"] for r in await page.evaluate(_SHOWN)]
        assert starts == sorted(starts, reverse=True)
        await page.click("[data-testid=slowest] th[data-sort=start]")
        starts = [r["start"] for r in await page.evaluate(_SHOWN)]
        assert starts == sorted(starts)

        provider = sorted(providers)[0]
        await page.select_option("[data-testid=slowest-provider]", provider)
        await page.select_option("[data-testid=slowest-kind]", "model call")
        filtered = await page.evaluate(_SHOWN)
        assert filtered and {(r["provider"], r["kind"]) for r in filtered} == {(provider, "chat")}

        first = filtered[0]["i"]
        await page.click(f"[data-testid=slowest] tr[data-span='{first}']")
        await page.wait_for_function(f"__viewer.selected === {first}")
        name = data.trace.name[data.order[first]]
        await page.wait_for_function(
            "(n) => document.getElementById('details').textContent.includes(n)", arg=name
        )
        assert await page.evaluate(_WRAPPED) == []  # every label on one line, its own
        assert opened.errors == []
