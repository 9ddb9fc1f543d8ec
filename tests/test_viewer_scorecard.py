"""The viewer's scorecard panel in a real headless Chromium (Debian's): per provider/model
and per role, the figures `swarm trace scorecard` computes, on a simulated run over three
hosts of the same weights (one of them slowed 5x and failing part of its calls halfway).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from playwright.async_api import Locator

from benchmarks.bench_routing import _HOSTS
from swarm._analysis.loader import load_trace
from swarm._analysis.scorecard import scorecard
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm.config._shifts import Shift
from tests.test_viewer_browser import open_page

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def routed_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scorecard")
    slowed = Shift(at_call=20, speed=0.2, error_rate=0.3)
    shifted = (replace(_HOSTS[0], shifts=(slowed,)), *_HOSTS[1:])
    spec = SimSpec(
        agents=6,
        steps=48,
        shape="spine",
        virtual=True,
        traces_dir=out,
        hosts=shifted,
        sort="balanced",
    )
    run_simulation(spec)
    (trace,) = out.glob("*.jsonl")
    return trace


def _sec(v: float) -> str:
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


async def test_scorecard_panel_shows_the_trace_scorecard(
    routed_trace: Path, tmp_path: Path
) -> None:
    shot_dir = tmp_path
    card = scorecard(load_trace(routed_trace))
    assert len(card["by_candidate"]) >= 3  # the hosts, and the planner's provider
    async with open_page(routed_trace) as opened:
        page = opened.page
        await page.wait_for_function("window.__scorecard && window.__scorecard.ready")
        panel = page.locator("[data-testid=scorecard]")
        for group, rows in (("provider/model", "by_candidate"), ("role", "by_role")):
            table = panel.locator(f'table[data-group="{group}"]')
            assert await table.locator("tr[data-name]").count() == len(card[rows])
            for name, row in card[rows].items():
                tr = table.locator(f'tr[data-name="{name}"]')

                async def cell(key: str, tr: Locator = tr) -> str:
                    return await tr.locator(f'td[data-key="{key}"]').inner_text()

                assert await cell("calls") == str(row["calls"])
                assert await cell("ttft_p50_s") == _sec(row["ttft_p50_s"])
                assert await cell("ttft_p99_s") == _sec(row["ttft_p99_s"])
                tok_s = row["tokens_per_s"]  # 0: no stream was timed, shown as such
                assert await cell("tokens_per_s") == (f"{tok_s:.0f}" if tok_s else "–")
                assert await cell("error_rate") == f"{row['error_rate'] * 100:.1f} %"
                assert await cell("rate_limited_rate") == f"{row['rate_limited_rate'] * 100:.1f} %"
                assert await cell("usd_per_mtok") == f"${row['usd_per_mtok']:.3f}"
                assert await cell("cost_share") == f"{row['cost_share'] * 100:.1f} %"
        fast = panel.locator('tr[data-name="fast/cerebras/llama-3.3-70b"] td[data-key=error_rate]')
        assert card["by_candidate"]["fast/cerebras/llama-3.3-70b"]["error_rate"] > 0
        assert await fast.get_attribute("class") == "bad"  # the shift's failures stand out
        await page.locator("[data-testid=scorecard]").screenshot(path=str(shot_dir / "card.png"))
        assert {"coder", "planner"} <= set(
            await page.evaluate("Object.keys(__scorecard.card.by_role)")
        )
        assert "/api/scorecard" in " ".join(opened.requests)
        assert not opened.errors, opened.errors
