"""`swarm trace …`: summary, scorecard, critical-path, whatif, export, send, diff and view.

Every subcommand that reports figures has `--json`; otherwise output is rich tables on a
terminal and plain text when piped.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swarm._commands._args import at_least, http_url, port
from swarm._commands._tables import (
    ledger_rows,
    summary_context,
    summary_merges,
    summary_remote,
    table,
)

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add `trace` and its subcommands to the `swarm` parser."""
    p = subparsers.add_parser(
        "trace",
        help="analyse a run's trace (latency, critical path)",
        description="Analyse traces/<run-id>.jsonl files.",
    )
    sub = p.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)

    for name, what, func in (
        ("summary", "where the time and money went", _summary),
        ("critical-path", "the steps that set the wall-clock", _critical_path),
    ):
        s = sub.add_parser(name, help=what)
        s.add_argument("trace", type=Path)
        s.add_argument("--json", action="store_true", help="print as JSON")
        s.set_defaults(func=func)
        if name == "summary":
            s.add_argument(
                "--report",
                type=Path,
                help="the run's report.json, for its finish estimates when the trace has no "
                "<trace>.pulse beside it (default: where the run wrote it, if there)",
            )
    _add_scorecard(sub)

    s = sub.add_parser("whatif", help="re-simulate the run on other providers")
    s.add_argument("trace", type=Path)
    s.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=PROVIDER/MODEL",
        help="tier, role, recorded provider/model or * = catalog ref (repeatable)",
    )
    s.add_argument("--max-agents", type=at_least(1), metavar="N", help="cap on concurrent agents")
    s.add_argument("--json", action="store_true", help="print as JSON")
    s.set_defaults(func=_whatif)

    s = sub.add_parser("export", help="convert for other viewers")
    s.add_argument("trace", type=Path)
    s.add_argument("--format", choices=("otlp-json", "chrome"), default="chrome")
    s.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="default: stdout; a directory gets <run-id>.trace.json (chrome) or .jsonl",
    )
    s.set_defaults(func=_export)

    s = sub.add_parser("send", help="replay the trace into an OTLP/HTTP endpoint")
    s.add_argument("trace", type=Path)
    s.add_argument(
        "--otlp",
        required=True,
        type=http_url,
        metavar="URL",
        help="e.g. http://localhost:4318 (…/v1/traces is added)",
    )
    s.set_defaults(func=_send)

    s = sub.add_parser("diff", help="compare two runs by latency")
    s.add_argument("a", type=Path)
    s.add_argument("b", type=Path)
    s.add_argument("--json", action="store_true", help="print as JSON")
    s.set_defaults(func=_diff)

    s = sub.add_parser("view", help="open the latency viewer in a browser")
    s.add_argument("trace", type=Path, help="a trace file (with --follow: or a run id)")
    s.add_argument(
        "--follow",
        action="store_true",
        help="the run is still going: show it live, then the viewer of its trace",
    )
    s.add_argument("--port", type=port, default=0, help="0 picks a free port")
    s.add_argument("--no-browser", action="store_true", help="only print the URL")
    s.set_defaults(func=_view)


def _load(path: Path) -> Any:
    from swarm._analysis import load_trace
    from swarm.errors import ConfigError

    if not path.is_file():
        raise ConfigError(f"no trace file at {path}")
    tr = load_trace(path)
    problem = _incomplete(tr)
    if problem:
        print(f"swarm: warning: {problem}", file=sys.stderr)
    return tr


def _incomplete(tr: Any) -> str | None:
    """Why the trace is incomplete (a run killed while writing it), or None."""
    from swarm._tracing import semconv as sc

    covers = f"the figures cover the {len(tr):,} spans before the cut"
    if tr.truncated:
        line = len(tr._line_offsets)
        return (
            f"{tr.path}:line {line}: the trace is incomplete: this line is cut off "
            f"(the run was stopped while writing it); {covers}"
        )
    if tr.root < 0 or tr.op[tr.root] != sc.OP_WORKFLOW:
        return (
            f"{tr.path}: the trace is incomplete: it has no root `workflow` span "
            f"(the run did not finish writing it); {covers}"
        )
    return None


