"""`swarm solve` and `swarm resume`: a task file against a real git repository.

This module turns a request (task file, flags, or a journaled run to resume) into a
`RunSpec` and plugs the real world into a `Run`: git worktrees, the task's check in a
subprocess, the merge queue on the `swarm/<run-id>` branch. Everything else — journal,
budget, tracing, router, report — is the `Run`'s.
"""

from __future__ import annotations

import glob
import secrets
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from swarm._routing.tiers import with_task_tiers
from swarm._sandbox import Sandbox, SandboxPolicy, _volume, bwrap_problem, make_sandbox
from swarm._sandbox._spawner import spawn_server
from swarm.budget import BudgetLimits
from swarm.config import ClusterConfig, MergeConfig, SwarmConfig, load_config
from swarm.errors import ConfigError, WorkspaceError
from swarm.model import Provider
from swarm.run._check import Baseline, Checker, run_baseline
from swarm.run._environment import CheckEnvironment, interpreters_in
from swarm.run._git import common_dir, rmdir_if_empty, stale_ref_lock
from swarm.run._lock import run_lock
from swarm.run._merge import MergeQueue, Merger, QueueSettings
from swarm.run._plan import load_plan
from swarm.run._report import RunReport, RunStatus
from swarm.run._run import Run, RunSpec, cause
from swarm.run._seams import (
    Cluster,
    ClusterOpener,
    GitWorkspaces,
    ModelSource,
    RunOptions,
    Seams,
)
from swarm.run._target import ensure_demo, target_repo
from swarm.run._task import Task, load_task
from swarm.run._workspace import cleanup_stale, git
from swarm.run.journal import Journal

__all__ = ["GitWorld", "SolveRequest", "new_run_id", "solve"]


