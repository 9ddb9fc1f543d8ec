"""How fast the trace viewer shows a large run, in headless Chromium.

    python -m benchmarks.bench_viewer [--json] [--sizes 10000,100000,1000000] [--runs 3]
        [--trace PATH] [--baseline DIR]

For each size, writes a synthetic trace of about that many spans (or uses --trace), loads
it once as a finished run does (which writes its column cache: `cache_s`), then measures:

  build_s        ViewerData.build: load from the cache, lanes, span frames, critical path
  first_frame_s  ViewerData.build's start -> its first span frame is encoded (the page
                 draws from it while the rest is built and sent)
  *_cpu_s        the same in CPU time (build_cpu_s, first_frame_cpu_s): what a loaded
                 machine's wall time hides
  summary_s      ViewerData.summarize: summary, ledgers, histograms (after the first draw)
  payload_bytes  size of /api/spans (and of /api/summary)
  first_draw_s   server start (including the load) -> the page reports its first drawn
                 frame (`window.__viewer.ready`), with Chromium already running
  first_spans    spans the page had at its first draw (of `spans`)
  complete_draw_s  server start -> the page has drawn every span and the critical path
                 (`window.__viewer.complete`)
  page_draw_ms   time from navigation start to the first frame, as the page measures it
  redraw_ms      one full-view redraw, and one zoomed-in redraw (median of 10)

--baseline DIR runs DIR's own `benchmarks.bench_viewer` (a checkout of older code, with
PYTHONPATH=DIR) on a copy of the same trace in the same run, and reports its figures under
`baseline`. `load_avg` is the machine's 1-minute load average before and after: the
figures are wall time, so read them against it. Chromium is Debian's; nothing is
downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from playwright.async_api import async_playwright

from swarm._analysis import load_trace
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._viewer.chromium import CHROMIUM, CHROMIUM_ARGS
from swarm._viewer.data import ViewerData
from swarm._viewer.serve import serve_viewer

SPANS_PER_AGENT = 30.37
"""Spans per agent of the synthetic trace at 12 calls per agent (100,220 for 3,300)."""


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
                    "window.__viewer && window.__viewer.ready", timeout=600_000, polling=10
                )
                first = time.perf_counter()
                await page.wait_for_function("__viewer.complete", timeout=600_000, polling=10)
                complete = time.perf_counter()
                v = await page.evaluate("""() => {
                    const V = window.__viewer, full = [], zoom = [];
                    for (let k = 0; k < 10; k++) full.push(V.drawNow());
                    const drawnFull = V.drawnCount;
                    V.reveal(Math.floor(V.spanCount / 2));
                    for (let k = 0; k < 10; k++) zoom.push(V.drawNow());
                    const med = (a) => a.sort((x, y) => x - y)[a.length >> 1];
                    return {spans: V.spanCount, drawn: drawnFull, pageMs: V.firstDrawMs,
                            firstSpans: V.firstDrawSpans,
                            fullMs: med(full), zoomMs: med(zoom), drawnZoom: V.drawnCount};
                }""")
                await page.wait_for_function(
                    "window.__viewer.summaryReady", timeout=600_000, polling=50
                )
        finally:
            await browser.close()
    return {
        "serve_s": served - started,
        "first_draw_s": first - started,
        "first_spans": v["firstSpans"],
        "complete_draw_s": complete - started,
        "page_draw_ms": v["pageMs"],
        "redraw_full_ms": v["fullMs"],
        "redraw_zoom_ms": v["zoomMs"],
        "spans": v["spans"],
        "drawn_full": v["drawn"],
        "drawn_zoom": v["drawnZoom"],
    }


def _baseline(old: Path, trace: Path, runs: int) -> dict[str, Any]:
    """The older checkout's own benchmark on `trace` (its JSON line, or the error)."""
    env = {**os.environ, "PYTHONPATH": str(old)}
    cmd = [sys.executable, "-m", "benchmarks.bench_viewer", "--json", "--trace", str(trace)]
    done = subprocess.run(
        [*cmd, "--runs", str(runs)], cwd=old, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(path: Path, runs: int) -> dict[str, Any]:
    """This checkout's figures for the trace at `path`."""
    t = time.perf_counter()
    load_trace(path)  # what the run does when it ends: writes the column cache
    cache_s = time.perf_counter() - t
    t, cpu = time.perf_counter(), time.process_time()
    frames: list[tuple[float, float]] = []

    def on_frame(_: bytes) -> None:
        frames.append((time.perf_counter() - t, time.process_time() - cpu))

    data = ViewerData.build(path, on_frame=on_frame)
    build_s, build_cpu_s = time.perf_counter() - t, time.process_time() - cpu
    t = time.perf_counter()
    data.summarize()
    summary_s = time.perf_counter() - t
    browser = [anyio.run(_browser_run, path) for _ in range(max(1, runs))]
    med = {k: statistics.median(r[k] for r in browser) for k in browser[0]}
    return {
        "spans": len(data),
        "trace_bytes": path.stat().st_size,
        "cache_s": round(cache_s, 3),
        "build_s": round(build_s, 3),
        "build_cpu_s": round(build_cpu_s, 3),
        "first_frame_s": round(frames[0][0], 3),
        "first_frame_cpu_s": round(frames[0][1], 3),
        "frames": len(frames),
        "summary_s": round(summary_s, 3),
        "payload_bytes": len(data.spans_bytes),
        "summary_bytes": len(data.summary_json),
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in med.items()},
        "runs": len(browser),
    }


