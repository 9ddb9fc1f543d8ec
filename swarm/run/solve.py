"""`swarm solve` and `swarm resume`: one run from task file to branch, patch and report.

This module wires the parts together — task, config, router, journal, tracing, merge
queue, coordinator — and owns the run's lifecycle: it journals the run's state at every
transition, so a run stopped by a budget, a deadline, Ctrl-C or a crash can be resumed.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from swarm.budget import Budgeted, RunBudget
from swarm.config import SwarmConfig, load_config
from swarm.errors import ConfigError, WorkspaceError
from swarm.messages import ChatRequest, ChatResult
from swarm.model import Model, Provider
from swarm.routing.router import Router
from swarm.run.coordinator import Coordinator, ModelSource, SolveOptions
from swarm.run.journal import Journal, ReplayModel
from swarm.run.merge import MergeQueue
from swarm.run.plan import Plan, load_plan
from swarm.run.progress import Progress
from swarm.run.report import write_report
from swarm.run.task import Task, load_task
from swarm.run.workspace import cleanup_stale, git
from swarm.tracing import semconv as sc
from swarm.tracing.setup import run_tracing, tracer

__all__ = ["SolveRequest", "new_run_id", "solve"]


@dataclass(frozen=True)
class SolveRequest:
    task_path: str
    repo: str | None = None
    plan_path: str | None = None
    config_path: str | None = None
    max_agents: int | None = None
    budget_usd: float | None = None
    max_steps: int | None = None
    deadline_s: float | None = None
    state_dir: str = ".swarm"
    traces_dir: str = "traces"
    quiet: bool = False
    live: bool | None = None
    run_id: str | None = None
    """Set when resuming."""


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class RouterSource:
    """Models from the router: each role's tier (the reasoning tier when escalating)."""

    def __init__(self, router: Router, config: SwarmConfig) -> None:
        self.router, self.config = router, config

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        tier = "reasoning" if escalate and "reasoning" in self.config.tiers else None
        return self.router.model(tier or self.config.tier_for_role(role), role=role)


class RunModels:
    """Wraps any model source: journaled (replayed on resume), timed, within the budget."""

    def __init__(
        self, source: ModelSource, journal: Journal, run_id: str, budget: RunBudget
    ) -> None:
        self.source, self.journal, self.run_id, self.budget = source, journal, run_id, budget
        self.model_s = 0.0
        """Summed wall time of model calls made by this process (replays excluded)."""

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        timed = _Timed(self.source.model(role, agent_id=agent_id, escalate=escalate), self)
        journaled = ReplayModel(timed, self.journal, run_id=self.run_id, key=agent_id)
        return Budgeted(journaled, self.budget)


class _Timed:
    def __init__(self, inner: Model, models: RunModels) -> None:
        self.name, self._inner, self._models = inner.name, inner, models

    async def chat(self, request: ChatRequest) -> ChatResult:
        result = await self._inner.chat(request)
        self._models.model_s += result.timing.duration_s
        return result


async def solve(req: SolveRequest, *, source: ModelSource | None = None) -> dict[str, Any]:
    """Run (or resume) a task; returns the report object (also written to disk).

    `source` replaces the router as the origin of every agent's model (library users,
    tests); journaling, replay and budgets apply either way.
    """
    state = Path(req.state_dir)
    await anyio.Path(state).mkdir(parents=True, exist_ok=True)
    with Journal.open(state / "journal.db") as journal:
        if req.run_id:
            req = _resume_request(journal, req)
        task = load_task(Path(req.task_path))
        if req.plan_path and not req.run_id:
            load_plan(Path(req.plan_path))  # a bad plan file fails before a run exists
        run_id = req.run_id or new_run_id()
        repo, demo = _repo_for(req, task, state, run_id)
        config = load_config(req.config_path)
        options = SolveOptions(max_agents=req.max_agents or task.max_agents or 8)
        deadline_s = req.deadline_s or task.deadline_s
        budget = RunBudget(
            max_steps=req.max_steps or task.max_steps,
            max_usd=req.budget_usd or task.budget_usd,
        )
        resuming = req.run_id is not None and journal.get_run(run_id) is not None
        if not resuming:
            journal.create_run(
                run_id,
                task=task.model_dump(),
                repo=str(repo),
                config={"request": asdict(replace(req, run_id=run_id, repo=str(repo)))},
            )
        progress = Progress(budget, quiet=req.quiet, live=req.live)
        if config.simulated:
            progress.note(
                "swarm: no provider keys found: running on the simulator "
                "(simulated models and latency)"
            )
        return await _run(
            req,
            task,
            repo,
            run_id,
            config,
            options,
            deadline_s,
            budget,
            journal,
            progress,
            demo=demo,
            resuming=resuming,
            source=source,
        )