@dataclass(frozen=True)
class SolveRequest:
    """What `swarm solve` (or `swarm resume`, with `run_id`) was asked to do."""

    task_path: str
    repo: str | None = None
    plan_path: str | None = None
    config_path: str | None = None
    max_agents: int | None = None
    budget: BudgetLimits | None = None
    """Limits from the command line; they take precedence over the task's and config's."""
    state_dir: str = ".swarm"
    traces_dir: str | None = None
    """Default: `traces/`, or `<state_dir>/traces` when run from inside the repository
    (a run leaves nothing untracked in the user's repository)."""
    quiet: bool = False
    live: bool | None = None
    run_id: str | None = None
    """Set when resuming."""
    sandbox: str | None = None
    """`bwrap` or `none` (`--sandbox`): over the task's `sandbox:` and the config's."""
    network: str | None = None
    """`off`, `loopback`, `allow` or `host` (`--network`): over the task's and the config's."""
    allow: list[str] | None = None
    """`HOST:PORT` entries (`--allow`): over the task's `allow:` and `[sandbox] allow`."""
    keep_branch: bool = False
    """Keep the `swarm/<run-id>` branch of a run that fails (`--keep-branch`)."""
    cluster: str | None = None
    """A Ray cluster's address (`--cluster auto`, `HOST:PORT`, `ray://HOST:PORT`): over
    `[cluster]` in the config; `local` keeps every workspace on this machine."""


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class GitWorld:
    """The real world: a git repository, worktrees, the check, the merge queue."""

    def __init__(
        self,
        repo: Path,
        task: Task,
        providers: Mapping[str, Provider] | None = None,
        sandbox: Sandbox | None = None,
        merge: MergeConfig | None = None,
        cluster: Cluster | None = None,
        *,
        keep_branch: bool = False,
    ) -> None:
        self.repo, self.task, self.cluster = repo, task, cluster
        self.keep_branch = keep_branch
        """Keep a failed run's `swarm/<run-id>` branch (its patch is written either way)."""
        self.repo_label = str(repo)
        self.providers = providers
        self.merge = merge or MergeConfig()
        self.environment = CheckEnvironment.resolve(
            repo,
            python=task.python,
            env=task.env,
            include=task.include,
            setup=task.setup,
            sandbox=(sandbox or make_sandbox(kind=task.sandbox)).with_read_only(
                interpreters_in(task.check, task.accept, task.setup)
            ),
        )
        self.checker = Checker(
            self.environment,
            timeout_s=self.merge.check_timeout,
            max_concurrent=self.merge.slots,
            place=cluster.place if cluster else None,
        )

    def seams(self, run_id: str) -> Seams:
        local = Seams(
            workspaces=GitWorkspaces(self.repo, run_id, self.environment, reuse=True),
            check=self.checker,
            environment=self.environment,
            check_slot=self.checker.slot,
        )
        if self.cluster is None:
            return local
        return self.cluster.seams(local, repo=self.repo, run_id=run_id)

    async def base(self) -> str:
        return await git("rev-parse", "HEAD", cwd=self.repo)

    async def prepare(self, run_id: str) -> None:
        """Every run's leftovers whose process is gone (a killed run's worktrees, branches
        and the commands still running in them), not only this run's."""
        await cleanup_stale(self.repo)

    def merger(
        self, run_id: str, base: str, task: Task, options: RunOptions
    ) -> AbstractAsyncContextManager[Merger]:
        settings = QueueSettings(
            self.checker,
            self.environment,
            hooks=task.hooks == "run",
            batch_check=task.check_for(()),
            config=options.merge,
        )
        return MergeQueue.open(self.repo, run_id=run_id, base=base, settings=settings)

    async def baseline(self, queue: Merger, task: Task) -> Baseline:
        """The checks on the base commit, before any work (see `swarm.run._check`)."""
        return await run_baseline(self.checker, queue.worktree, task)

    async def warnings(self, task: Task) -> list[str]:
        notes = [self.environment.describe(), _sandbox_note(self.environment.sandbox)]
        dirty = await git("status", "--porcelain", "--untracked-files=no", cwd=self.repo)
        if dirty.strip():
            head = (await self.base())[:12]
            notes.append(
                f"{self.repo} has uncommitted changes: the run starts from HEAD ({head}) "
                "and leaves them out"
            )
        if (stale := stale_ref_lock(await common_dir(self.repo))) is not None:
            notes.append(stale)
        for pattern in task.include:
            if not glob.glob(pattern, root_dir=self.repo, recursive=True, include_hidden=True):
                notes.append(f"include: {pattern!r} matches nothing in {self.repo}")
        if not task.check and not task.accept:
            notes.append("the task has no check: subtasks merge untested, and nothing says done")
        notes.append(
            f"git hooks: run when swarm commits ({self.environment.sandbox.kind} sandbox)"
            if task.hooks == "run"
            else "git hooks: not run (`hooks: run` in the task runs them)"
        )
        return notes

    async def result(
        self, run_id: str, base: str, status: RunStatus
    ) -> tuple[str | None, str | None]:
        """The run's branch and patch; a branch with nothing on it is deleted (a resumed
        run makes it again), and so is a failed run's unless `keep_branch`: the patch
        keeps its work, and no `swarm/<id>` branch is left behind by a run that failed."""
        branch = f"swarm/{run_id}"
        try:
            rmdir_if_empty((await common_dir(self.repo)) / "swarm-worktrees" / run_id)
            ahead = await git("rev-list", "--count", f"{base}..{branch}", cwd=self.repo)
            if ahead == "0":
                await git("branch", "-D", branch, cwd=self.repo)
                return None, ""
            diff = await git("diff", f"{base}..{branch}", cwd=self.repo)
            if status == "failed" and not self.keep_branch:
                await git("branch", "-D", branch, cwd=self.repo)
                return None, diff
            return branch, diff
        except WorkspaceError:
            return None, ""

    def models(self, source: ModelSource) -> ModelSource:
        return source


