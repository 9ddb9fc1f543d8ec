"""Swarm scale: scheduling efficiency, orchestrator cost, rate-limited throughput, hedging.

    python benchmarks/bench_scale.py [--json] [--only efficiency,overhead,ratelimit,hedging]
                                     [--quick]

- efficiency: makespan ÷ critical-path lower bound for 300 agents × 4,000 steps on Kimi
  K2.6 at Cerebras speed, on the virtual clock and on the real one (~2 minutes).
- overhead: CPU per model call and per tool call across the whole stack (coordinator,
  agents, router, budgets, journal, tracing) and peak RSS at 100, 300 and 1,000 concurrent
  agents on a zero-latency simulator; each size in its own process.
- ratelimit: a 40-agent swarm against a simulator enforcing a tokens/min quota (virtual
  clock): utilisation of the quota and 429s provoked with AIMD only, with a client tpm, and
  with pacing learned from the provider's rate-limit headers.
- hedging: p50/p99 call latency with a heavy-tailed TTFT, hedging off and on (virtual clock).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

from swarm._simulate.simulation import PRESETS, SimSpec, run_simulation

_KEEP = (
    "agents",
    "steps",
    "virtual",
    "wall_s",
    "real_s",
    "bound_s",
    "ratio",
    "bound_actual_s",
    "ratio_actual",
    "calls",
    "tool_calls",
    "rate_limited",
    "cpu_s",
    "cpu_ms_per_call",
    "peak_rss_mb",
    "merged",
)


def _pick(out: dict[str, Any]) -> dict[str, Any]:
    return {k: out[k] for k in _KEEP}


def efficiency(quick: bool) -> dict[str, Any]:
    spec = replace(SimSpec(**PRESETS["kimi-swarm"]), traces_dir=None)
    res = {"virtual": _pick(run_simulation(replace(spec, virtual=True)))}
    if not quick:
        res["real"] = _pick(run_simulation(spec))
    return res


def _overhead_one(agents: int, tools_per_step: int) -> dict[str, Any]:
    spec = SimSpec(
        agents=agents,
        steps=agents * 10,
        time_scale=0.0,
        tool_s=0.0,
        check_s=0.0,
        tools_per_step=tools_per_step,
        traces_dir=None,
    )
    return _pick(run_simulation(spec))


def overhead(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for agents in (100, 300) if quick else (100, 300, 1000):
        runs = []
        for tps in (1, 3):  # the difference prices a tool call
            code = (
                f"import json,sys; from benchmarks.bench_scale import _overhead_one as f; "
                f"print(json.dumps(f({agents}, {tps})))"
            )
            proc = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            )
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        one, three = runs
        tool_ms = (
            1000 * (three["cpu_s"] - one["cpu_s"]) / max(1, three["tool_calls"] - one["tool_calls"])
        )
        call_ms = (1000 * one["cpu_s"] - tool_ms * one["tool_calls"]) / one["calls"]
        out[str(agents)] = {
            "calls": one["calls"],
            "tool_calls": one["tool_calls"],
            "cpu_s": one["cpu_s"],
            "real_s": one["real_s"],
            "cpu_ms_per_model_call": round(call_ms, 3),
            "cpu_ms_per_tool_call": round(tool_ms, 3),
            "calls_per_s": round(one["calls"] / one["real_s"], 1),
            "peak_rss_mb": one["peak_rss_mb"],
        }
    sizes = sorted(int(k) for k in out)
    lo, hi = out[str(sizes[0])], out[str(sizes[-1])]
    out["rss_kb_per_agent"] = round(
        1024 * (hi["peak_rss_mb"] - lo["peak_rss_mb"]) / (sizes[-1] - sizes[0]), 1
    )
    return out


def ratelimit(quick: bool) -> dict[str, Any]:
    """A swarm against a simulator enforcing a tokens/min quota (429 + Retry-After past it,
    `x-ratelimit-*` on success), on the virtual clock, under three client configurations:
    `aimd` (no client limits and no rate-limit headers: only the AIMD cut and the
    Retry-After pause react to 429s),
    `tpm` (the client's token bucket set to the quota) and `headers` (no configured limit:
    the Gate paces from the provider's rate-limit info).

    `utilisation` is tokens/min actually admitted ÷ the quota, over the run after the
    opening burst (the bucket starts full, so the first minute's allowance is spent at
    once): (tokens - quota) ÷ (quota × minutes). `used_of_allowed` counts the burst in."""
    from swarm.providers.sim import Faults

    tpm = 300_000
    base = SimSpec(
        agents=40,
        steps=1600 if not quick else 800,
        speed="cerebras/llama-3.3-70b",
        reasoning="cerebras/llama-3.3-70b",
        tool_s=0.2,
        check_s=0.2,
        faults=Faults(quota_tpm=tpm),
        virtual=True,
        traces_dir=None,
    )
    silent = Faults(quota_tpm=tpm, quota_headers=False)  # 429s are all the client hears
    runs = {"aimd": replace(base, faults=silent), "tpm": replace(base, tpm=tpm), "headers": base}
    out: dict[str, Any] = {"quota_tpm": tpm}
    for name, spec in runs.items():
        t0 = time.perf_counter()
        r = run_simulation(spec)
        minutes = r["wall_s"] / 60
        out[name] = {
            "virtual_wall_s": r["wall_s"],
            "real_s": round(time.perf_counter() - t0, 2),
            "calls": r["calls"],
            "attempts": r["attempts"],
            "429s": r["rate_limited"],
            "subtasks_failed": r["failed"],
            "tokens": r["tokens"],
            "tokens_per_min": round(r["tokens"] / minutes),
            "utilisation": round((r["tokens"] - tpm) / (tpm * minutes), 3),
            "used_of_allowed": round(r["tokens"] / (tpm * (1 + minutes)), 3),
        }
    return out


def hedging(quick: bool) -> dict[str, Any]:
    import anyio
    from trio.testing import MockClock

    n = 400 if quick else 2000
    out: dict[str, Any] = {"calls": n}
    for hedge in (False, True):
        lat = anyio.run(
            _hedge_run,
            hedge,
            n,
            backend="trio",
            backend_options={"clock": MockClock(autojump_threshold=0)},
        )
        lat.sort()
        out["on" if hedge else "off"] = {
            "p50_s": round(lat[len(lat) // 2], 3),
            "p99_s": round(lat[int(len(lat) * 0.99)], 3),
            "mean_s": round(sum(lat) / len(lat), 3),
        }
    return out


async def _hedge_run(hedge: bool, n: int) -> list[float]:
    import anyio

    from swarm._routing.router import Router
    from swarm.catalog import LatencyProfile
    from swarm.config import ProviderConfig, RoutingConfig, SwarmConfig, TierConfig
    from swarm.messages import ChatRequest, Message
    from swarm.providers.sim import SimProvider

    # TTFT median 0.3 s, p95 3 s: a heavy tail; decode 200 tokens at 1,000 tok/s
    profile = LatencyProfile(ttft_s=0.3, ttft_p95_s=3.0, output_tps=1000, jitter=0.05)
    providers = {p: SimProvider(p, profile=profile, seed=i) for i, p in enumerate("ab")}
    config = SwarmConfig(
        providers={p: ProviderConfig(kind="sim") for p in providers},
        tiers={"speed": TierConfig(models=["a/m", "b/m"])},
        routing=RoutingConfig(hedge=hedge),
    )
    request = ChatRequest(messages=[Message.user("hello")], max_tokens=200)
    latencies: list[float] = []
    limiter = anyio.CapacityLimiter(20)

    async def one() -> None:
        async with limiter:
            t = anyio.current_time()
            await model.chat(request)
            latencies.append(anyio.current_time() - t)

    async with Router(config, providers=providers) as router:
        model = router.model("speed")
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
    return latencies


SECTIONS = {
    "efficiency": efficiency,
    "overhead": overhead,
    "ratelimit": ratelimit,
    "hedging": hedging,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="smaller runs, no 2-minute real run")
    args = ap.parse_args()
    results = {}
    for name in args.only.split(","):
        results[name] = SECTIONS[name](args.quick)
        if not args.json:
            print(f"{name}: {json.dumps(results[name], indent=2)}", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
