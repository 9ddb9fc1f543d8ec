"""What one model call costs the client: bare loops against swarm's provider stack.

    python -m benchmarks.bench_inference [--json] [--agents 10,100,300] [--calls 10]
        [--tokens 200] [--ttft 0.2] [--tps 1000] [--modes latency,zero]
        [--variants aiohttp,httpx,httpx+aiohttp,provider,router] [--stream on,off]
        [--start staggered|lockstep] [--rounds 1] [--tree NAME=PATH ...]
        [--server auto|builtin|sim] [--gc-young N] [--baseline FILE] [--write-baseline FILE]

N agents each make M sequential calls, all agents at once, against an OpenAI-compatible
server in another process (so its CPU is not counted here). Each variant runs in a client
process of its own (`benchmarks/_inference_client.py`, which lists the variants); `aiohttp`
is the floor and `router` is swarm's whole call path (Router, a run's tracing on).
`--stream on,off` measures streamed and whole (non-streamed) replies.

Per variant: calls/s, client CPU ms per call (process CPU over the run / calls), makespan,
ideal makespan (calls x (ttft + tokens/tps), plus the start spread) and their ratio, and
how busy the client and server processes were (CPU seconds / wall seconds; near 1.0 means
that process is the bottleneck). Mode `zero` reruns with no server latency at all, which
shows pure CPU cost per call. `--start lockstep` starts every agent at once, so every call
is in the same wave. `--gc-young N` runs every client with the garbage collector's
youngest generation collected every N allocations, as the `swarm` command runs (10000).
`--rounds N` repeats every variant N times, interleaved, and reports the median.

The guard: `summary` gives, per mode, start, agent count and stream, each swarm variant's
CPU per call as a ratio to the floor's in the same run (`cpu_ratio` of the medians,
`cpu_ratio_min` of the least over the rounds, the steadier on a shared machine). `--tree NAME=PATH`
adds `router@NAME`, the router of another checkout (an old commit's worktree) measured by
the same client. `--write-baseline FILE` records the router's `cpu_ratio_min`s; `--baseline FILE`
exits 1 when one grew more than the file's tolerance (20 %) over the recorded one.
Run it before every change to `routing/`, `providers/`, `tracing/` or `agent/`:

    python -m benchmarks.bench_inference --agents 300 --modes zero --stream on,off \
        --variants aiohttp,router --rounds 3 --baseline benchmarks/baselines/inference.json

Servers (`--server`), each in its own process:
  sim      swarm's simulator server (`serve_sim` + `SimEngine` with an exact, jitter-free
           profile): waits `ttft`, then one SSE event per ~15 ms tick with the words due;
           `swarm sim serve` itself only takes catalog profiles, hence this route
  builtin  a bare aiohttp server sending one SSE event per token (as OpenAI does), the
           tokens due every 20 ms: ~13x more events per call, so more parsing per call
  auto     sim when swarm.providers.sim._server exists, else builtin
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web

# ---------------------------------------------------------------------- built-in server

_EVENT = (
    b'data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":0,"model":"bench",'
    b'"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}\n\n'
)


def _tail(tokens: int) -> bytes:
    head = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 0, "model": "bench"}
    finish = {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {**head, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens}}
    return (
        b"".join(
            b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n"
            for c in (finish, usage)
        )
        + b"data: [DONE]\n\n"
    )


def make_app(ttft: float, tps: float, tokens: int, tick: float = 0.02) -> web.Application:
    """OpenAI-style streaming chat completions with a fixed latency profile."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body.get("max_tokens") or tokens)
        if ttft > 0:
            await anyio.sleep(ttft)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        if tps <= 0:
            await resp.write(_EVENT * n + _tail(n))
            return resp
        start = anyio.current_time()
        sent = 0
        while sent < n:
            await anyio.sleep(tick)
            due = min(n, int((anyio.current_time() - start) * tps))
            if due > sent:
                await resp.write(_EVENT * (due - sent))
                sent = due
        await resp.write(_tail(n))
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _serve(args: argparse.Namespace) -> None:
    if args.serve == "sim":
        await _serve_sim(args)
        return
    runner = web.AppRunner(make_app(args.ttft, args.tps, args.tokens), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096)
    await site.start()
    print(f"listening http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
    try:
        await anyio.sleep_forever()
    finally:
        with anyio.move_on_after(2, shield=True):
            await runner.cleanup()


async def _serve_sim(args: argparse.Namespace) -> None:
    """swarm's simulator server with an exact profile: `swarm sim serve` only takes catalog
    refs, whose jitter and reasoning tokens would blur the ideal makespan."""
    from swarm.catalog import LatencyProfile
    from swarm.providers.sim import SimEngine
    from swarm.providers.sim._server import serve_sim

    zero = args.tps <= 0
    profile = LatencyProfile(
        ttft_s=args.ttft, output_tps=1e12 if zero else args.tps, prefill_tps=1e12, jitter=0.0
    )
    engine = SimEngine(profile=profile, seed=0, time_scale=0.0 if zero else 1.0)
    async with serve_sim(engine, port=args.port) as url:
        print(f"listening {url}", flush=True)
        await anyio.sleep_forever()


@contextmanager
def server(kind: str, ttft: float, tps: float, tokens: int) -> Iterator[tuple[str, str, int]]:
    """Start a server process; yield (base_url, description, pid); stop it on exit."""
    if kind == "auto":
        kind = "sim" if importlib.util.find_spec("swarm.providers.sim._server") else "builtin"
    label = "swarm sim server (SimEngine, fixed profile)" if kind == "sim" else "built-in server"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.bench_inference",
        "--serve",
        kind,
        "--port",
        "0",
        "--ttft",
        str(ttft),
        "--tps",
        str(tps),
        "--tokens",
        str(tokens),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = next((w for w in line.split() if w.startswith("http")), None)
        if url is None:
            raise RuntimeError(f"{label} did not say where it listens: {line!r}")
        yield url.rstrip("/"), label, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------- the runs

_CLIENT = Path(__file__).with_name("_inference_client.py")
BASELINE_TOLERANCE = 0.2
"""How much a router's ratio to the floor may grow over the baseline's before it fails."""


def run_client(
    variant: str, tree: str | None, row: dict[str, Any], url: str, server_pid: int
) -> dict[str, Any]:
    """One client process: `variant` (of checkout `tree`, or this one) for `row`'s run."""
    cmd = [
        sys.executable,
        str(_CLIENT),
        "--variant",
        variant,
        "--url",
        url,
        "--server-pid",
        str(server_pid),
        *(f"--{k.replace('_', '-')}={v}" for k, v in row.items()),
    ]
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (tree, env.get("PYTHONPATH"))))
    with tempfile.TemporaryDirectory() as cwd:  # no checkout's swarm/ beside the script
        done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{variant} client failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _key(mode: str, start: str, agents: int, stream: bool) -> str:
    return f"{mode}/{start}/{agents}/{'stream' if stream else 'whole'}"