def _print(r: dict[str, Any]) -> None:
    print(f"spans                 {r['spans']:,}   (load avg {r['load_avg']})")
    print(f"cache at run end      {r['cache_s']:.2f} s")
    print(f"span payload build    {r['build_s']:.2f} s   (summary after: {r['summary_s']:.2f} s)")
    print(f"/api/spans            {r['payload_bytes'] / 1e6:.1f} MB")
    print(f"first span frame      {r['first_frame_s']:.2f} s   ({r['frames']} frames)")
    print(f"  in CPU time         {r['first_frame_cpu_s']:.2f} s", end="")
    print(f"   (build: {r['build_cpu_s']:.2f} s)")
    print(f"server start -> draw  {r['first_draw_s']:.2f} s   ({r['first_spans']:,} spans)")
    print(f"start -> all drawn    {r['complete_draw_s']:.2f} s")
    print(f"page nav -> draw      {r['page_draw_ms']:.0f} ms")
    print(f"redraw full / zoomed  {r['redraw_full_ms']:.1f} / {r['redraw_zoom_ms']:.1f} ms")
    if "baseline" in r:
        b = r["baseline"]
        print(f"baseline start->draw  {b.get('first_draw_s', b)} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--sizes", default="100000", help="span counts, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="browser runs (median reported)")
    ap.add_argument("--trace", type=Path, help="use this trace instead of synthetic ones")
    ap.add_argument("--baseline", type=Path, help="older checkout to measure alongside")
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        sizes = [0] if args.trace else [int(float(s)) for s in args.sizes.split(",")]
        for size in sizes:
            load = [round(os.getloadavg()[0], 1)]
            path = args.trace or Path(tmp) / f"new-{size}" / "bench.jsonl"
            if not args.trace:
                path.parent.mkdir()
                agents = max(1, round(size / SPANS_PER_AGENT))
                write_synthetic_trace(path, agents=agents, calls_per_agent=12)
            result = measure(path, args.runs)
            if args.baseline:
                copy = Path(tmp) / f"old-{size}" / "bench.jsonl"
                copy.parent.mkdir()
                shutil.copyfile(path, copy)
                result["baseline"] = _baseline(args.baseline, copy, args.runs)
            result["load_avg"] = [*load, round(os.getloadavg()[0], 1)]
            results.append(result)
            if args.json:
                print(json.dumps(result), flush=True)
            else:
                _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