async def solve(
    req: SolveRequest,
    *,
    source: ModelSource | None = None,
    cluster: ClusterOpener | None = None,
    on_trace: Callable[[Path], None] | None = None,
) -> RunReport:
    """Run (or resume) a task; returns the report (also written to disk).

    `source` replaces the router as the origin of every agent's model (library users,
    tests); journaling, replay and budgets apply either way. `cluster` connects to the
    cluster `[cluster]` or `--cluster` asks for (`swarm._cluster.RayCluster.open`);
    `on_trace` hears where the run's trace will be written before the run starts (the live
    view follows it)."""
    state = Path(req.state_dir)
    await anyio.Path(state).mkdir(parents=True, exist_ok=True)
    (state / ".gitignore").write_text("# swarm's run state: never part of a repository\n*\n")
    with ExitStack() as stack:
        journal = stack.enter_context(Journal.open(state / "journal.db"))
        resuming = req.run_id is not None
        if resuming:
            req = _resume_request(journal, req)
        task = load_task(Path(req.task_path))
        if req.plan_path and not resuming:
            load_plan(Path(req.plan_path))  # a bad plan file fails before a run exists
        run_id = req.run_id or new_run_id()
        repo, demo = target_repo(req.repo, task, state / "demo" / run_id)
        if demo and task.python is None:  # swarm's own demo is tested with swarm's pytest
            task = task.model_copy(update={"python": sys.executable})
        config = _task_roles(load_config(req.config_path), task)
        config = with_task_tiers(config, task.tiers, task.source or "task")
        where = _cluster_config(config.cluster, req.cluster, cluster)
        stack.enter_context(run_lock(state, run_id))
        merge = config.merge.over(task.merge)
        sandbox = _sandbox(config, req, task)
        if not resuming:
            saved = _saved(req, run_id, repo)
            journal.create_run(run_id, task=task.model_dump(), repo=str(repo), config=saved)
        if demo:
            ensure_demo(repo)
        spec = RunSpec(
            run_id=run_id,
            task=task,
            config=config,
            journal=journal,
            limits=config.budget.over(task.budget).over(req.budget),
            options=RunOptions(
                max_agents=req.max_agents or task.max_agents or 8,
                merge=merge,
                subtask_retry_after_s=config.routing.subtask_retry_after_s,
            ),
            state_dir=state,
            traces_dir=_traces_dir(req, state, repo),
            resuming=resuming,
            plan_path=Path(req.plan_path) if req.plan_path else None,
            quiet=req.quiet,
            live=req.live,
            source=source,
        )
        if on_trace is not None:
            on_trace(spec.traces_dir / f"{run_id}.jsonl")
        run: Run | None = None
        try:
            # git and the checks start through a spawn server: the coordinator never forks
            async with spawn_server(), _cluster(where, cluster) as remote:
                providers = _providers(config, demo)
                world = GitWorld(
                    repo, task, providers, sandbox, merge, remote, keep_branch=req.keep_branch
                )
                run = Run(spec, world)
                async with world.environment.sandbox.session(), run:  # its proxy, if any
                    await run.execute()
        except BaseException as exc:
            if run is None or run.report is None:
                _never_started(journal, run_id, exc)
            raise
        assert run.report is not None
        lost = remote.head_lost if remote is not None else None
        if lost is not None and run.report.status == "interrupted":
            journal.set_run_status(run_id, "interrupted", detail=lost)
            return run.report.model_copy(update={"error": lost})
        return run.report


def _never_started(journal: Journal, run_id: str, exc: BaseException) -> None:
    """A run that ended before it started (a cluster it cannot reach, a repository with no
    commit) is `failed` with the reason, not left `running`; interrupted, `interrupted`.
    A resumed run keeps what it was."""
    row = journal.get_run(run_id)
    if row is None or row.status != "running":
        return
    stopped = isinstance(exc, KeyboardInterrupt | anyio.get_cancelled_exc_class())
    status = "interrupted" if stopped else "failed"
    journal.set_run_status(run_id, status, detail="" if stopped else cause(exc))


def _cluster_config(
    config: ClusterConfig, address: str | None, opener: ClusterOpener | None
) -> ClusterConfig:
    """`[cluster]` with `--cluster` over it; a cluster asked for with no way to open one
    is a ConfigError before the run starts."""
    if address is not None:
        kind = "local" if address == "local" else "ray"
        config = config.model_copy(update={"kind": kind, "address": address})
    if config.kind != "local" and opener is None:
        raise ConfigError(
            f"[cluster] kind = {config.kind!r} needs a cluster opener: "
            "solve(..., cluster=swarm._cluster.RayCluster.open)",
            key="cluster",
        )
    return config


@asynccontextmanager
async def _cluster(
    config: ClusterConfig, opener: ClusterOpener | None
) -> AsyncIterator[Cluster | None]:
    """The cluster the run's workspaces go to, or None: this machine."""
    if config.kind == "local" or opener is None:
        yield None
        return
    async with opener(config) as opened:
        yield opened


def _sandbox(config: SwarmConfig, req: SolveRequest, task: Task) -> Sandbox:
    """`[sandbox]` with the task's and the command line's choices over it."""
    return make_sandbox(
        config.sandbox,
        kind=req.sandbox or task.sandbox,
        network=req.network or task.network,
        allow=req.allow if req.allow is not None else task.allow,
    )


