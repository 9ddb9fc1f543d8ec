"""Time to write, load and analyse synthetic swarm traces of 10k, 100k and 1M spans.

    python benchmarks/bench_trace.py [--json] [--sizes 10000,100000,1000000]

Each size runs in a fresh subprocess so peak memory (max RSS) is per size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_SPANS_PER_AGENT = 25.6  # write_synthetic_trace with calls_per_agent=10, tools_per_call=1


def _one(spans: int, workdir: Path) -> dict[str, Any]:
    from swarm._analysis import critical_path, ledger, load_trace, summarize, whatif
    from swarm._analysis._colcache import cache_path
    from swarm._analysis.loader import JSON_PARSER
    from swarm._analysis.synthetic import write_synthetic_trace

    path = workdir / f"synthetic-{spans}.jsonl"
    t = time.perf_counter()
    written = write_synthetic_trace(
        path, agents=max(1, round(spans / _SPANS_PER_AGENT)), max_agents=64
    )
    write_s = time.perf_counter() - t
    t, cpu = time.perf_counter(), time.process_time()
    tr = load_trace(path)  # parses, then writes the column cache beside the file
    load_s, load_cpu_s = time.perf_counter() - t, time.process_time() - cpu
    t, cpu = time.perf_counter(), time.process_time()
    tr = load_trace(path)  # from the column cache
    cached_s, cached_cpu_s = time.perf_counter() - t, time.process_time() - cpu
    t = time.perf_counter()
    cp = critical_path(tr)
    cp_s = time.perf_counter() - t
    t = time.perf_counter()
    ledger(tr)
    ledger_s = time.perf_counter() - t
    t = time.perf_counter()
    summarize(tr)
    summary_s = time.perf_counter() - t
    t = time.perf_counter()
    wi = whatif(tr, set={"speed": "cerebras/llama-3.3-70b"})
    whatif_s = time.perf_counter() - t
    size = path.stat().st_size
    path.unlink()
    cache_path(path).unlink(missing_ok=True)
    return {
        "spans": written,
        "file_mb": round(size / 1e6, 1),
        "bytes_per_span": round(size / written),
        "write_s": round(write_s, 2),
        "load_s": round(load_s, 2),
        "load_cpu_s": round(load_cpu_s, 2),
        "load_cached_s": round(cached_s, 2),
        "load_cached_cpu_s": round(cached_cpu_s, 2),
        "json_parser": JSON_PARSER,
        "critical_path_s": round(cp_s, 3),
        "critical_path_steps": len(cp),
        "ledger_s": round(ledger_s, 2),
        "summarize_s": round(summary_s, 2),
        "whatif_s": round(whatif_s, 2),
        # an unchanged re-simulation against the recorded wall-clock: the model's error
        "whatif_baseline_error_pct": round(100 * (wi["baseline_wall_s"] / tr.wall_s - 1), 3),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_average_1m": round(os.getloadavg()[0], 1),  # other work on the machine
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, Path(args.dir))))
        return 0
    results = []
    with tempfile.TemporaryDirectory() as d:
        for size in (int(s) for s in args.sizes.split(",")):
            out = subprocess.run(
                [sys.executable, __file__, "--one", str(size), "--dir", d],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            results.append(json.loads(out))
            if not args.json:
                r = results[-1]
                print(
                    f"{r['spans']:>9,} spans {r['file_mb']:>7.1f} MB  write {r['write_s']:6.2f} s"
                    f"  load {r['load_s']:6.2f} s (cpu {r['load_cpu_s']:.2f})"
                    f"  cached {r['load_cached_s']:5.2f} s"
                    f"  critical path {r['critical_path_s']:6.3f} s"
                    f"  ledger {r['ledger_s']:5.2f} s  summarize {r['summarize_s']:6.2f} s"
                    f"  whatif {r['whatif_s']:5.2f} s"
                    f" (unchanged {r['whatif_baseline_error_pct']:+.2f}%)"
                    f"  max RSS {r['max_rss_mb']} MB"
                )
    if args.json:
        print(json.dumps({"benchmark": "trace", "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
