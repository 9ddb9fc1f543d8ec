"""How fast the trace viewer shows a large run, in headless Chromium.

    python -m benchmarks.bench_viewer [--json] [--sizes 10000,100000,1000000] [--runs 3]
        [--trace PATH] [--baseline DIR] [--live-agents 300] [--no-live]

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
  cold_first_draw_s  the same as first_draw_s for a trace copied from elsewhere (its
                 column cache deleted): the page draws a preview of its head while the
                 whole file is parsed; baseline in the same run: `cold_whole_first_draw_s`,
                 the same with the preview turned off (the page waits for the parse)
  scorecard_s    the scorecard panel's figures (`/api/scorecard`) from the loaded trace;
                 baseline: `scorecard_attrs_s`, decoding every model call's attributes
                 from the file, which is what the scorecard did before it read columns

Then, unless --no-live, the live view (`solve --view`) on `benchmarks.bench_solve`'s
simulated workload with --live-agents subtasks and agents, run twice in this process:
plain, then followed by the viewer with a page open in Chromium. It reports
`live.lag_ms` (p50/p95/p99/max over every span: from the span's end to the page having
drawn it, measured by the page) and the coordinator's CPU per model call without and with
the viewer (`cpu_ms_per_call`, `view_cpu_ms_per_call`, their ratio `view_cpu_ratio`).

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
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from playwright.async_api import Page, async_playwright

from benchmarks import bench_solve
from swarm._analysis import load_trace, loader
from swarm._analysis._colcache import cache_path
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._tracing import semconv as sc
from swarm._viewer.chromium import CHROMIUM, CHROMIUM_ARGS
from swarm._viewer.data import ViewerData
from swarm._viewer.scorecard import scorecard_json
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
    t, cpu = time.perf_counter(), time.process_time()
    scorecard_json(data.trace)
    scorecard_s, scorecard_cpu_s = time.perf_counter() - t, time.process_time() - cpu
    t = time.perf_counter()
    for i in range(len(data.trace)):
        if data.trace.op[i] == sc.OP_CHAT:
            data.trace.attributes(i)
    scorecard_attrs_s = time.perf_counter() - t
    browser = [anyio.run(_browser_run, path) for _ in range(max(1, runs))]
    med = {k: statistics.median(r[k] for r in browser) for k in browser[0]}
    cold = []
    for _ in range(max(1, runs)):
        cache_path(path).unlink()
        cold.append(anyio.run(_browser_run, path)["first_draw_s"])
    cache_path(path).unlink()
    head, loader.HEAD_BYTES = loader.HEAD_BYTES, 1 << 62  # no preview: the old way
    try:
        whole = anyio.run(_browser_run, path)["first_draw_s"]
    finally:
        loader.HEAD_BYTES = head
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
        "scorecard_s": round(scorecard_s, 3),
        "scorecard_cpu_s": round(scorecard_cpu_s, 3),
        "scorecard_attrs_s": round(scorecard_attrs_s, 3),
        "cold_first_draw_s": round(statistics.median(cold), 3),
        "cold_whole_first_draw_s": round(whole, 3),
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
    print(f"cold (copied) -> draw {r['cold_first_draw_s']:.2f} s", end="")
    print(f"   (without the preview: {r['cold_whole_first_draw_s']:.2f} s)")
    print(f"scorecard             {r['scorecard_s']:.2f} s", end="")
    print(f"   (from the file's attributes: {r['scorecard_attrs_s']:.2f} s)")
    if "baseline" in r:
        b = r["baseline"]
        print(f"baseline start->draw  {b.get('first_draw_s', b)} s")


async def followed(
    w: bench_solve.Workload, while_running: Callable[[Page], Awaitable[None]] | None = None
) -> dict[str, Any]:
    """The workload's solve followed live by the viewer and a Chromium page: the solve's
    figures and the page's lag from each span's end to its drawing (`while_running`: what
    else to do with the page while the run goes, such as a screenshot)."""
    where: list[Path] = []
    known, ended = anyio.Event(), anyio.Event()
    page_figures: dict[str, Any] = {}

    def on_trace(path: Path) -> None:
        where.append(path)
        known.set()

    async def watch() -> None:
        await known.wait()
        async with (
            serve_viewer(where[0], follow=True, ended=ended) as url,
            async_playwright() as pw,
        ):
            browser = await pw.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            try:
                page = await browser.new_page(viewport={"width": 1600, "height": 1000})
                await page.goto(url)
                if while_running is not None:
                    await while_running(page)
                await ended.wait()
                await page.wait_for_function("__live.done", timeout=600_000, polling=100)
                page_figures.update(
                    await page.evaluate("({lags: __live.lag_ms, updates: __live.updates})")
                )
            finally:
                await browser.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        try:
            result = await bench_solve.run(w, on_trace)
        finally:
            ended.set()
    lags = sorted(page_figures.get("lags", []))

    def q(p: float) -> float | None:
        return round(lags[min(len(lags) - 1, int(len(lags) * p))], 1) if lags else None

    result["lag_ms"] = {"p50": q(0.5), "p95": q(0.95), "p99": q(0.99), "max": q(1.0)}
    result["lag_spans"] = len(lags)
    result["page_updates"] = page_figures.get("updates")
    return result


def live(agents: int) -> dict[str, Any]:
    """The live view's delay and its cost to the run (see the module docstring)."""
    w = bench_solve.Workload(subtasks=agents, max_agents=agents, merge=f"check_slots = {agents}")
    plain = anyio.run(bench_solve.run, w)
    with tempfile.TemporaryDirectory() as traces:  # the viewer loads it after the run
        viewed = anyio.run(followed, replace(w, traces=traces))
    return {
        "agents": agents,
        "lag_ms": viewed["lag_ms"],
        "lag_spans": viewed["lag_spans"],
        "page_updates": viewed["page_updates"],
        "wall_s": plain["wall_s"],
        "view_wall_s": viewed["wall_s"],
        "calls": plain["calls"],
        "cpu_ms_per_call": plain["cpu_ms_per_call"],
        "view_cpu_ms_per_call": viewed["cpu_ms_per_call"],
        "view_cpu_ratio": round(viewed["cpu_ms_per_call"] / plain["cpu_ms_per_call"], 3),
        "status": [plain["status"], viewed["status"]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument(
        "--sizes", default="100000", help="span counts, comma-separated ('': the live view only)"
    )
    ap.add_argument("--runs", type=int, default=3, help="browser runs (median reported)")
    ap.add_argument("--trace", type=Path, help="use this trace instead of synthetic ones")
    ap.add_argument("--baseline", type=Path, help="older checkout to measure alongside")
    ap.add_argument("--live-agents", type=int, default=300, help="the live view's run")
    ap.add_argument("--no-live", action="store_true", help="skip the live view's runs")
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        sizes = [0] if args.trace else [int(float(s)) for s in args.sizes.split(",") if s]
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
    if not args.no_live:
        load = [round(os.getloadavg()[0], 1)]
        result = {"live": live(args.live_agents)}
        result["load_avg"] = [*load, round(os.getloadavg()[0], 1)]
        print(json.dumps(result) if args.json else json.dumps(result, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