async def _run(
    req: SolveRequest,
    task: Task,
    repo: Path,
    run_id: str,
    config: SwarmConfig,
    options: SolveOptions,
    deadline_s: float | None,
    budget: RunBudget,
    journal: Journal,
    progress: Progress,
    *,
    demo: bool,
    resuming: bool,
    source: ModelSource | None,
) -> dict[str, Any]:
    t0, cpu0 = time.perf_counter(), time.process_time()
    status, error = "failed", None
    coordinator: Coordinator | None = None
    models: RunModels | None = None
    traces = Path(req.traces_dir)
    base = await git("rev-parse", "HEAD", cwd=repo)
    with run_tracing(run_id, traces_dir=traces) as rt, progress:
        root_attrs = {sc.OPERATION: sc.OP_WORKFLOW, sc.WORKFLOW_NAME: "swarm", sc.RUN_ID: run_id}
        with tracer().start_as_current_span(f"{sc.OP_WORKFLOW} swarm", attributes=root_attrs):
            try:
                async with Router(config, providers=_providers(config, demo)) as router:
                    models = RunModels(
                        source or RouterSource(router, config), journal, run_id, budget
                    )
                    coordinator = Coordinator(
                        task=task,
                        repo=repo,
                        run_id=run_id,
                        models=models,
                        journal=journal,
                        budget=budget,
                        options=options,
                        progress=progress,
                    )
                    if resuming:
                        await cleanup_stale(repo, run_id=run_id)
                    status = await _phases(req, coordinator, journal, run_id, base, deadline_s)
            except anyio.get_cancelled_exc_class():
                status = "interrupted"
                raise
            except BaseException as exc:
                status, error = "failed", f"{type(exc).__name__}: {exc}"
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    report = await _finish(
                        req,
                        repo,
                        run_id,
                        base,
                        status,
                        error,
                        coordinator,
                        models,
                        budget,
                        journal,
                        rt.path,
                        t0,
                        cpu0,
                        config.simulated,
                    )
        progress.note(f"swarm: {status}: branch {report['branch']} · report {report['report']}")
    report["spans_dropped"] = rt.dropped
    return report


async def _phases(
    req: SolveRequest,
    c: Coordinator,
    journal: Journal,
    run_id: str,
    base: str,
    deadline_s: float | None,
) -> str:
    queue_base = base
    async with MergeQueue.open(
        c.repo,
        run_id=run_id,
        base=queue_base,
        check=c.task.check,
        timeout_s=c.options.check_timeout_s,
    ) as queue:
        with anyio.move_on_after(deadline_s if deadline_s else float("inf")) as scope:
            plan = await _plan(req, c, journal, run_id, queue.head)
            done = {k for k, row in journal.subtasks(run_id).items() if row.status == "merged"}
            c.progress.note(
                f"swarm: plan has {len(plan.subtasks)} subtasks ({len(done)} already merged)"
            )
            await c.execute(plan, queue, done)
            if c.stop_reason is None:
                await c.verify()
        if scope.cancelled_caught:
            c.stop_reason = "deadline"
    if c.stop_reason:
        return "stopped"
    merged = all(o.status == "merged" for o in c.outcomes.values())
    green = c.final_check is None or c.final_check.passed
    return "done" if merged and green else "failed"


async def _plan(
    req: SolveRequest, c: Coordinator, journal: Journal, run_id: str, head: str
) -> Plan:
    plan = journal.load_plan(run_id)
    if plan is None:
        plan = load_plan(Path(req.plan_path)) if req.plan_path else await c.make_plan(head)
        journal.save_plan(run_id, plan)
    return plan


