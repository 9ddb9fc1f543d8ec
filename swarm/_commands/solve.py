"""`swarm solve`, `swarm resume` and `swarm runs`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarm._commands._args import at_least

if TYPE_CHECKING:
    from swarm.run._report import RunReport


def register(sub: Any) -> None:
    p = sub.add_parser("solve", help="run a coding task as a swarm; hands back a branch")
    p.add_argument("task", help="task file (markdown with optional YAML front matter)")
    p.add_argument("--repo", help="target git repository (default: the task's, else the demo)")
    p.add_argument("--plan", help="use this plan JSON instead of asking the planner")
    _run_options(p)
    p.set_defaults(func=_solve)

    r = sub.add_parser("resume", help="continue a stopped, interrupted or crashed run")
    r.add_argument("run_id")
    _run_options(r)
    r.set_defaults(func=_resume)

    runs = sub.add_parser("runs", help="list runs and their state")
    runs.add_argument("--state-dir", default=".swarm")
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(func=_runs)


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="swarm.toml (default: $SWARM_CONFIG, ./swarm.toml)")
    p.add_argument("--max-agents", type=at_least(1), help="sub-agents at once")
    p.add_argument(
        "--budget",
        action="append",
        metavar="KEY=VALUE[,...]",
        help="stop cleanly when a limit is reached: usd, tokens, steps (model calls), "
        "deadline (e.g. --budget usd=2,steps=300,deadline=15m)",
    )
    p.add_argument("--state-dir", default=".swarm", help="journal, reports, patches")
    p.add_argument(
        "--traces-dir",
        help="where the trace goes (default: traces/, or .swarm/traces inside the repository)",
    )
    p.add_argument(
        "--sandbox",
        choices=("bwrap", "none"),
        help="where agents' commands, checks and hooks run (default: the task's, else "
        "[sandbox] kind in the config, else bwrap where installed)",
    )
    p.add_argument(
        "--network",
        choices=("off", "loopback", "allow", "host"),
        help="the sandbox's network: off, the host's loopback ports in --allow, the hosts in "
        "--allow through swarm's proxy, or the host's (default: the task's, else [sandbox])",
    )
    p.add_argument(
        "--allow",
        action="append",
        metavar="HOST:PORT",
        help="what the sandbox may reach (repeat it; e.g. pypi.org:443, *.example.com:443, "
        "127.0.0.1:5432); alone it means --network allow",
    )
    p.add_argument(
        "--keep-branch",
        action="store_true",
        help="keep the swarm/<run-id> branch of a run that fails (its patch is kept anyway)",
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run agents' workspaces, tools and checks on a Ray cluster: auto, HOST:PORT or "
        "ray://HOST:PORT (pip install 'swarm[ray]'); local: this machine (default: [cluster])",
    )
    p.add_argument(
        "--view",
        action="store_true",
        help="watch the run live in the viewer (its URL is printed; it stays until Ctrl-C)",
    )
    p.add_argument("--no-browser", action="store_true", help="with --view: only print the URL")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _request(args: argparse.Namespace, **extra: Any) -> Any:
    from swarm.budget import parse_budget_flags
    from swarm.run._solve import SolveRequest

    return SolveRequest(
        config_path=args.config,
        max_agents=args.max_agents,
        budget=parse_budget_flags(args.budget),
        state_dir=args.state_dir,
        traces_dir=args.traces_dir,
        quiet=args.quiet or args.json,
        sandbox=args.sandbox,
        network=args.network,
        allow=args.allow,
        keep_branch=args.keep_branch,
        cluster=args.cluster,
        **extra,
    )


def _open_cluster(config: Any) -> Any:
    """The Ray cluster a run asked for; `swarm._cluster` (and Ray) load only then."""
    from swarm._cluster import RayCluster

    return RayCluster.open(config)


async def _solve(args: argparse.Namespace) -> int:
    req = _request(args, task_path=args.task, repo=args.repo, plan_path=args.plan)
    return await _viewed(req, args) if args.view else await _solved(req, args.json)


async def _resume(args: argparse.Namespace) -> int:
    req = _request(args, task_path="", run_id=args.run_id)
    return await _viewed(req, args) if args.view else await _solved(req, args.json)


async def _viewed(req: Any, args: argparse.Namespace) -> int:
    """`--view`: the run with the live viewer following its trace. The URL goes to stderr
    as soon as the run knows where its trace goes; once the run has ended (its report
    printed) the page is the viewer of its trace, served until Ctrl-C or SIGTERM."""
    import signal
    import sys
    import webbrowser

    import anyio

    from swarm._viewer.serve import serve_viewer

    where: list[Path] = []
    known, ended = anyio.Event(), anyio.Event()

    def on_trace(path: Path) -> None:
        where.append(path)
        known.set()

    async def view() -> None:
        await known.wait()
        async with serve_viewer(where[0], follow=True, ended=ended) as url:
            print(f"swarm: live view: {url}", file=sys.stderr, flush=True)
            if not args.no_browser:
                await anyio.to_thread.run_sync(webbrowser.open, url)
            await anyio.sleep_forever()

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(view)
            try:
                code = await _solved(req, args.json, on_trace)
            finally:
                ended.set()
            if where:
                print("swarm: the run ended; the viewer stays (Ctrl-C to stop)", file=sys.stderr)
                async for _ in signals:
                    break
            tg.cancel_scope.cancel()
    return code


async def _solved(req: Any, as_json: bool, on_trace: Callable[[Path], None] | None = None) -> int:
    """Run `req` and print its report; with `--json`, one JSON object on every exit path,
    an error that ended the run (or kept it from starting) included."""
    from swarm.errors import ConfigError, SwarmError
    from swarm.run._run import cause
    from swarm.run._solve import solve

    try:
        report = await solve(req, cluster=_open_cluster, on_trace=on_trace)
    except (SwarmError, OSError, BaseExceptionGroup) as exc:
        if not as_json:
            raise
        code = 2 if isinstance(exc, ConfigError) else 1
        print(json.dumps({"status": "failed", "error": cause(exc), "exit_code": code}, indent=2))
        return code
    return _print(report, as_json)


def _print(report: RunReport, as_json: bool) -> int:
    from swarm._analysis.account import with_wall_clock

    report = with_wall_clock(report)
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        from swarm.run._report import render_markdown

        print(render_markdown(report), end="")
    return 0 if report.ok else 130 if report.status == "interrupted" else 1


def _runs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from swarm.errors import ConfigError
    from swarm.run.journal import Journal

    state = Path(args.state_dir)
    if state.exists() and not state.is_dir():
        raise ConfigError(f"--state-dir {state}: not a directory (it holds journal.db)")
    path = state / "journal.db"
    if not path.exists():
        print("no runs yet" if not args.json else "[]")
        return 0
    with Journal.open(path) as journal:
        rows = [_true_state(r, state) for r in journal.list_runs()]
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return 0
    for r in rows:
        print(f"{r.run_id}  {r.status:<11} ${r.cost_usd:.4f}  {r.task_title}")
        if r.status in ("interrupted", "failed") and r.detail:
            print(f"    {r.detail}")
    return 0


def _true_state(row: Any, state: Any) -> Any:
    """`row` as it is: a run with a live process is `running` (a resumed one too), and
    one the journal says is `running` whose process is gone (killed before it could say
    so) is `interrupted`: `swarm resume` continues it."""
    from swarm.run._lock import owner

    alive = owner(state, row.run_id) is not None
    if alive and row.status != "running":
        return row.model_copy(update={"status": "running", "detail": "being resumed"})
    if alive or row.status != "running":
        return row
    detail = f"its process ended without saying so (killed?): swarm resume {row.run_id}"
    return row.model_copy(update={"status": "interrupted", "detail": detail})