def summarize(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per run shape: the floor's CPU per call, and each other variant's CPU per call, its
    ratio to the floor, and its median makespan / ideal. CPU per call is given as the
    median over the rounds and as the least (`_min`): other processes' load only ever adds
    to it, so the least is the steadier figure on a shared machine, and the guard's."""
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in results:
        key = _key(r["mode"], r["start"], r["agents"], r["stream"])
        groups.setdefault(key, {}).setdefault(r["variant"], []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for key, by_variant in groups.items():
        floors = [r["cpu_ms_per_call"] for r in by_variant.get("aiohttp", [])]
        floor, least = _median(floors), min(floors, default=math.nan)
        entry: dict[str, Any] = {"floor_cpu_ms": round(floor, 4), "floor_cpu_ms_min": least}
        for variant, rows in by_variant.items():
            cpus = [r["cpu_ms_per_call"] for r in rows]
            cpu = _median(cpus)
            ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
            entry[variant] = {
                "cpu_ms": round(cpu, 4),
                "cpu_ms_min": min(cpus),
                "cpu_ratio": round(cpu / floor, 3) if floor > 0 else None,
                "cpu_ratio_min": round(min(cpus) / least, 3) if least > 0 else None,
                "makespan_ratio": round(_median(ratios), 3) if ratios else None,
            }
        out[key] = entry
    return out


def baseline_of(summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What `--write-baseline` records: the router's CPU ratio to the floor per run shape
    (of the least CPU per call seen over the rounds, each)."""
    ratios = {
        key: entry["router"]["cpu_ratio_min"]
        for key, entry in summary.items()
        if "router" in entry and entry["router"]["cpu_ratio_min"] is not None
    }
    return {"tolerance": BASELINE_TOLERANCE, "router_cpu_ratio": ratios}


def check_baseline(baseline: dict[str, Any], summary: dict[str, dict[str, Any]]) -> list[str]:
    """What grew too much: one line per run shape whose router ratio to the floor is more
    than the baseline's tolerance over the recorded ratio. A run that measured no shape the
    baseline holds is a failure too (a guard that compares nothing guards nothing)."""
    tolerance = float(baseline.get("tolerance", BASELINE_TOLERANCE))
    recorded: dict[str, float] = baseline.get("router_cpu_ratio", {})
    compared, failures = 0, []
    for key, was in recorded.items():
        now = (summary.get(key) or {}).get("router", {}).get("cpu_ratio_min")
        if now is None:
            continue
        compared += 1
        if now > was * (1 + tolerance):
            failures.append(
                f"{key}: router CPU per call is {now:.2f}x the floor, was {was:.2f}x "
                f"(+{now / was - 1:.0%}, over the {tolerance:.0%} allowed)"
            )
    if not compared:
        failures.append(
            "no run shape in common with the baseline: measure one of "
            + ", ".join(sorted(recorded))
        )
    return failures


def _trees(specs: list[str]) -> dict[str, str]:
    trees: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path, "swarm").is_dir():
            raise SystemExit(f"--tree takes NAME=PATH to a checkout holding swarm/: {spec!r}")
        trees[name] = str(Path(path).resolve())
    return trees


def _bench(args: argparse.Namespace) -> dict[str, Any]:
    variants = [v for v in args.variants.split(",") if v]
    trees = _trees(args.tree)
    streams = [{"on": True, "off": False}[s] for s in args.stream.split(",") if s]
    out: dict[str, Any] = {
        "config": vars(args) | {"variants": variants, "trees": trees},
        "results": [],
    }
    runs = [(v, None) for v in variants] + [(f"router@{n}", p) for n, p in trees.items()]
    for mode in args.modes.split(","):
        ttft, tps = (args.ttft, args.tps) if mode == "latency" else (0.0, 0.0)
        call_s = ttft + (args.tokens / tps if tps > 0 else 0.0)
        with server(args.server, ttft, tps, args.tokens) as (base_url, label, pid):
            out.setdefault("server", label)
            for agents in (int(a) for a in args.agents.split(",")):
                for stream in streams:
                    for _ in range(args.rounds):  # interleaved: noise hits every variant
                        for name, tree in runs:
                            shape = {
                                "agents": agents,
                                "calls": args.calls,
                                "tokens": args.tokens,
                                "call_s": call_s,
                                "stream": int(stream),
                                "start": args.start,
                                "gc_young": args.gc_young,
                            }
                            row = run_client(name.partition("@")[0], tree, shape, base_url, pid)
                            row.update(variant=name, mode=mode, agents=agents)
                            row.update(stream=stream, start=args.start)
                            out["results"].append(row)
                            if not args.json:
                                _print_row(row)
    out["summary"] = summarize(out["results"])
    return out


def _print_row(r: dict[str, Any]) -> None:
    print(
        f"{r['mode']:>7} {r['agents']:>4} agents {'stream' if r['stream'] else 'whole':<6} "
        f"{r['variant']:<14}{r['calls_per_s']:>7.0f} calls/s {r['cpu_ms_per_call']:>7.3f} "
        f"ms CPU/call  makespan {r['makespan_s']:>6.2f} s  ideal {r['ideal_makespan_s']:>5.2f} s"
        f"  ratio {r['ratio'] if r['ratio'] is not None else '-':<5} "
        f"CPU busy: client {r['client_cpu_share']:.0%} server {r['server_cpu_share'] or 0:.0%}",
        flush=True,
    )


def _print_summary(summary: dict[str, dict[str, Any]]) -> None:
    for key, entry in summary.items():
        print(
            f"{key}: floor {entry['floor_cpu_ms']:.3f} ms CPU/call "
            f"(least {entry['floor_cpu_ms_min']:.3f})"
        )
        for variant, fig in entry.items():
            if not isinstance(fig, dict) or variant == "aiohttp":
                continue
            print(
                f"  {variant:<16} {fig['cpu_ms']:.3f} ms = {fig['cpu_ratio']}x the floor "
                f"(least: {fig['cpu_ms_min']:.3f} ms = {fig['cpu_ratio_min']}x), "
                f"makespan / ideal {fig['makespan_ratio']}"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_inference",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--agents", default="10,100,300")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--tps", type=float, default=1000.0)
    parser.add_argument("--modes", default="latency,zero")
    parser.add_argument(
        "--start",
        choices=("staggered", "lockstep"),
        default="staggered",
        help="staggered: agent i starts i/N of a call late, as real agents drift apart "
        "(ideal grows by that spread); lockstep: all at once, every call in the same wave",
    )
    parser.add_argument("--variants", default="aiohttp,httpx,httpx+aiohttp,provider,router")
    parser.add_argument("--stream", default="on", help="on, off or on,off: streamed replies")
    parser.add_argument("--rounds", type=int, default=1, help="runs per variant (median)")
    parser.add_argument(
        "--gc-young",
        type=int,
        default=0,
        help="every client's youngest-generation GC threshold (0: Python's 700; the swarm "
        "command runs with 10000): what the call path costs in a process set up as swarm's",
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also measure the router of the checkout at PATH, as router@NAME",
    )
    parser.add_argument("--baseline", type=Path, help="fail if a ratio grew >20%% over it")
    parser.add_argument("--write-baseline", type=Path, help="record this run's ratios")
    parser.add_argument("--server", choices=("auto", "builtin", "sim"), default="auto")
    parser.add_argument("--serve", choices=("builtin", "sim"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        try:
            anyio.run(_serve, args)
        except KeyboardInterrupt:
            pass
        return
    if (args.baseline or args.write_baseline) and "aiohttp" not in args.variants.split(","):
        parser.error("--baseline and --write-baseline need the aiohttp floor in --variants")
    if (args.baseline or args.write_baseline) and args.gc_young:
        parser.error("the baseline is measured with Python's default collector: no --gc-young")
    result = _bench(args)
    failures: list[str] = []
    if args.baseline is not None:
        failures = check_baseline(json.loads(args.baseline.read_text()), result["summary"])
        result["baseline"] = {"file": str(args.baseline), "failures": failures}
    if args.write_baseline is not None:
        args.write_baseline.parent.mkdir(parents=True, exist_ok=True)
        args.write_baseline.write_text(json.dumps(baseline_of(result["summary"]), indent=2) + "\n")
    if args.json:
        print(json.dumps(result, default=str))
    else:
        _print_summary(result["summary"])
        for failure in failures:
            print(f"regression: {failure}")
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