def _sandbox_note(sandbox: Sandbox) -> str:
    if sandbox.kind == "none":
        why = bwrap_problem()
        return "sandbox: none: agents' commands and checks run on this machine with your rights" + (
            f" ({why})" if why else ""
        )
    policy = sandbox.policy
    network = {
        "off": "no network",
        "host": "the host's network",
        "loopback": f"the host's loopback at {', '.join(policy.allow)} only",
        "allow": f"network through swarm's proxy to {', '.join(policy.allow)} only",
    }[policy.network]
    return (
        f"sandbox: {sandbox.kind}: commands write only their worktree; {network}; {_disk(policy)}"
    )


def _disk(policy: SandboxPolicy) -> str:
    """How a worktree's disk quota is held: by the kernel (a filesystem per worktree) or
    by a check."""
    quota = policy.limits.disk_mb
    if quota is None:
        return "no disk quota"
    why = _volume.unusable()
    if why is None:
        return f"{quota} MB of disk per worktree, held by the kernel (a filesystem each)"
    return f"{quota} MB of disk per worktree, checked while commands run ({why})"


def _task_roles(config: SwarmConfig, task: Task) -> SwarmConfig:
    """The config with the task's `roles:` applied; a tier it names must exist."""
    for role, tier in task.roles.items():
        if tier not in config.tiers:
            known = ", ".join(sorted(config.tiers))
            raise ConfigError(
                f"unknown tier {tier!r}; configured tiers: {known}",
                path=task.source or "task",
                key=f"roles.{role}",
            )
    if not task.roles:
        return config
    return config.model_copy(update={"roles": {**config.roles, **task.roles}})


def _traces_dir(req: SolveRequest, state: Path, repo: Path) -> Path:
    if req.traces_dir is not None:
        return Path(req.traces_dir)
    inside = Path.cwd().resolve().is_relative_to(repo)
    return state / "traces" if inside else Path("traces")


def _saved(req: SolveRequest, run_id: str, repo: Path) -> dict[str, Any]:
    """The request as the journal keeps it, for `swarm resume`."""
    fields = asdict(replace(req, run_id=run_id, repo=str(repo), budget=None))
    fields["budget"] = req.budget.model_dump(exclude_none=True) if req.budget else None
    return {"request": fields}


def _providers(config: SwarmConfig, demo: bool) -> dict[str, Provider] | None:
    """On the simulator, the demo repository gets the demo's scripted model."""
    if not (config.simulated and demo):
        return None
    from swarm._demo import demo_script
    from swarm.providers.sim import SimProvider
    from swarm.providers.sim._real_model import real_model_script

    return {
        name: SimProvider(
            name,
            script=real_model_script(demo_script, p.real_model, p.seed)
            if p.real_model
            else demo_script,
            seed=p.seed,
            time_scale=p.time_scale,
        )
        for name, p in config.providers.items()
    }


_RESUME_OVERRIDES = (
    *("max_agents", "budget", "quiet", "sandbox", "network", "allow", "keep_branch", "cluster"),
)


def _resume_request(journal: Journal, req: SolveRequest) -> SolveRequest:
    run = journal.get_run(req.run_id or "")
    if run is None:
        known = ", ".join(r.run_id for r in journal.list_runs()[-5:]) or "none"
        raise ConfigError(f"no run {req.run_id!r} in the journal (recent: {known})")
    merged = [k for k, row in journal.subtasks(run.run_id).items() if row.status == "merged"]
    if run.status == "failed" and not run.branch and merged:
        raise ConfigError(
            f"run {run.run_id} failed and its branch was deleted, so the work of "
            f"{', '.join(sorted(merged))} is only in its patch "
            f"({Path(req.state_dir) / 'runs' / run.run_id}): "
            "start a new run (with --keep-branch to keep a failed run's branch)"
        )
    saved = dict(journal.run_config(run.run_id).get("request", {}))
    saved.pop("budget_usd", None), saved.pop("max_steps", None), saved.pop("deadline_s", None)
    budget = saved.get("budget")
    saved["budget"] = BudgetLimits.model_validate(budget) if budget else None
    if req.budget is not None:
        saved["budget"] = (saved["budget"] or BudgetLimits()).over(req.budget)
    for key in _RESUME_OVERRIDES:
        value = getattr(req, key)
        if value not in (None, False) and key != "budget":
            saved[key] = value
    saved["run_id"] = run.run_id
    saved["live"] = req.live
    return SolveRequest(**saved)
