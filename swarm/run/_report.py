"""The run report: the outcome of every subtask, tokens, cost and where the time went.

One typed object, `RunReport`; `report.md`, `report.json`, `swarm solve --json` and the
CLI's exit code are all rendered from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "FinishEstimate",
    "MergeStats",
    "Overhead",
    "RunReport",
    "RunStatus",
    "SubtaskReport",
    "one_line",
    "render_markdown",
]

RunStatus = Literal["done", "failed", "stopped", "interrupted"]


class SubtaskReport(BaseModel):
    """How one subtask ended."""

    model_config = ConfigDict(frozen=True)
    id: str
    title: str
    status: str
    """merged, empty (nothing to merge), failed, stopped (started, then the run stopped)
    or skipped (never started)."""
    fix_rounds: int = 0
    rebases: int = 0
    commit: str | None = None
    error: str | None = None
    wall_s: float = 0.0
    check: str | None = None
    """What its check in its worktree ran: `impact: N of M test files` (the tests its change
    reaches by imports; the merge queue ran the whole check), or `full: why`; None: no
    check ran there."""
    warning: str | None = None
    """What its change did that nobody asked for (definitions it removed)."""
    nodes_lost: list[str] = []
    """Each cluster node lost under it (`node ID lost during WHAT at S s`): it started
    again from its base on another."""
    started_afresh: list[str] = []
    """Each time its check stayed red through the fix rounds and a new coder started it
    again from its base (what was red), the red change thrown away."""


class Overhead(BaseModel):
    """The coordinator's own CPU against the time spent waiting for models."""

    model_config = ConfigDict(frozen=True)
    cpu_s: float
    model_s: float
    cpu_ms_per_call: float
    cpu_vs_model: float


class MergeStats(BaseModel):
    """What the merge queue did: batches, splits, checks, against one check per merge."""

    batches: int = 0
    """Batches built and checked (speculative ones included)."""
    splits: int = 0
    """Rounds of splitting a red batch to find its culprit."""
    rebuilds: int = 0
    """Speculative batches started again because one ahead turned red."""
    alternates: int = 0
    """Batches behind a red one that went on with their alternate (built without it, in
    case it was red) instead of starting again."""
    probes: int = 0
    """Batches checked alone on the head before joining the line (once a batch has been
    red), not counted in `batches`."""
    merged: int = 0
    """Patches that landed."""
    checks_run: int = 0
    """Merge checks run (results reused from a subtask's own check of the same tree not
    counted)."""
    check_s: float = 0.0
    """Time those checks took, summed."""

    @property
    def one_at_a_time_checks(self) -> int:
        """Checks a one-at-a-time queue runs for the same merges: one each."""
        return self.merged

    @property
    def one_at_a_time_check_s(self) -> float:
        """The time those take, one after another, at this run's mean check time."""
        return self.merged * self.check_s / self.checks_run if self.checks_run else 0.0


class FinishEstimate(BaseModel):
    """One estimate of the run's finish, as its pulse file recorded it (`swarm.run._pulse`)."""

    model_config = ConfigDict(frozen=True)
    at_ns: int
    """When it was made (Unix ns, the spans' clock)."""
    elapsed_s: float
    """Seconds since the run's subtasks started."""
    left_s: float
    """Seconds to the last subtask's end, as then estimated."""
    low_s: float | None = None
    high_s: float | None = None
    """The estimate's range."""


