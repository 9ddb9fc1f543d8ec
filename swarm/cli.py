"""The `swarm` command: parses arguments and hands each subcommand to its module.

Each `swarm/_commands/<name>.py` adds its own parser with `register(subparsers)` and sets
`func` to an `async def` (or plain function) taking the parsed namespace and returning an
exit code. Imports stay inside the handlers so `swarm --help` starts fast.

Exit codes: 0 done, 1 the run failed or was stopped (or a service could not be reached),
2 a usage error (a bad flag, file or config: argparse's own errors and `ConfigError`),
130 interrupted. A user's mistake is a one-line message naming the argument, file or key,
never a traceback. With `--json`, stdout holds exactly one JSON value on every exit path,
usage errors and interrupts included, with the error in it (`swarm._commands._json_out`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import inspect
import io
import json
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence

import anyio

from swarm import __version__
from swarm.errors import ConfigError, SwarmError

__all__ = ["main"]

_COMMAND_MODULES = ("ask", "providers", "sim", "simulate", "solve", "trace")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm",
        description="Agent swarm orchestrator for large parallel coding tasks.",
    )
    parser.add_argument("--version", action="version", version=f"swarm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"swarm._commands.{name}").register(sub)
    return parser


def _term_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM does what Ctrl-C does: the run is cancelled and cleans up after itself."""
    signal.raise_signal(signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _term_as_interrupt) if on_main_thread else None
    ignored = on_main_thread and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        # a shell starts `swarm ... &` with SIGINT ignored; SIGTERM works through SIGINT,
        # and a script's `kill -INT` must stop the run as Ctrl-C would, cleaning up
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if not getattr(args, "json", False):
            return _run(args)[0]
        from swarm._commands._json_out import JsonOut

        with JsonOut() as out:
            try:
                code, error = _run(args)
            except BaseException as exc:  # a bug: its traceback on stderr, still one object
                traceback.print_exc()
                code, error = 1, f"internal error: {type(exc).__name__}: {exc}"
            out.finish(code, error)
        return code
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _parse(argv: list[str]) -> argparse.Namespace:
    """The parsed arguments; a usage error with `--json` also prints it as JSON."""
    if "--json" not in argv:
        return build_parser().parse_args(argv)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return build_parser().parse_args(argv)
    except SystemExit as exc:
        sys.stderr.write(said.getvalue())
        if exc.code == 2:
            lines = said.getvalue().strip().splitlines()
            error = lines[-1] if lines else "usage error"
            print(json.dumps({"status": "failed", "error": error, "exit_code": 2}, indent=2))
        raise


_YOUNG_COLLECTION_EVERY = 10_000
"""Container allocations between two collections of the youngest generation (Python's
default: 700). A swarm keeps hundreds of model calls in flight, each holding dozens of
objects (coroutines, a span, a response, a result) that outlive the collection that finds
them and go on to the older ones, where nothing is garbage: measured on the router path
with 300 calls in flight (`bench_inference`'s client, a 2-core machine at load 16), the
collector took 0.5 s of a 3,000-call run's CPU at the default (0.17 ms a call, 1/7 of
it), 0.11 s at 10,000, and found nothing to collect either way."""


@contextlib.contextmanager
def _collector_for_swarms() -> Iterator[None]:
    """The garbage collector's thresholds for a command's run, restored after it (so a
    test or a script calling `main` in its own process keeps its own)."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], _YOUNG_COLLECTION_EVERY), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _run(args: argparse.Namespace) -> tuple[int, str | None]:
    """Run the command: its exit code, and the error that ended it (None: it did not)."""
    try:
        with _collector_for_swarms():
            if inspect.iscoroutinefunction(args.func):
                backend = getattr(args, "backend", "asyncio")
                code: int = anyio.run(args.func, args, backend=backend)
            else:
                code = args.func(args)
    except KeyboardInterrupt:
        print("swarm: interrupted", file=sys.stderr)
        return 130, "interrupted"
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0, None
    except (SwarmError, OSError, BaseExceptionGroup) as exc:
        errors = _expected(exc)
        if errors is None:
            raise
        for error in errors:
            print(f"swarm: error: {_describe(error)}", file=sys.stderr)
        code = 2 if all(isinstance(e, ConfigError) for e in errors) else 1
        return code, "; ".join(_describe(e) for e in errors)
    return code, None


def _expected(exc: BaseException) -> list[BaseException] | None:
    """The errors to report in one line each (an `ExceptionGroup` from a task group is
    opened); None when any of them is a bug, whose traceback is worth seeing."""
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            found = _expected(inner)
            if found is None:
                return None
            out += found
        return out
    return [exc] if isinstance(exc, SwarmError | OSError) else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, SwarmError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
