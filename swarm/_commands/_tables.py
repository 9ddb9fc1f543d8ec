"""Printing `swarm trace` figures: tables (rich on a terminal, plain text when piped) and
the summary's merge-queue and context blocks."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "fmt",
    "ledger_rows",
    "summary_context",
    "summary_merges",
    "summary_remote",
    "table",
]


def table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    console: Console | None = None,
) -> None:
    """Rows under a title: a rich table on a terminal (or `console`), aligned plain text
    when piped. On a terminal no cell is ever cut: columns that do not fit its width are
    left out from the right, and a note names them (`--json` has every figure)."""
    cells = [[fmt(v) for v in row] for row in rows]
    if console is None and not sys.stdout.isatty():
        _plain(title, columns, cells)
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    shown = _fitting(columns, cells, console.width)
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, title_justify="left")
    for k in shown:
        right = k > 0 and all(_NUMBER.fullmatch(r[k]) for r in cells)
        t.add_column(columns[k], justify="right" if right else "left", no_wrap=True)
    for row in cells:
        t.add_row(*(row[k] for k in shown))
    console.print(t)
    if len(shown) < len(columns):
        hidden = ", ".join(c for k, c in enumerate(columns) if k not in shown)
        console.print(f"  (not shown: {hidden}; see --json)")


def _fitting(columns: Sequence[str], cells: Sequence[Sequence[str]], width: int) -> list[int]:
    """The columns, from the left, whose widest cell fits in `width` (the first always)."""
    shown: list[int] = []
    used = 0
    for k, c in enumerate(columns):
        need = max([len(c), *(len(r[k]) for r in cells)]) + _GAP
        if shown and used + need > width:
            break
        shown.append(k)
        used += need
    return shown


_NUMBER = re.compile(r"-|[-+]?[\d,.]+%?")
_GAP = 3
"""Columns of padding and rule rich puts beside each column of a SIMPLE_HEAD table."""


def _plain(title: str, columns: Sequence[str], cells: Sequence[Sequence[str]]) -> None:
    widths = [max([len(c), *(len(r[k]) for r in cells)]) for k, c in enumerate(columns)]
    print(title)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    print()


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    return "-" if v is None else str(v)


def ledger_rows(ledger: dict[str, float], wall: float) -> list[list[Any]]:
    return [
        [k, v, f"{100 * v / wall:.1f}%" if wall else "-"]
        for k, v in sorted(ledger.items(), key=lambda kv: -kv[1])
        if v >= 0.0005
    ]


def summary_merges(m: dict[str, Any] | None) -> None:
    """The merge queue's batches, and its busy time split into checking, waiting for a
    check slot and git work."""
    if m is None:
        return
    outcomes = ", ".join(f"{n} {k}" for k, n in m["by_outcome"].items() if n)
    print(
        f"merge queue: {m['batches']} batches ({outcomes or 'none decided'}), "
        f"size mean {m['size_mean']:.1f} max {m['size_max']}, "
        f"{m['speculative']} speculative ({m['rebuilt']} rebuilt), "
        f"{m.get('probes', 0)} probes, {m.get('alternates', 0)} alternates, "
        f"{m['splits']} splits, "
        f"{m['checks']} checks"
    )
    busy = m["busy_s"]
    rows = [
        [k, m[key], f"{100 * m[key] / busy:.1f}%" if busy else "-"]
        for k, key in (
            ("checking", "checking_s"),
            ("waiting for a check slot", "slot_wait_s"),
            ("git (trees, build, land)", "git_s"),
            ("busy (total)", "busy_s"),
        )
    ]
    table("merge queue time", ["part", "seconds", "share"], rows)
    print(
        f"summed over batches: {m['check_sum_s']:.3f} s checking, {m['slot_wait_sum_s']:.3f} s "
        f"waiting for a slot ({m['slot_waits']} waits); subtasks waited for the queue "
        f"{m['wait_s']:.3f} s in all ({m['waits']} waits)\n"
    )


def summary_context(c: dict[str, Any]) -> None:
    """Request size per step (a few steps, evenly spread) and what compaction saved."""
    steps = c["input_tokens_by_step"]
    if not steps:
        return
    at = c["peak_at"] or {}
    print(
        f"context: peak request {c['peak_request_tokens']:,} tokens "
        f"({at.get('agent', '-')}, step {at.get('step', '-')}); "
        f"{c['input_tokens']:,} input tokens in all"
    )
    picks = sorted({0, *(round(k * (len(steps) - 1) / 7) for k in range(1, 8))})
    cells = [f"{steps[k]['step']}: {steps[k]['max_input_tokens']:,}" for k in picks]
    print(f"  input tokens per step (largest over agents)  {'  '.join(cells)}")
    if c["compactions"]:
        kinds = ", ".join(f"{k} {n}" for k, n in c["compactions_by_strategy"].items())
        without = c["input_tokens_without_compaction"]
        share = c["input_tokens_saved"] / without if without else 0.0
        print(
            f"  compactions {c['compactions']} ({kinds}): {c['tokens_removed']:,} tokens "
            f"removed; later calls sent {c['input_tokens_saved']:,} fewer input tokens "
            f"({share:.0%} of {without:,})"
        )
    else:
        print("  no compaction")


_REMOTE_COLUMNS = {
    "calls": "calls",
    "round trip s": "round_trip_s",
    "command s": "command_s",
    "overhead s": "overhead_s",
    "overhead ms/call": "overhead_ms_per_call",
}


def summary_remote(r: dict[str, Any] | None) -> None:
    """Remote calls to cluster nodes: the round trip split into the command's own time on
    the node and the overhead of going remote."""
    if r is None:
        return
    rows = [[k, *(v[key] for key in _REMOTE_COLUMNS.values())] for k, v in r["by_call"].items()]
    rows.append(["(all)", *(r["total"][key] for key in _REMOTE_COLUMNS.values())])
    title = "remote calls (cluster): round trip = command on the node + overhead"
    table(title, ["call", *_REMOTE_COLUMNS], rows)
