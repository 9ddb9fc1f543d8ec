"""The run report: the outcome of every subtask, tokens, cost and where the time went.

Written as `report.md` and `report.json` beside the run's patch; `--json` prints the
same object.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["render_markdown", "write_report"]


def write_report(report: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    path = directory / "report.md"
    path.write_text(render_markdown(report))
    return path


def render_markdown(r: dict[str, Any]) -> str:
    label = " (simulated)" if r.get("simulated") else ""
    lines = [
        f"# swarm run {r['run_id']}{label}",
        "",
        f"- status: **{r['status']}**" + (f" ({r['stop_reason']})" if r.get("stop_reason") else ""),
        f"- branch: `{r['branch']}`",
        f"- patch: `{r['patch']}`",
        f"- trace: `{r['trace']}`",
        f"- wall-clock: {r['wall_s']:.1f} s; model calls: {r['calls']}; "
        f"tokens: {r['tokens']:,}; cost: ${r['cost_usd']:.4f}",
        f"- final check: {r.get('final_check') or 'not run'}",
        "",
        "## Subtasks",
        "",
        "| id | status | fix rounds | rebases | wall s | note |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in r["subtasks"]:
        note = (s.get("error") or "").replace("\n", " ").replace("|", "\\|")[:120]
        lines.append(
            f"| {s['id']} | {s['status']} | {s['fix_rounds']} | {s['rebases']} | "
            f"{s['wall_s']:.1f} | {note} |"
        )
    lines += ["", "## Where the time went", "", "| phase | seconds (summed over agents) |"]
    lines.append("| --- | --- |")
    for phase, seconds in sorted(r["time_by_phase"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {phase} | {seconds:.2f} |")
    o = r.get("overhead", {})
    if o:
        lines += [
            "",
            f"Coordinator CPU: {o['cpu_s']:.2f} s in total, {o['cpu_ms_per_call']:.2f} ms per "
            f"model call, against {o['model_s']:.1f} s of model time "
            f"({o['cpu_vs_model']:.1%}).",
        ]
    return "\n".join(lines) + "\n"
