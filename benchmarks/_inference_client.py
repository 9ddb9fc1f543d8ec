"""One client process of `bench_inference`: N agents x M calls of one variant, one JSON row.

Run as a script (`python benchmarks/_inference_client.py --variant router --url ...`), in a
process of its own, so each variant's CPU is its own and a run starts cold for each. It
imports nothing from `benchmarks`, and finds swarm's parts under their old names too, so
`PYTHONPATH=<another checkout>` measures that checkout's swarm with the same client: that
is how `bench_inference --tree` puts an older commit beside this one in the same run.

Variants:

  aiohttp        bare aiohttp session, body read and dropped (the floor)
  httpx          one shared httpx.AsyncClient on httpx's default transport (httpcore)
  httpx+aiohttp  one shared httpx.AsyncClient on swarm's AiohttpTransport
  provider       swarm's OpenAIProvider (SSE parsed, usage, tool-call assembly, result)
  router         swarm's Router with a run's tracing on (spans written to a trace file)
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import tempfile
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx


def _body(tokens: int, stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": "bench",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
        "max_tokens": tokens,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def _from(attr: str, *modules: str) -> Any:
    """`attr` of the first of `modules` that has it: `--tree` runs this client against
    older checkouts, whose modules had other names (before the public line: no `_`)."""
    for name in modules:
        try:
            return getattr(importlib.import_module(name), attr)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"no {attr} in any of {modules}")


def _openai_provider() -> Any:
    return _from("OpenAIProvider", "swarm.providers._openai", "swarm.providers.openai")


def _swarm_router(base_url: str) -> tuple[Any, Any]:
    """A Router whose speed tier is one OpenAI-compatible provider at `base_url`."""
    from swarm.config import load_config

    router = _from("Router", "swarm", "swarm._routing", "swarm.routing.router", "swarm.routing")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "swarm.toml"
        path.write_text(
            f'[providers.bench]\nkind = "openai"\nbase_url = "{base_url}"\n'
            '[tiers.speed]\nmodels = ["bench/bench"]\n'
        )
        config = load_config(path, env={})
    provider = _openai_provider()("bench", base_url)
    return router(config, providers={"bench": provider}, env={}), provider


def _run_tracing(traces_dir: Path) -> AbstractContextManager[Any]:
    run_tracing = _from(
        "run_tracing", "swarm", "swarm._tracing", "swarm.tracing.setup", "swarm.tracing"
    )
    context: AbstractContextManager[Any] = run_tracing("bench", traces_dir=traces_dir)
    return context


class Client:
    """Makes one call of a variant; `open`/`close` around a run."""

    def __init__(self, name: str, base_url: str, tokens: int, stream: bool) -> None:
        self.name = name
        self.base_url = base_url
        self.url = f"{base_url}/chat/completions"
        self.tokens = tokens
        self.stream = stream
        self.body = _body(tokens, stream)
        self.headers = {"content-type": "application/json"}
        if stream:
            self.headers["accept"] = "text/event-stream"
        self._session: aiohttp.ClientSession | None = None
        self._client: httpx.AsyncClient | None = None
        self._provider: Any = None
        self._router: Any = None
        self.request: Any = None

    async def open(self) -> None:
        if self.name == "aiohttp":
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        elif self.name == "httpx":
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            self._client = httpx.AsyncClient(limits=limits, timeout=60)
        elif self.name == "httpx+aiohttp":
            from swarm.providers._transport import AiohttpTransport

            self._client = httpx.AsyncClient(transport=AiohttpTransport(), timeout=60)
        else:
            from swarm.messages import ChatRequest, Message

            self.request = ChatRequest.model_construct(
                messages=[Message.user("hi")],
                tools=[],
                max_tokens=self.tokens,
                temperature=None,
                tool_choice=None,
                stream=self.stream,
                metadata={},
            )
            if self.name == "provider":
                self._provider = _openai_provider()("bench", self.base_url)
            elif self.name == "router":
                self._router, self._provider = _swarm_router(self.base_url)
            else:
                raise SystemExit(f"unknown variant {self.name!r}")

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


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """`agents` x `calls`; agent i starts i/agents of a call late when staggered."""
    client = Client(args.variant, args.url, args.tokens, args.stream)
    offset = args.call_s / args.agents if args.start == "staggered" else 0.0
    ideal_s = args.calls * args.call_s + offset * (args.agents - 1)
    traced = args.variant == "router" and not args.no_tracing
    with tempfile.TemporaryDirectory() as tmp:
        with _run_tracing(Path(tmp)) if traced else nullcontext():
            await client.open()
            try:
                await client.call()  # warm up: imports, first connection
                gc.collect()
                cpu0, t0 = time.process_time(), time.perf_counter()
                server0 = _process_cpu_s(args.server_pid)

                async def agent(delay: float) -> None:
                    if delay:
                        await anyio.sleep(delay)
                    for _ in range(args.calls):
                        await client.call()

                async with anyio.create_task_group() as tg:
                    for i in range(args.agents):
                        tg.start_soon(agent, i * offset)
                wall = time.perf_counter() - t0
                server1 = _process_cpu_s(args.server_pid)
            finally:
                await client.close()
        # the trace file is finished (its spans encoded and written) on leaving the run:
        # that CPU is the call path's too
        cpu = time.process_time() - cpu0
    total = args.agents * args.calls
    return {
        "calls": total,
        "calls_per_s": round(total / wall, 1),
        "cpu_ms_per_call": round(cpu * 1000 / total, 4),
        "makespan_s": round(wall, 3),
        "ideal_makespan_s": round(ideal_s, 3),
        "ratio": round(wall / ideal_s, 3) if ideal_s > 0 else None,
        "client_cpu_share": round(cpu / wall, 2),
        "server_cpu_share": (
            round((server1 - server0) / wall, 2)
            if server0 is not None and server1 is not None
            else None
        ),
        "swarm": _swarm_home(),
    }


def _swarm_home() -> str | None:
    module = sys.modules.get("swarm")
    return os.path.dirname(os.path.dirname(module.__file__ or "")) if module else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--agents", type=int, required=True)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--call-s", type=float, required=True)
    parser.add_argument("--stream", type=int, choices=(0, 1), required=True)
    parser.add_argument("--start", choices=("staggered", "lockstep"), required=True)
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--no-tracing", action="store_true")
    parser.add_argument(
        "--gc-young",
        type=int,
        default=0,
        help="the youngest generation's collection threshold (0: Python's default, 700); "
        "`swarm`'s commands run with 10000 (swarm.cli)",
    )
    args = parser.parse_args(argv)
    args.stream = bool(args.stream)
    if args.gc_young:
        gc.set_threshold(args.gc_young, *gc.get_threshold()[1:])
    print(json.dumps(anyio.run(run, args)), flush=True)


if __name__ == "__main__":
    main()
