"""What the coordinator hands back: every subtask's outcome, each merge's, how the run ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from opentelemetry.trace import SpanContext

from swarm.run._check import CheckResult
from swarm.run._report import RunStatus, SubtaskReport

__all__ = ["MergeKind", "MergeResult", "PhaseTimes", "RunOutcome", "SubtaskOutcome"]

MergeKind = Literal["merged", "empty", "conflict", "red"]


@dataclass(frozen=True)
class MergeResult:
    """How a patch's way through the merge queue ended."""

    kind: MergeKind
    commit: str | None = None
    output: str = ""
    """git's message for a conflict; the failing check's (or refusing hook's) output."""
    batch: SpanContext | None = None
    """The span of the batch that decided it (a merge wait links to it)."""
    base: str | None = None
    """Red: the commit it was red on top of, when that is not the head (the green patches
    ahead of it in its batch, not landed yet): its rebase fixer starts there."""

    @property
    def ok(self) -> bool:
        return self.kind in ("merged", "empty")


@dataclass
class SubtaskOutcome:
    """One subtask's progress, updated as it runs."""

    id: str
    title: str
    status: str = "pending"
    """pending, running, merged, empty (a green patch with nothing in it), failed or skipped."""
    fix_rounds: int = 0
    rebases: int = 0
    retries: int = 0
    """Times it started again after its provider calls failed."""
    commit: str | None = None
    error: str | None = None
    wall_s: float = 0.0
    check: str | None = None
    """What its last check in its worktree ran: `impact: N of M test files`, or `full: why`."""
    warning: str | None = None
    """What its change did that nobody asked for (definitions it removed)."""
    nodes_lost: list[str] = field(default_factory=list)
    """Each cluster node lost under it (which, doing what, when): it started again."""
    started_afresh: list[str] = field(default_factory=list)
    """Each time it started again from its base after its fix rounds left it red."""

    def warn(self, text: str) -> None:
        """Add `text` to the subtask's warning."""
        self.warning = "; ".join(filter(None, [self.warning, text]))

    def report(self) -> SubtaskReport:
        return SubtaskReport(
            id=self.id,
            title=self.title,
            status=self.status,
            fix_rounds=self.fix_rounds,
            rebases=self.rebases,
            commit=self.commit,
            error=self.error,
            wall_s=round(self.wall_s, 3),
            check=self.check,
            warning=self.warning,
            nodes_lost=list(self.nodes_lost),
            started_afresh=list(self.started_afresh),
        )


@dataclass
class PhaseTimes:
    """Where the wall-clock of agents and checks went, summed over all subtasks."""

    by_phase: dict[str, float] = field(default_factory=dict)

    def add(self, phase: str, seconds: float) -> None:
        self.by_phase[phase] = self.by_phase.get(phase, 0.0) + seconds


@dataclass(frozen=True)
class RunOutcome:
    """How the coordinator's work ended (`Coordinator.run`)."""

    subtasks: tuple[SubtaskOutcome, ...]
    stop_reason: str | None = None
    """A budget kind (`steps`, `usd`, `tokens`, `deadline`), or `providers` when they failed
    subtask after subtask: what stopped the run."""
    final_check: CheckResult | None = None
    times: PhaseTimes = field(default_factory=PhaseTimes)
    stuck: dict[str, str] = field(default_factory=dict)
    """Agents stopped for repeating themselves, by id: what they kept sending."""
    missing: tuple[str, ...] = ()
    """Names the task asks for that no file of the branch has at the end."""
    left_behind: dict[str, list[str]] = field(default_factory=dict)
    """Names the task renames, each with the lines of the branch that still hold it."""

    @property
    def status(self) -> RunStatus:
        if self.stop_reason:
            return "stopped"
        merged = all(s.status in ("merged", "empty") for s in self.subtasks)
        green = self.final_check is None or self.final_check.passed
        return "done" if merged and green else "failed"