class RunReport(BaseModel):
    """Everything a user (or a script, with `--json`) needs to know about a finished run."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    status: RunStatus
    stop_reason: str | None = None
    """What stopped the run early: `steps`, `usd`, `tokens`, `deadline`, or None."""
    error: str | None = None
    simulated: bool = False
    repo: str
    branch: str | None
    """The integration branch (`swarm/<run-id>`); None for a simulated world."""
    patch: str | None
    report: str | None
    """Path of report.md."""
    trace: str | None
    wall_s: float
    cost_usd: float
    tokens: int
    output_tokens: int = 0
    calls: int
    final_check: Literal["passed", "failed"] | None = None
    subtasks: list[SubtaskReport]
    time_by_phase: dict[str, float]
    overhead: Overhead
    merge: MergeStats | None = None
    """What the merge queue did (None: no queue ran, e.g. a run stopped at its baseline)."""
    spans_dropped: int = 0
    warnings: list[str] = []
    """What the user should know: the checks' environment, uncommitted changes, hooks."""
    wall_clock: dict[str, float] = {}
    """The run's wall-clock by cause, from its trace (sums to the run's length)."""
    baseline: dict[str, str] = {}
    """Each check command's state on the base commit (`passed`, `failed (N known failures)`)."""
    flaky: list[str] = []
    """Tests seen to fail and pass on the same tree: excused, never blamed on a change."""
    stuck: dict[str, str] = {}
    """Agents stopped for repeating themselves, by agent id: the reply they kept sending."""
    missing: list[str] = []
    """Names the task asks for that no file of the branch has: what it asked is not all
    there, whatever the check says."""
    left_behind: dict[str, list[str]] = {}
    """Names the task renames that lines of the branch still hold, with those lines."""
    estimates: list[FinishEstimate] = []
    """Each estimate of the finish the run made (also in its trace's pulse file), so
    `swarm trace summary` can judge them when the trace travels without that file."""

    @property
    def ok(self) -> bool:
        return self.status == "done"

    def count(self, status: str) -> int:
        return sum(1 for s in self.subtasks if s.status == status)

    def write(self, directory: Path) -> Path:
        """Write report.json and report.md into `directory`; returns report.md's path."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "report.json").write_text(self.model_dump_json(indent=2) + "\n")
        path = directory / "report.md"
        path.write_text(render_markdown(self))
        return path


def render_markdown(r: RunReport) -> str:
    label = " (simulated)" if r.simulated else ""
    stop = f" ({r.stop_reason})" if r.stop_reason else ""
    # the check is green, yet a subtask (or the run) left out what it was asked for
    if warned := sum(1 for s in r.subtasks if s.warning) + bool(r.missing) + len(r.left_behind):
        stop += f", with {warned} warning{'s' if warned > 1 else ''} (below)"
    lines = [
        f"# swarm run {r.run_id}{label}",
        "",
        f"- status: **{r.status}**{stop}",
        f"- branch: `{r.branch}`" if r.branch else f"- branch: {_no_branch(r)}",
        f"- patch: `{r.patch}`" if r.patch else "- patch: none",
        f"- trace: `{r.trace}`",
        f"- wall-clock: {r.wall_s:.1f} s; model calls: {r.calls}; "
        f"tokens: {r.tokens:,}; cost: ${r.cost_usd:.4f}",
        f"- final check: {r.final_check or 'not run'}",
    ]
    if r.error:
        lines.append(f"- error: {r.error}")
    for command, state in r.baseline.items():
        lines.append(f"- baseline: `{command}` {state} before any change")
    lines += [f"- note: {w}" for w in r.warnings]
    if r.flaky:
        lines.append(f"- flaky tests (excused): {', '.join(r.flaky[:20])}")
    for agent, text in r.stuck.items():
        lines.append(f"- stuck: {agent} kept sending: {_one_line(text, 200)}")
    if r.missing:
        names = ", ".join(f"`{name}`" for name in r.missing)
        lines.append(f"- warning: the task asks for {names}; no file of the branch has it")
    for old, where in r.left_behind.items():
        shown = ", ".join(line.split(": ", 1)[0] for line in where)
        lines.append(f"- warning: the task renames `{old}`; the branch still has it at {shown}")
    lines += [f"- warning: {s.id}: {s.warning}" for s in r.subtasks if s.warning]
    lines += [
        "",
        "## Subtasks",
        "",
        "| id | status | fix rounds | rebases | wall s | check | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in r.subtasks:
        note = "; ".join([*s.nodes_lost, *s.started_afresh, *filter(None, [s.error, s.warning])])
        note = note.replace("\n", " ").replace("|", "\\|")[:240]
        check = _one_line(s.check, 80) if s.check else ""
        lines.append(
            f"| {s.id} | {s.status} | {s.fix_rounds} | {s.rebases} | {s.wall_s:.1f} | "
            f"{check} | {note} |"
        )
    lines += ["", "## Where the time went", "", "| phase | seconds (summed over agents) |"]
    lines.append("| --- | --- |")
    for phase, seconds in sorted(r.time_by_phase.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {phase} | {seconds:.2f} |")
    if r.wall_clock:
        total = sum(r.wall_clock.values()) or 1.0
        lines += ["", "## Where the wall-clock went", "", "| cause | seconds | share |"]
        lines.append("| --- | --- | --- |")
        for cause, seconds in sorted(r.wall_clock.items(), key=lambda kv: -kv[1]):
            lines.append(f"| {cause} | {seconds:.2f} | {seconds / total:.0%} |")
    if (m := r.merge) is not None and m.merged:
        lines += [
            "",
            "## Merge queue",
            "",
            f"- {_n(m.merged, 'patch', 'patches')} landed in {_n(m.batches, 'batch', 'batches')} "
            f"({m.splits} splits to find culprits, {m.rebuilds} speculative rebuilds, "
            f"{m.probes} probes, {m.alternates} alternates used)",
            f"- merge checks run: {m.checks_run} ({m.check_s:.1f} s); a one-at-a-time "
            f"queue runs {m.one_at_a_time_checks} (~{m.one_at_a_time_check_s:.1f} s, "
            "one after another)",
        ]
    o = r.overhead
    per_call = (
        f"{o.cpu_ms_per_call:.2f} ms per model call, against {o.model_s:.1f} s of model "
        f"time ({o.cpu_vs_model:.1%})"
        if r.calls
        else "no model call completed"
    )
    lines += ["", f"Coordinator CPU: {o.cpu_s:.2f} s in total, {per_call}."]
    return "\n".join(lines) + "\n"


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def one_line(text: str, limit: int) -> str:
    """`text` on one line, cut at `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _one_line(text: str, limit: int) -> str:
    """`one_line`, with `|` escaped for a Markdown table."""
    return one_line(text.replace("|", "\\|"), limit)


def _no_branch(r: RunReport) -> str:
    if any(s.status == "merged" for s in r.subtasks):
        return "none kept (the run did not finish; `--keep-branch` keeps what merged)"
    return "none (nothing merged)"
