"""How fast the trace viewer shows a large run, in headless Chromium.

    python -m benchmarks.bench_viewer [--json] [--agents 3300] [--calls 12] [--runs 3]
        [--trace PATH]

Writes a synthetic trace (~100k spans by default; or uses --trace), then measures:

  build_s        ViewerData.build: load, critical path, summary, ledger, columnar payload
  payload_bytes  size of /api/spans (and of /api/summary)
  first_draw_s   server start (including the build) -> the page reports its first drawn
                 frame (`window.__viewer.ready`), with Chromium already running
  page_draw_ms   time from navigation start to the first frame, as the page measures it
  redraw_ms      one full-view redraw, and one zoomed-in redraw (median of 10)

Chromium is Debian's (/usr/bin/chromium); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from playwright.async_api import async_playwright

from swarm.analysis.synthetic import write_synthetic_trace
from swarm.viewer.chromium import CHROMIUM, CHROMIUM_ARGS
from swarm.viewer.data import ViewerData
from swarm.viewer.serve import serve_viewer


async def _browser_run(path: Path) -> dict[str, Any]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = await browser.new_page(viewport={"width": 1600, "height": 1000})
            started = time.perf_counter()
            async with serve_viewer(path) as url:
                served = time.perf_counter()
                await page.goto(url)
                await page.wait_for_function(
                    "window.__viewer && window.__viewer.ready", timeout=300_000, polling=10
                )
                first = time.perf_counter()
                v = await page.evaluate("""() => {
                    const V = window.__viewer, full = [], zoom = [];
                    for (let k = 0; k < 10; k++) full.push(V.drawNow());
                    const drawnFull = V.drawnCount;
                    V.reveal(Math.floor(V.spanCount / 2));
                    for (let k = 0; k < 10; k++) zoom.push(V.drawNow());
                    const med = (a) => a.sort((x, y) => x - y)[a.length >> 1];
                    return {spans: V.spanCount, drawn: drawnFull, pageMs: V.firstDrawMs,
                            fullMs: med(full), zoomMs: med(zoom), drawnZoom: V.drawnCount};
                }""")
        finally:
            await browser.close()
    return {
        "serve_s": served - started,
        "first_draw_s": first - started,
        "page_draw_ms": v["pageMs"],
        "redraw_full_ms": v["fullMs"],
        "redraw_zoom_ms": v["zoomMs"],
        "spans": v["spans"],
        "drawn_full": v["drawn"],
        "drawn_zoom": v["drawnZoom"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--agents", type=int, default=3300)
    ap.add_argument("--calls", type=int, default=12, help="model calls per agent")
    ap.add_argument("--runs", type=int, default=3, help="browser runs (median reported)")
    ap.add_argument("--trace", type=Path, help="use this trace instead of a synthetic one")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.trace or Path(tmp) / "bench.jsonl"
        if args.trace is None:
            write_synthetic_trace(path, agents=args.agents, calls_per_agent=args.calls)
        t = time.perf_counter()
        data = ViewerData.build(path)
        build_s = time.perf_counter() - t
        trace_bytes = path.stat().st_size
        runs = [anyio.run(_browser_run, path) for _ in range(max(1, args.runs))]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    result = {
        "spans": len(data),
        "trace_bytes": trace_bytes,
        "build_s": round(build_s, 3),
        "payload_bytes": len(data.spans_json),
        "summary_bytes": len(data.summary_json),
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in med.items()},
        "runs": len(runs),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"spans                 {result['spans']:,}")
        print(f"payload build         {result['build_s']:.2f} s")
        print(f"/api/spans            {result['payload_bytes'] / 1e6:.1f} MB")
        print(f"/api/summary          {result['summary_bytes'] / 1e3:.1f} kB")
        print(f"server start          {result['serve_s']:.2f} s (includes the build)")
        print(f"server start -> draw  {result['first_draw_s']:.2f} s")
        print(f"page nav -> draw      {result['page_draw_ms']:.0f} ms")
        print(
            f"redraw, full view     {result['redraw_full_ms']:.1f} ms "
            f"({result['drawn_full']:,} rects)"
        )
        print(
            f"redraw, zoomed in     {result['redraw_zoom_ms']:.1f} ms "
            f"({result['drawn_zoom']:,} rects)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
