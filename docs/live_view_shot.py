"""How `docs/live-view.png` is made: a screenshot of `swarm solve --view` at 50 agents.

    python -m docs.live_view_shot [--agents 50] [--out docs/live-view.png]

Runs `benchmarks.bench_solve`'s simulated workload (50 subtasks, 50 agents, each check a
two-second sleep) followed live by the viewer, as `solve --view` does, and takes the
page in Debian's Chromium once every agent has a lane and the finish has been estimated
twice, while the run still goes. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import anyio
from playwright.async_api import Page

from benchmarks import bench_solve
from benchmarks.bench_viewer import followed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("docs/live-view.png"))
    args = ap.parse_args()
    n = args.agents
    w = bench_solve.Workload(subtasks=n, max_agents=n, check_s=2.0, merge=f"check_slots = {n}")

    async def shoot(page: Page) -> None:
        await page.wait_for_function(
            f"__live.lanes >= {n} && __live.estimates.length >= 2", timeout=600_000
        )
        await page.locator("[data-testid=live]").screenshot(path=str(args.out))
        print(f"wrote {args.out}")

    with tempfile.TemporaryDirectory() as traces:  # the viewer loads it once the run ends
        anyio.run(followed, replace(w, traces=traces), shoot)


if __name__ == "__main__":
    main()
