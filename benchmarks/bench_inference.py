"""What one model call costs the client: bare loops against swarm's provider stack.

    python -m benchmarks.bench_inference [--json] [--agents 10,100,300] [--calls 10]
        [--tokens 200] [--ttft 0.2] [--tps 1000] [--modes latency,zero]
        [--variants aiohttp,httpx,httpx+aiohttp,provider,router] [--server auto|builtin|sim]

N agents each make M sequential streamed calls, all agents at once, against an
OpenAI-compatible server in another process (so its CPU is not counted here). Variants:

  aiohttp        bare aiohttp session, body read and dropped (the floor)
  httpx          one shared httpx.AsyncClient on httpx's default transport (httpcore)
  httpx+aiohttp  one shared httpx.AsyncClient on swarm's AiohttpTransport
  provider       swarm's OpenAIProvider (SSE parsed, usage, tool-call assembly, result)
  router         swarm.routing.Router, when that module exists

Per variant: calls/s, client CPU ms per call (process CPU over the run / calls), makespan,
ideal makespan (calls x (ttft + tokens/tps), plus the start spread) and their ratio, and
how busy the client and server processes were (CPU seconds / wall seconds; near 1.0 means
that process is the bottleneck). Mode `zero` reruns with no
server latency at all, which shows pure CPU cost per call.

Servers (`--server`), each in its own process:
  sim      swarm's simulator server (`serve_sim` + `SimEngine` with an exact, jitter-free
           profile): waits `ttft`, then one SSE event per ~15 ms tick with the words due;
           `swarm sim serve` itself only takes catalog profiles, hence this route
  builtin  a bare aiohttp server sending one SSE event per token (as OpenAI does), the
           tokens due every 20 ms: ~13x more events per call, so more parsing per call
  auto     sim when swarm.providers.sim_server exists, else builtin
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx
from aiohttp import web

from swarm.messages import ChatRequest, Message
from swarm.providers._transport import AiohttpTransport
from swarm.providers.openai import OpenAIProvider

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
    from swarm.providers.sim_server import serve_sim

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
        kind = "sim" if importlib.util.find_spec("swarm.providers.sim_server") else "builtin"
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


# ---------------------------------------------------------------------- variants

Call = Callable[[], Awaitable[None]]


def _body(tokens: int) -> bytes:
    return json.dumps(
        {
            "model": "bench",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": tokens,
        }
    ).encode()


class _Variant:
    """Makes one call; `open`/`close` around a run."""

    def __init__(self, name: str, base_url: str, tokens: int) -> None:
        self.name = name
        self.url = f"{base_url}/chat/completions"
        self.base_url = base_url
        self.body = _body(tokens)
        self.tokens = tokens
        self.headers = {"content-type": "application/json", "accept": "text/event-stream"}
        self._session: aiohttp.ClientSession | None = None
        self._client: httpx.AsyncClient | None = None
        self._provider: OpenAIProvider | None = None
        self._router: Any = None
        self.request = ChatRequest.model_construct(
            messages=[Message.user("hi")],
            tools=[],
            max_tokens=tokens,
            temperature=None,
            tool_choice=None,
            stream=True,
            metadata={},
        )

    async def open(self) -> None:
        if self.name == "aiohttp":
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        elif self.name == "httpx":
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            self._client = httpx.AsyncClient(limits=limits, timeout=60)
        elif self.name == "httpx+aiohttp":
            self._client = httpx.AsyncClient(transport=AiohttpTransport(), timeout=60)
        elif self.name == "provider":
            self._provider = OpenAIProvider("bench", self.base_url)
        elif self.name == "router":
            self._router, self._provider = _make_router(self.base_url)

    async def call(self) -> None:
        if self._session is not None:
            async with self._session.post(self.url, data=self.body, headers=self.headers) as r:
                async for _ in r.content.iter_any():
                    pass
        elif self._client is not None:
            async with self._client.stream(
                "POST", self.url, content=self.body, headers=self.headers
            ) as resp:
                async for _ in resp.aiter_bytes():
                    pass
        elif self._router is not None:
            result = await self._router.chat(self.request, tier="speed")
            assert result.usage.output_tokens == self.tokens, result.usage
        else:
            assert self._provider is not None
            result = await self._provider.chat("bench", self.request)
            assert result.usage.output_tokens == self.tokens, result.usage

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._client is not None:
            await self._client.aclose()
        if self._router is not None:
            await self._router.aclose()
        if self._provider is not None:
            await self._provider.aclose()


def _process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far; None off Linux."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _router_available() -> bool:
    return importlib.util.find_spec("swarm.routing.router") is not None


def _make_router(base_url: str) -> tuple[Any, OpenAIProvider]:
    """A Router whose speed tier is one OpenAI-compatible provider at `base_url`."""
    from swarm.config import load_config
    from swarm.routing.router import Router

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "swarm.toml"
        path.write_text(
            f'[providers.bench]\nkind = "openai"\nbase_url = "{base_url}"\n'
            '[tiers.speed]\nmodels = ["bench/bench"]\n'
        )
        config = load_config(path, env={})
    provider = OpenAIProvider("bench", base_url)
    return Router(config, providers={"bench": provider}, env={}), provider


async def run_variant(
    variant: _Variant, agents: int, calls: int, call_s: float, server_pid: int, stagger: bool
) -> dict[str, Any]:
    """Run `agents` x `calls`; agent i starts i/agents of a call late when `stagger`."""
    offset = call_s / agents if stagger else 0.0
    ideal_s = calls * call_s + offset * (agents - 1)
    await variant.open()
    try:
        await variant.call()  # warm up: imports, first connection
        cpu0, t0 = time.process_time(), time.perf_counter()
        server0 = _process_cpu_s(server_pid)

        async def agent(delay: float) -> None:
            if delay:
                await anyio.sleep(delay)
            for _ in range(calls):
                await variant.call()

        async with anyio.create_task_group() as tg:
            for i in range(agents):
                tg.start_soon(agent, i * offset)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        server1 = _process_cpu_s(server_pid)
    finally:
        await variant.close()
    total = agents * calls
    return {
        "variant": variant.name,
        "agents": agents,
        "calls": total,
        "calls_per_s": round(total / wall, 1),
        "cpu_ms_per_call": round(cpu * 1000 / total, 3),
        "makespan_s": round(wall, 3),
        "ideal_makespan_s": round(ideal_s, 3),
        "ratio": round(wall / ideal_s, 2) if ideal_s > 0 else None,
        "client_cpu_share": round(cpu / wall, 2),
        "server_cpu_share": (
            round((server1 - server0) / wall, 2) if server0 is not None and server1 else None
        ),
    }


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    variants = [v for v in args.variants.split(",") if v]
    notes: list[str] = []
    if "router" in variants and not _router_available():
        variants.remove("router")
        notes.append("router left out: swarm.routing does not exist yet")
    out: dict[str, Any] = {"config": vars(args) | {"variants": variants}, "results": []}
    for mode in args.modes.split(","):
        ttft, tps = (args.ttft, args.tps) if mode == "latency" else (0.0, 0.0)
        call_s = ttft + (args.tokens / tps if tps > 0 else 0.0)
        with server(args.server, ttft, tps, args.tokens) as (base_url, label, pid):
            out.setdefault("server", label)
            for agents in (int(a) for a in args.agents.split(",")):
                for name in variants:
                    variant = _Variant(name, base_url, args.tokens)
                    stagger = args.start == "staggered"
                    row = await run_variant(variant, agents, args.calls, call_s, pid, stagger)
                    row["mode"] = mode
                    out["results"].append(row)
                    if not args.json:
                        _print_row(row)
    out["notes"] = notes
    return out


def _print_row(r: dict[str, Any]) -> None:
    print(
        f"{r['mode']:>7} {r['agents']:>4} agents  {r['variant']:<14}"
        f"{r['calls_per_s']:>8.0f} calls/s  {r['cpu_ms_per_call']:>7.3f} ms CPU/call  "
        f"makespan {r['makespan_s']:>7.2f} s  ideal {r['ideal_makespan_s']:>5.2f} s  "
        f"ratio {r['ratio'] if r['ratio'] is not None else '-':<5} "
        f"CPU busy: client {r['client_cpu_share']:.0%} server {r['server_cpu_share'] or 0:.0%}",
        flush=True,
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
    result = anyio.run(_bench, args)
    if args.json:
        print(json.dumps(result))
    else:
        for note in result["notes"]:
            print(f"note: {note}")


if __name__ == "__main__":
    main()