def _dump(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


_GROUP_COLUMNS = {
    "calls": "calls",
    "tokens out": "output_tokens",
    "cost $": "cost_usd",
    "errors": "errors",
    "TTFT p50": "ttft_p50_s",
    "TTFT p95": "ttft_p95_s",
    "TTFT p99": "ttft_p99_s",
    "tok/s": "tokens_per_s",
    "profile tok/s": "profile_tokens_per_s",
}
"""The per-group table: column title -> key in the summary's group."""
_SAVING_COLUMNS = {
    "span": "name",
    "model": "model",
    "recorded s": "recorded_s",
    "faster": "faster",
    "expected s": "expected_s",
    "saving s": "saving_s",
}
"""The critical-path savings table: column title -> key in a saving row."""


def _summary(args: argparse.Namespace) -> int:
    from swarm._analysis import summarize
    from swarm._analysis.estimate import estimate_accuracy

    trace = _load(args.trace)
    s = summarize(trace)
    if args.report is not None:
        s["estimate"] = estimate_accuracy(trace, args.report)
    if args.json:
        _dump(s)
        return 0
    t = s["totals"]
    print(
        f"run {s['run_id'] or '?'}: {s['spans']:,} spans, wall {s['wall_s']:.1f} s, "
        f"{t['calls']:,} calls, ${t['cost_usd']:.4f}, {t['errors']} errors, "
        f"{t['retries']} retries\n"
    )
    for group in ("by_tier", "by_model", "by_role"):
        rows = [[k, *(g[key] for key in _GROUP_COLUMNS.values())] for k, g in s[group].items()]
        table(group.replace("_", " "), ["key", *_GROUP_COLUMNS], rows)
    _summary_ledgers(s)
    summary_merges(s["merge_queue"])
    summary_remote(s["remote"])
    summary_context(s["context"])
    _summary_estimate(s["estimate"])
    return 0


def _summary_estimate(est: dict[str, Any] | None) -> None:
    """How far the run's finish estimate was from its real end, at 25/50/75 % of it."""
    if not est:
        return
    rows = []
    for q in (25, 50, 75):
        e = est[f"at_{q}"]
        if e is None:
            rows.append([f"{q} %", "-", "-", "-", "-"])
            continue
        span = f"{e['low_end_s']:.1f}-{e['high_end_s']:.1f}"
        rows.append(
            [f"{q} %", e["estimated_end_s"], span, e["error_s"], "yes" if e["in_range"] else "no"]
        )
    source = "its pulse file" if est["source"] == "pulse" else est["source"]
    title = f"finish estimate against the real end ({est['estimates']} estimates, from {source})"
    table(title, ["at", "estimated end s", "range s", "error s", "in range"], rows)


def _summary_ledgers(s: dict[str, Any]) -> None:
    """The whole run's and the critical path's ledgers, and the calls worth speeding up."""
    wall = s["wall_s"]
    table("ledger (whole run)", ["cause", "seconds", "share"], ledger_rows(s["ledger"], wall))
    cp = s["critical_path"]
    table("ledger (critical path)", ["cause", "seconds", "share"], ledger_rows(cp["ledger"], wall))
    if cp["top_savings"]:
        table(
            "critical-path calls a faster provider would shorten most",
            list(_SAVING_COLUMNS),
            [[r[key] for key in _SAVING_COLUMNS.values()] for r in cp["top_savings"]],
        )


_CARD_COLUMNS = {
    "calls": "calls",
    "TTFT p50": "ttft_p50_s",
    "TTFT p95": "ttft_p95_s",
    "TTFT p99": "ttft_p99_s",
    "tok/s": "tokens_per_s",
    "errors": "error_rate",
    "429s": "rate_limited_rate",
    "$/M tok": "usd_per_mtok",
    "cached in": "cached_share",
    "cost $": "cost_usd",
    "cost share": "cost_share",
}
"""The scorecard's columns: title -> key in a row (rates and shares are fractions)."""


def _add_scorecard(sub: Any) -> None:
    s = sub.add_parser("scorecard", help="per provider/model and role: speed, errors, $")
    s.add_argument("trace", type=Path)
    s.add_argument("--json", action="store_true", help="print as JSON")
    s.set_defaults(func=_scorecard)


def _scorecard(args: argparse.Namespace) -> int:
    from swarm._analysis.scorecard import scorecard

    card = scorecard(_load(args.trace))
    if args.json:
        _dump(card)
        return 0
    for group, title in (("by_candidate", "provider/model"), ("by_role", "role")):
        rows = [[k, *(r[key] for key in _CARD_COLUMNS.values())] for k, r in card[group].items()]
        table(f"scorecard by {title}", [title, *_CARD_COLUMNS], rows)
    reasons = {k: r["reasons"] for k, r in card["by_candidate"].items() if r["reasons"]}
    if reasons:
        table(
            "why the router chose them",
            ["provider/model", "reason", "calls"],
            [[k, why, n] for k, rs in reasons.items() for why, n in rs.items()],
        )
    return 0


def _critical_path(args: argparse.Namespace) -> int:
    from swarm._analysis import ledger
    from swarm._analysis.critical_path import critical_path, critical_path_method

    tr = _load(args.trace)
    path = critical_path(tr)
    method = critical_path_method(tr)
    led = ledger(tr, path)
    if args.json:
        _dump(
            {
                "wall_s": tr.wall_s,
                "method": method,
                "ledger": led,
                "steps": [
                    {
                        "span_id": s.span_id,
                        "name": s.name,
                        "op": s.op,
                        "role": s.role,
                        "tier": s.tier,
                        "model": s.model,
                        "start_s": (s.start_ns - tr.start_ns) / 1e9,
                        "duration_s": s.duration_s,
                    }
                    for s in path
                ],
            }
        )
        return 0
    table(
        f"critical path ({_METHOD[method]}): {len(path)} steps over {tr.wall_s:.1f} s",
        ["step", "role", "start s", "duration s"],
        [[s.name, s.role, (s.start_ns - tr.start_ns) / 1e9, s.duration_s] for s in path],
    )
    table("ledger (critical path)", ["cause", "seconds", "share"], ledger_rows(led, tr.wall_s))
    return 0


_METHOD = {"links": "exact, along depends_on links", "timing": "inferred from timing"}


def _parse_sets(items: Sequence[str]) -> dict[str, str]:
    from swarm.errors import ConfigError

    out = {}
    for item in items:
        key, sep, ref = item.partition("=")
        if not sep or "/" not in ref:
            raise ConfigError(f"--set wants KEY=PROVIDER/MODEL, got {item!r}")
        out[key.strip()] = ref.strip()
    return out


def _whatif(args: argparse.Namespace) -> int:
    from swarm._analysis import whatif

    result = whatif(_load(args.trace), set=_parse_sets(args.set), max_agents=args.max_agents)
    if args.json:
        _dump(result)
        return 0
    if "note" in result:
        print(f"swarm trace whatif: {result['note']}")
        return 0
    rec, pred = result["recorded"], result["predicted"]
    table(
        "what if",
        ["", "wall s", "cost $"],
        [
            ["recorded", rec["wall_s"], rec["cost_usd"]],
            ["predicted", pred["wall_s"], pred["cost_usd"]],
        ],
    )
    print(
        f"{result['calls_changed']} calls re-timed, concurrency cap "
        f"{result['max_agents']}, speed-up x{result['speedup']:.2f} (the unchanged run "
        f"re-simulates to {result['baseline_wall_s']:.1f} s)"
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    from swarm._analysis import export_chrome
    from swarm._analysis.export import CHROME_SUFFIX

    tr = _load(args.trace)
    if args.format == "chrome":
        text, suffix = json.dumps(export_chrome(tr)), CHROME_SUFFIX
    else:
        text, suffix = args.trace.read_text(encoding="utf-8"), ".jsonl"
    out: Path | None = args.output
    if out is not None and out.is_dir():
        out = out / f"{tr.run_id or args.trace.stem}{suffix}"
    if out is not None and out.name.endswith(".chrome.json"):
        print(
            f"swarm: warning: {out}: speedscope reads *.chrome.json as a Chrome profile and "
            f"rejects trace events; name it *{CHROME_SUFFIX} (Perfetto reads either)",
            file=sys.stderr,
        )
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    return 0


async def _send(args: argparse.Namespace) -> int:
    import httpx

    from swarm._analysis import send_otlp

    _load(args.trace)  # a file that is not a trace is refused before anything is sent
    try:
        n = await send_otlp(args.trace, args.otlp)
    except httpx.HTTPStatusError as exc:
        return _not_sent(args, f"the endpoint answered {exc.response.status_code}")
    except httpx.HTTPError as exc:
        return _not_sent(args, f"cannot reach it ({type(exc).__name__}: {exc or 'no answer'})")
    print(f"sent {n:,} spans to {args.otlp}")
    return 0


def _not_sent(args: argparse.Namespace, why: str) -> int:
    print(f"swarm: error: --otlp {args.otlp}: {why}; nothing more was sent", file=sys.stderr)
    return 1


def _diff(args: argparse.Namespace) -> int:
    from swarm._analysis import diff

    d = diff(_load(args.a), _load(args.b))
    if args.json:
        _dump(d)
        return 0
    table(
        "a → b",
        ["", "a", "b", "delta"],
        [
            [k, d[k]["a"], d[k]["b"], d[k]["delta"]]
            for k in ("wall_s", "critical_path_busy_s", "cost_usd", "calls")
        ],
    )
    table(
        "critical-path ledger",
        ["cause", "a", "b", "delta"],
        [
            [r["category"], r["a"], r["b"], r["delta"]]
            for r in d["critical_path_ledger"]
            if r["a"] or r["b"]
        ],
    )
    table(
        "biggest changes (call seconds)",
        ["group", "key", "delta s"],
        [[c["group"], c["key"], c["delta_s"]] for c in d["biggest_changes"]],
    )
    return 0


def _view(args: argparse.Namespace) -> int:
    from swarm._viewer.serve import main_view

    if args.follow:
        args.trace = _followed(args.trace)
    else:
        _load(args.trace)  # a broken trace is refused here, before a server starts
    code: int = main_view(args)
    return code


def _followed(trace: Path) -> Path:
    """The trace to follow: the path given, else a run id's trace where runs write them
    (`traces/`, or `.swarm/traces` for a run inside its repository)."""
    if trace.suffix or trace.exists():
        return trace
    for where in (Path("traces"), Path(".swarm") / "traces"):
        candidate = where / f"{trace}.jsonl"
        if candidate.exists():
            return candidate
    return Path("traces") / f"{trace}.jsonl"
