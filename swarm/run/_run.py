"""The `Run`: one object per run, owning its id, journal, budget, tracing, progress and router.

`swarm solve`, `swarm resume` and `swarm simulate` all go through it; they differ only in
the `World` they plug in (the real repository with git worktrees, checks and the merge
queue, or a simulated one) and in where the plan comes from:

    async with Run(spec, world) as run:
        await run.execute()
    report = run.report

Opening a run starts its budget's deadline, its trace file and root span, its progress
display and its router. Leaving it, on every path (done, stopped by a budget, failed,
cancelled), writes the report and the journal's final state under a shield bounded in
time, then closes the router, the root span and the trace.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Literal, Protocol

import anyio
from opentelemetry.trace import Span, Status, StatusCode

from swarm._routing.router import Router
from swarm._tracing import semconv as sc
from swarm._tracing.pulse import read_pulses
from swarm._tracing.setup import RunTrace, run_tracing, tracer
from swarm.budget import Budget, BudgetLimits
from swarm.config import SwarmConfig, config_key
from swarm.errors import BudgetExceeded, SwarmError
from swarm.messages import ModelSettings
from swarm.model import Provider
from swarm.run._check import Baseline, plain
from swarm.run._coordinator import Coordinator
from swarm.run._coverage import uncovered_parts
from swarm.run._merge import Merger
from swarm.run._models import RouterSource, RunModels
from swarm.run._outcome import RunOutcome
from swarm.run._plan import Plan, load_plan
from swarm.run._progress import Progress
from swarm.run._report import (
    FinishEstimate,
    MergeStats,
    Overhead,
    RunReport,
    RunStatus,
    one_line,
)
from swarm.run._seams import (
    ModelSource,
    Pooled,
    RunOptions,
    Seams,
    Workspaces,
    warming,
)
from swarm.run._slack import RouteHints
from swarm.run._task import Task
from swarm.run.journal import Journal

__all__ = ["Run", "RunSpec", "World"]

FINISH_TIMEOUT_S = 30.0
"""The longest the shielded end of a run (report, journal) may take."""


class World(Protocol):
    """What a run acts on: the real repository, or a simulated one."""

    @property
    def repo_label(self) -> str:
        """The repository as the report names it."""
        ...

    @property
    def providers(self) -> Mapping[str, Provider] | None:
        """Providers by name instead of those the config builds (the simulator's)."""
        ...

    def seams(self, run_id: str) -> Seams:
        """Where workspaces, checks and tools come from."""
        ...

    async def base(self) -> str:
        """The commit the run starts from."""
        ...

    async def prepare(self, run_id: str) -> None:
        """Clear what crashed earlier runs (this one included) left behind."""
        ...

    def merger(
        self, run_id: str, base: str, task: Task, options: RunOptions
    ) -> AbstractAsyncContextManager[Merger]: ...

    async def result(
        self, run_id: str, base: str, status: RunStatus
    ) -> tuple[str | None, str | None]:
        """The run's branch and its patch against `base` (None, None when there is none);
        a run ending in `status` "failed" may leave no branch, only the patch."""
        ...

    async def baseline(self, queue: Merger, task: Task) -> Baseline:
        """The checks on the base commit, before any work."""
        ...

    async def warnings(self, task: Task) -> list[str]:
        """What the user should know before the run spends anything."""
        ...

    def models(self, source: ModelSource) -> ModelSource:
        """The model source agents get (a simulated world may record calls)."""
        ...


@dataclass(frozen=True)
class RunSpec:
    """Everything a run is opened with."""

    run_id: str
    task: Task
    config: SwarmConfig
    journal: Journal
    limits: BudgetLimits
    options: RunOptions
    state_dir: Path | None = None
    """Where runs/<id>/ (patch, report) go; None writes no files."""
    traces_dir: Path = Path("traces")
    resuming: bool = False
    plan_path: Path | None = None
    quiet: bool = False
    live: bool | None = None
    source: ModelSource | None = None
    """Replaces the router as the origin of every agent's model (tests, library users)."""


class Run:
    """One run; see the module docstring."""

    def __init__(self, spec: RunSpec, world: World) -> None:
        self.spec, self.world = spec, world
        self.id = spec.run_id
        tiers = {t: tc.budget for t, tc in spec.config.tiers.items() if tc.budget}
        self.budget = Budget(spec.limits, tiers=tiers)
        self.progress = Progress(self.budget, quiet=spec.quiet, live=spec.live)
        self.report: RunReport | None = None
        """Set when the run has ended, whatever ended it."""
        self.outcome: RunOutcome | None = None
        self._models: RunModels | None = None
        self._source: ModelSource | None = None
        self._stack = AsyncExitStack()
        self._t0 = self._cpu0 = 0.0
        self._base = ""
        self.baseline = Baseline()
        self.merge_stats: MergeStats | None = None
        self.warnings: list[str] = []

    @property
    def models(self) -> RunModels:
        """Where agents get their models (the router's, journaled), once the run is open."""
        if self._models is None:
            raise RuntimeError("a Run's models need the run open: `async with Run(...) as run`")
        return self._models

    @property
    def journal(self) -> Journal:
        return self.spec.journal

    @property
    def settings(self) -> Mapping[str, ModelSettings]:
        """Model settings by role (`[settings.<role>]` in the config)."""
        return self.spec.config.settings

    @property
    def hints(self) -> RouteHints | None:
        """Where the coordinator tells the router the run's shape (None: a model source of
        the caller's own, no router to tell)."""
        return self._source.hints if isinstance(self._source, RouterSource) else None

    async def __aenter__(self) -> Run:
        self._t0, self._cpu0 = time.perf_counter(), time.process_time()
        self.budget.start()
        spec = self.spec
        try:
            self._trace: RunTrace = self._stack.enter_context(
                run_tracing(self.id, traces_dir=spec.traces_dir, resume=spec.resuming)
            )
            self._stack.enter_context(self.progress)
            attrs = {sc.OPERATION: sc.OP_WORKFLOW, sc.WORKFLOW_NAME: "swarm", sc.RUN_ID: self.id}
            name = sc.workflow_span_name(spec.task.title)
            # its status is the run's cause, set when it ends: OTel's own would be
            # "ExceptionGroup: unhandled errors in a TaskGroup" (what Phoenix showed)
            self._span: Span = self._stack.enter_context(
                tracer().start_as_current_span(
                    name, attributes=attrs, record_exception=False, set_status_on_exception=False
                )
            )
            router = Router(spec.config, providers=self.world.providers, budget=self.budget)
            self.router = await self._stack.enter_async_context(router)
            source = self._source = spec.source or RouterSource(self.router, spec.config)
            self._models = RunModels(
                self.world.models(source),
                spec.journal,
                run_id=self.id,
                budget=self.budget,
                config=spec.config,
                reserves=spec.source is not None,
            )
            self._base = await self.world.base()
            self.warnings = await self.world.warnings(spec.task)
            if spec.source is None and self.world.providers is None:
                self.warnings += _missing_keys(spec.config)
        except BaseException as exc:
            await self._stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        if spec.config.simulated:
            self.progress.note(
                "swarm: no provider keys found: running on the simulator "
                "(simulated models and latency)"
            )
        for warning in self.warnings:
            self.progress.note(f"swarm: {warning}")
        return self

    async def execute(self) -> RunOutcome:
        """Plan (or load the plan), then code, test, fix and merge every subtask."""
        spec = self.spec
        if self._models is None:
            raise RuntimeError("Run.execute() needs the run open: `async with Run(...) as run`")
        routing = spec.config.routing
        options = replace(
            spec.options,
            escalate_after=routing.escalate_after,
            fresh_starts=routing.fresh_starts,
        )
        seams = self.world.seams(self.id)
        coordinator = Coordinator(self, spec.task, options=options, seams=seams)
        await self.world.prepare(self.id)
        try:
            return await self._execute(coordinator, seams.workspaces)
        finally:
            if isinstance(seams.workspaces, Pooled):
                await seams.workspaces.aclose()

    async def _execute(self, coordinator: Coordinator, workspaces: Workspaces | None) -> RunOutcome:
        spec = self.spec
        async with self.world.merger(self.id, self._base, spec.task, spec.options) as queue:
            # the first wave's worktrees are made while the baseline check and planner run
            async with warming(workspaces, queue.head, spec.options.max_agents):
                plan = await self._baseline_and_plan(coordinator, queue)
            if isinstance(plan, RunOutcome):
                return plan
            done = await self._done(queue, plan)
            self.progress.note(
                f"swarm: plan has {len(plan.subtasks)} subtasks ({len(done)} already merged)"
            )
            try:
                self.outcome = await coordinator.run(plan, queue, done=done)
            finally:
                self.merge_stats = queue.stats
        return self.outcome

    async def _baseline_and_plan(
        self, coordinator: Coordinator, queue: Merger
    ) -> Plan | RunOutcome:
        """The plan, or the outcome of a run that stops before it."""
        self.baseline = await self.world.baseline(queue, self.spec.task)
        if self.baseline.stop:
            self.progress.note(f"swarm: {self.baseline.stop}")
            return self._stopped("baseline", coordinator)
        try:
            with anyio.move_on_after(self.budget.remaining_s()) as planning:
                plan = await self._plan(coordinator, queue.head)
        except BudgetExceeded as exc:
            return self._stopped(exc.kind, coordinator)
        if planning.cancelled_caught:
            return self._stopped("deadline", coordinator)
        return plan

    async def _done(self, queue: Merger, plan: Plan) -> frozenset[str]:
        """Subtasks merged by an earlier process: the journal's, and those the branch holds
        though the journal never heard (a kill between a landing and its record)."""
        rows = self.spec.journal.subtasks(self.id)
        done = {k for k, row in rows.items() if row.status in ("merged", "empty")}
        ids = {st.id for st in plan.subtasks}
        for name, commit in (await queue.landed()).items():
            if name in ids and name not in done:
                self.spec.journal.set_subtask(self.id, name, "merged", commit=commit)
                done.add(name)
        return frozenset(done)

    def _stopped(self, reason: str, coordinator: Coordinator) -> RunOutcome:
        self.outcome = RunOutcome((), reason, None, coordinator.times)
        return self.outcome

    async def _plan(self, coordinator: Coordinator, head: str) -> Plan:
        journal = self.spec.journal
        plan = journal.load_plan(self.id)
        if plan is None:
            path = self.spec.plan_path
            plan = load_plan(path) if path else await coordinator.make_plan(head)
            journal.save_plan(self.id, plan)
        self.warnings += [
            f"subtask {part!r} folded into {whole!r}: it waited on it and worked only on "
            "its files, so one coder does both"
            for part, whole in plan.folded
        ]
        if not self.spec.plan_path:  # the planner's: what it left out after being told
            self.warnings += [
                f"the plan leaves out a part of the task: {one_line(part, 160)}"
                for part in uncovered_parts(self.spec.task.instructions, plan)
            ]
        return plan

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        status: RunStatus = self.outcome.status if self.outcome else "failed"
        error = None
        if exc is not None:
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            status = "interrupted" if cancelled else "failed"
            error = None if cancelled else cause(exc)
        try:
            with anyio.move_on_after(FINISH_TIMEOUT_S, shield=True):
                self.report = await self._finish(status, error)
        finally:  # the router's close is bounded itself; span and trace ends are sync
            if error is not None:
                self._span.set_status(Status(StatusCode.ERROR, error))
            with anyio.move_on_after(FINISH_TIMEOUT_S, shield=True):
                await self._stack.__aexit__(exc_type, exc, tb)
        if self.report is not None:
            dropped = self._trace.dropped
            self.report = self.report.model_copy(update={"spans_dropped": dropped})

    async def _finish(self, status: RunStatus, error: str | None) -> RunReport:
        spec, outcome = self.spec, self.outcome
        branch, diff = await self.world.result(self.id, self._base, status)
        run_dir = spec.state_dir / "runs" / self.id if spec.state_dir else None
        patch = run_dir / f"{self.id}.patch" if run_dir and diff is not None else None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
        if patch is not None:
            patch.write_text(diff + "\n" if diff else "")
        subtasks = [s.report() for s in outcome.subtasks] if outcome else []
        warnings = self.warnings + self._hurried()
        if subtasks and all(s.status == "empty" for s in subtasks):
            warnings.append("nothing changed: every subtask ended with an empty patch")
        report = RunReport(
            run_id=self.id,
            status=status,
            stop_reason=outcome.stop_reason if outcome else None,
            error=error or self.baseline.stop or self._unaccepted(outcome),
            warnings=warnings,
            baseline=self.baseline.summary(),
            simulated=spec.config.simulated and spec.source is None,
            repo=self.world.repo_label,
            branch=branch,
            patch=str(patch) if patch else None,
            report=str(run_dir / "report.md") if run_dir else None,
            trace=str(self._trace.path),
            wall_s=round(time.perf_counter() - self._t0, 3),
            **self._spending(),
            final_check=_final(outcome),
            subtasks=subtasks,
            time_by_phase={
                k: round(v, 3) for k, v in (outcome.times.by_phase.items() if outcome else ())
            },
            overhead=self._overhead(),
            merge=self.merge_stats,
            stuck=dict(outcome.stuck) if outcome else {},
            missing=list(outcome.missing) if outcome else [],
            left_behind=dict(outcome.left_behind) if outcome else {},
            flaky=sorted(self.baseline.flaky),
            estimates=_estimates(self._trace.path),
        )
        if run_dir is not None:
            report.write(run_dir)
        spec.journal.set_run_status(
            self.id,
            status,
            branch=branch or "",
            cost_usd=report.cost_usd,
            tokens=report.tokens,
            detail=report.stop_reason or error or "",
        )
        self.progress.note(f"swarm: {status}: {top_line(report)} · report {report.report}")
        return report

    def _unaccepted(self, outcome: RunOutcome | None) -> str | None:
        """What failed, when the done condition still fails on the final tree."""
        final = outcome.final_check if outcome else None
        if final is None or final.passed:
            return None
        command = self.spec.task.accept_command
        lines = [ln for ln in plain(final.output).splitlines() if ln.strip()]
        last = lines[-1].strip()[:300] if lines else "no output"
        how = "timed out" if final.timed_out else f"exited {final.exit_code}"
        return f"the done condition still fails on the final tree: `{command}` {how}: {last}"

    def _hurried(self) -> list[str]:
        return list(self.hints.changes) if self.hints is not None else []

    def _spending(self) -> dict[str, float | int]:
        spent = self.budget.spent
        return {
            "cost_usd": round(spent.usd, 6),
            "tokens": spent.tokens,
            "output_tokens": spent.output_tokens,
            "calls": spent.steps,
        }

    def _overhead(self) -> Overhead:
        cpu_s = time.process_time() - self._cpu0
        model_s = self._models.model_s if self._models else 0.0
        calls = max(1, self.budget.spent.steps)
        return Overhead(
            cpu_s=round(cpu_s, 3),
            model_s=round(model_s, 3),
            cpu_ms_per_call=round(1000 * cpu_s / calls, 3),
            cpu_vs_model=round(cpu_s / model_s, 4) if model_s else 0.0,
        )


def _estimates(trace_path: Path) -> list[FinishEstimate]:
    """The finish estimates the run's pulse file holds (`swarm.run._pulse`)."""
    records, _ = read_pulses(trace_path)
    return [
        FinishEstimate(
            at_ns=r.at_ns, elapsed_s=r.elapsed_s, left_s=r.left_s, low_s=r.low_s, high_s=r.high_s
        )
        for r in records
        if r.left_s is not None
    ]


def top_line(report: RunReport) -> str:
    """The run's outcome in one line: counts by status, the branch, or that nothing changed."""
    counts: dict[str, int] = {}
    for s in report.subtasks:
        counts[s.status] = counts.get(s.status, 0) + 1
    order = ("merged", "empty", "failed", "stopped", "skipped")
    parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
    total = len(report.subtasks)
    said = f"{', '.join(parts)} of {total} subtask{'s' if total != 1 else ''}" if parts else ""
    if report.branch:
        where = f"branch {report.branch}"
    elif total and counts.get("empty") == total:
        where = "nothing changed"
    elif counts.get("merged"):
        where = "no branch kept (the run did not finish; --keep-branch keeps one)"
    else:
        where = "no branch (nothing merged)"
    return " · ".join(p for p in (said, where) if p)


def cause(exc: BaseException) -> str:
    """What went wrong, as one line: a task group's `ExceptionGroup` is opened to the
    errors inside it (cancellations left out), never reported as itself."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        elif not isinstance(e, anyio.get_cancelled_exc_class()):
            leaves.append(e)

    walk(exc)
    if not leaves:
        return f"{type(exc).__name__}: {exc}"
    first = leaves[0]
    text = str(first) if isinstance(first, SwarmError) else f"{type(first).__name__}: {first}"
    more = f" (and {len(leaves) - 1} more)" if len(leaves) > 1 else ""
    return text + more


def _final(outcome: RunOutcome | None) -> Literal["passed", "failed"] | None:
    if outcome is None or outcome.final_check is None:
        return None
    return "passed" if outcome.final_check.passed else "failed"


def _missing_keys(config: SwarmConfig, env: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each provider whose key variable is unset or empty in `env` (default
    `os.environ`): its calls would go out unauthenticated and fail with 401s."""
    if env is None:
        env = os.environ
    out = []
    for name, p in config.providers.items():
        if p.kind != "sim" and p.api_key_env and not env.get(p.api_key_env):
            key = config_key(config.source, "providers", name, "api_key_env")
            where = f"{config.source}:{key}" if config.source else key
            out.append(
                f"{where}: ${p.api_key_env} is not set: calls to provider {name!r} "
                "go out without a key and will be refused"
            )
    return out
