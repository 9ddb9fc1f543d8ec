"""The `swarm` command: parses arguments and hands each subcommand to its module.

Each `swarm/_commands/<name>.py` adds its own parser with `register(subparsers)` and sets
`func` to an `async def` (or plain function) taking the parsed namespace and returning an
exit code. Imports stay inside the handlers so `swarm --help` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import signal
import sys
import threading
from collections.abc import Sequence

import anyio

from swarm.errors import SwarmError

__all__ = ["main"]

_COMMAND_MODULES = ("ask", "providers", "sim", "simulate", "solve", "trace")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm",
        description="Agent swarm orchestrator for large parallel coding tasks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"swarm._commands.{name}").register(sub)
    return parser


def _term_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM does what Ctrl-C does: the run is cancelled and cleans up after itself."""
    signal.raise_signal(signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _term_as_interrupt) if on_main_thread else None
    try:
        return _run(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    try:
        if inspect.iscoroutinefunction(args.func):
            code: int = anyio.run(args.func, args, backend=getattr(args, "backend", "asyncio"))
        else:
            code = args.func(args)
    except SwarmError as exc:
        print(f"swarm: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("swarm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
