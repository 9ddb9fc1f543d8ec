"""`swarm sim serve`: the simulator as an OpenAI-compatible HTTP server on this machine."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from typing import Any

from swarm._commands._args import port, seconds
from swarm._commands._faults import add_fault_options, faults_from_args

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add `sim` (with its `serve` subcommand) to the `swarm` parser."""
    sim = subparsers.add_parser("sim", help="simulated inference (no keys needed)")
    sim_sub = sim.add_subparsers(dest="sim_command", metavar="SUBCOMMAND", required=True)
    serve = sim_sub.add_parser(
        "serve",
        help="serve simulated chat completions over OpenAI-compatible HTTP",
        description="Serve /v1/chat/completions with the latency of a catalog profile.",
    )
    serve.add_argument(
        "--profile",
        default="cerebras/kimi-k2.6",
        help="catalog ref whose latency to simulate (default: %(default)s)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port, default=8765, help="0 picks a free port")
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument(
        "--real-model",
        action="store_true",
        help="reply as a real open model does: calls written as text, wrong tool names, "
        "repeats, cut-off JSON (the rates of [providers.sim.real_model]'s defaults)",
    )
    serve.add_argument(
        "--time-scale", type=seconds, default=1.0, help="multiply every delay (0 = no latency)"
    )
    serve.add_argument(
        "--script",
        metavar="MODULE:FUNCTION",
        help="reply script (default: the demo's, which plays planner, coder and fixer "
        "of `swarm solve` on the demo and answers anything else with prose)",
    )
    add_fault_options(serve)
    serve.set_defaults(func=_serve)


def _load_script(spec: str) -> Any:
    from swarm.errors import ConfigError

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"expected MODULE:FUNCTION, got {spec!r}", key="--script")
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {spec!r}: {exc}", key="--script") from exc
    if not callable(func):
        raise ConfigError(f"{spec!r} is not callable", key="--script")
    return func


async def _serve(args: argparse.Namespace) -> int:
    import anyio

    from swarm._demo import demo_script
    from swarm.config._faults import RealModel
    from swarm.providers.sim import SimEngine
    from swarm.providers.sim._real_model import real_model_script
    from swarm.providers.sim._server import serve_sim

    script = _load_script(args.script) if args.script else demo_script
    if args.real_model:
        script = real_model_script(script, RealModel(), args.seed)
    engine = SimEngine(
        profile=args.profile,
        script=script,
        faults=faults_from_args(args),
        seed=args.seed,
        time_scale=args.time_scale,
    )
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with serve_sim(engine, host=args.host, port=args.port) as url:
            print(f"swarm sim: serving {args.profile} on {url}", flush=True)
            async for _ in signals:
                break
    print("swarm sim: stopped", file=sys.stderr, flush=True)
    return 0