async def _finish(
    req: SolveRequest,
    repo: Path,
    run_id: str,
    base: str,
    status: str,
    error: str | None,
    c: Coordinator | None,
    models: RunModels | None,
    budget: RunBudget,
    journal: Journal,
    trace: Path,
    t0: float,
    cpu0: float,
    simulated: bool,
) -> dict[str, Any]:
    branch = f"swarm/{run_id}"
    run_dir = Path(req.state_dir) / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    patch_path = run_dir / f"{run_id}.patch"
    try:
        diff = await git("diff", f"{base}..{branch}", cwd=repo)
    except WorkspaceError:
        diff = ""
    patch_path.write_text(diff + "\n" if diff else "")
    cpu_s = time.process_time() - cpu0
    model_s = models.model_s if models else 0.0
    outcomes = list(c.outcomes.values()) if c else []
    report: dict[str, Any] = {
        "run_id": run_id,
        "status": status,
        "stop_reason": c.stop_reason if c else None,
        "error": error,
        "simulated": simulated,
        "repo": str(repo),
        "branch": branch,
        "patch": str(patch_path),
        "report": str(run_dir / "report.md"),
        "trace": str(trace),
        "wall_s": round(time.perf_counter() - t0, 3),
        "cost_usd": round(budget.usd, 6),
        "tokens": budget.tokens,
        "calls": budget.steps,
        "final_check": (
            ("passed" if c.final_check.passed else "failed") if c and c.final_check else None
        ),
        "subtasks": [asdict(o) for o in outcomes],
        "time_by_phase": {k: round(v, 3) for k, v in (c.times.by_phase if c else {}).items()},
        "overhead": {
            "cpu_s": round(cpu_s, 3),
            "model_s": round(model_s, 3),
            "cpu_ms_per_call": round(1000 * cpu_s / max(1, budget.steps), 3),
            "cpu_vs_model": round(cpu_s / model_s, 4) if model_s else 0.0,
        },
    }
    write_report(report, run_dir)
    journal.set_run_status(
        run_id,
        status,
        branch=branch,
        cost_usd=budget.usd,
        tokens=budget.tokens,
        detail=c.stop_reason if c and c.stop_reason else (error or ""),
    )
    return report


def _providers(config: SwarmConfig, demo: bool) -> dict[str, Provider] | None:
    """On the simulator, the demo repository gets the demo's scripted model."""
    if not (config.simulated and demo):
        return None
    from swarm.demo import demo_script
    from swarm.providers.sim import SimProvider

    return {name: SimProvider(name, script=demo_script) for name in config.providers}


def _repo_for(req: SolveRequest, task: Task, state: Path, run_id: str) -> tuple[Path, bool]:
    """The target repository; with none given, a fresh copy of the shipped demo."""
    given = req.repo or task.repo
    if given:
        path = Path(given).expanduser()
        if not path.is_absolute() and not req.repo and task.source:
            path = Path(task.source).parent / path
        if not (path / ".git").exists():
            raise ConfigError("is not a git repository", path=str(path))
        return path.resolve(), False
    from swarm.demo import create_demo_repo

    dest = (state / "demo" / run_id).resolve()
    if not (dest / ".git").exists():
        create_demo_repo(dest)
    return dest, True


def _resume_request(journal: Journal, req: SolveRequest) -> SolveRequest:
    run = journal.get_run(req.run_id or "")
    if run is None:
        known = ", ".join(r.run_id for r in journal.list_runs()[-5:]) or "none"
        raise ConfigError(f"no run {req.run_id!r} in the journal (recent: {known})")
    saved = dict(journal.run_config(run.run_id).get("request", {}))
    saved.update(
        {
            k: v
            for k, v in asdict(req).items()
            if v not in (None, False)
            and k in ("max_agents", "budget_usd", "max_steps", "deadline_s", "quiet")
        }
    )
    saved["run_id"] = run.run_id
    saved["live"] = req.live
    return SolveRequest(**saved)
