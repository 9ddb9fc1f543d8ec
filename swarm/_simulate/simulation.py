"""`swarm simulate`: a synthetic swarm through the real coordinator, router, agents and tracing.

Only the world is simulated (`swarm._sim_swarm`): models are a `SimProvider` with catalog
latency profiles, tools, checks, workspaces and merges are timed sleeps. Everything else —
dispatch under `max_agents`, the fix loop, the merge queue's order, the router's limits,
budgets, the journal, spans — is the production code, so the makespan it reports is what
the orchestrator achieves for that workload.

`bound_s` is the workload's critical-path lower bound: planner, then the longest chain of
subtasks (model calls at the profile's `expected_s`, plus tool, check and merge times) or
the total work spread over `max_agents`, whichever is longer, then the final check.
`bound_actual_s` is the same with each call's actual (jittered) duration: the makespan ÷
that ratio is the scheduling efficiency alone.

With `virtual=True` the run happens on a virtual clock (`swarm._simulate.vclock`): hours of
simulated time in seconds, and the same seed gives the same run, to the request. Spans
read the same virtual clock (`swarm._tracing.span_clock`: the start time of
day plus virtual seconds elapsed), so the trace's durations, TTFTs and wall-clock are the
ones the simulation reports. Rate limits, pauses and the circuit breaker read the event
loop's clock, so `rpm`/`tpm` hold on the virtual clock too.
"""

from __future__ import annotations

import resource
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from swarm._simulate.bounds import bound
from swarm._simulate.hosts import Host, host_configs, host_providers, tell_shifts
from swarm._simulate.nodes import Nodes, SimNodes, SimNodeWorkspaces, node_figures
from swarm._simulate.vclock import VirtualLoop
from swarm._simulate.world import (
    CountingProvider,
    Recorder,
    Shape,
    SimChecks,
    SimMerger,
    SimScript,
    SimWorkspaces,
    failing_subtasks,
    make_plan,
    sim_tools,
    step_shares,
)
from swarm._tracing import span_clock
from swarm.budget import BudgetLimits
from swarm.config import ProviderConfig, RoutingConfig, SwarmConfig, TierConfig
from swarm.config._routing import Sort
from swarm.config._shifts import Shift
from swarm.model import Provider
from swarm.providers.sim import Faults, SimEngine, SimProvider
from swarm.run._check import Baseline
from swarm.run._merge import Merger
from swarm.run._models import RouterSource
from swarm.run._plan import Plan
from swarm.run._report import RunReport, RunStatus
from swarm.run._run import Run, RunSpec
from swarm.run._seams import ModelSource, RunOptions, Seams, Workspaces
from swarm.run._solve import new_run_id
from swarm.run._task import Task
from swarm.run.journal import Journal

__all__ = ["PRESETS", "SimSpec", "bound", "run_simulation", "simulate"]


@dataclass(frozen=True)
class SimSpec:
    """One synthetic workload and the conditions it runs under."""

    agents: int = 10
    """Coder subtasks (one coder agent each)."""
    steps: int = 100
    """Coder model steps in total, spread evenly over the agents."""
    shape: Shape = "fanout"
    speed: str = "cerebras/llama-3.3-70b"
    """Catalog ref simulated for the speed tier (coders, fixers)."""
    reasoning: str = "cerebras/kimi-k2.6"
    """Catalog ref simulated for the reasoning tier (the planner)."""
    max_agents: int | None = None
    """Agents at once; None means all of them."""
    rpm: int | None = None
    tpm: int | None = None
    seed: int = 0
    out_tokens: int = 200
    """Visible output tokens per model step."""
    reasoning_tokens: int | None = None
    """Thinking tokens per call; None keeps each profile's figure."""
    tool_s: float = 0.5
    check_s: float = 1.0
    merge_s: float = 0.0
    fail_rate: float = 0.1
    """Share of subtasks whose first check fails (one fix round)."""
    fix_steps: int = 2
    tools_per_step: int = 1
    """Tool calls per model step (run concurrently by the agent)."""
    time_scale: float = 1.0
    """Multiplies model latencies (0: zero-latency simulator)."""
    faults: Faults = field(default_factory=Faults)
    """How the simulated provider fails (`swarm simulate --rate-limit-rate 0.3`)."""
    first: Faults | None = None
    """A provider failing like this ahead of the healthy one in every tier (hang-first,
    dead-first); None: one provider."""
    hosts: tuple[Host, ...] = ()
    sort: Sort | None = None
    """With hosts: the speed tier is every host's weights, ranked by `sort`."""
    deadline: float | None = None
    """The run's deadline in (simulated) seconds; None: none."""
    shifts: tuple[Shift, ...] = ()
    """How the simulated provider changes under the run (`swarm simulate --shift`)."""
    stall_timeout_s: float = 30.0
    """When a client gives up on a silent stream (the providers' default)."""
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    oracle: bool = False
    """The router is told every host's shift schedule (`swarm._simulate.hosts.tell_shifts`):
    it routes on what each host will do now, not on what it measured (a benchmark's
    oracle)."""
    cluster: Nodes | None = None
    """Workspaces on simulated cluster nodes (`swarm simulate --nodes`); None: unlimited."""
    compaction: bool = True
    """Agents compact their history to fit the window (False: as a naive agent would)."""
    virtual: bool = False
    traces_dir: Path | None = Path("traces")
    """Where the trace goes; None writes none."""


PRESETS: Mapping[str, Mapping[str, Any]] = {
    "kimi-swarm": {"agents": 300, "steps": 4000, "speed": "cerebras/kimi-k2.6"},
    "devin-loop": {
        "agents": 1,
        "steps": 200,
        "shape": "chain",
        "out_tokens": 3000,
        "reasoning_tokens": 0,
        "speed": "cerebras/kimi-k2.6",
        "tool_s": 0.0,
        "check_s": 0.0,
        "fail_rate": 0.0,
    },
}


def run_simulation(spec: SimSpec) -> dict[str, Any]:
    """Run `simulate(spec)` in a fresh event loop (on virtual time when `spec.virtual`)."""
    if spec.virtual:
        loop = VirtualLoop()
        with span_clock(_virtual_ns(loop)):
            return anyio.run(
                simulate, spec, backend="asyncio", backend_options={"loop_factory": lambda: loop}
            )
    return anyio.run(simulate, spec)


def _virtual_ns(loop: VirtualLoop) -> Callable[[], int]:
    """Wall time of day at the start, advanced by the virtual clock (any thread may ask)."""
    base_ns, start = time.time_ns(), loop.time()
    return lambda: base_ns + round((loop.time() - start) * 1e9)


class SimWorld:
    """The simulated world as a run's `World`: nothing touches git, the disk or a process."""

    repo_label = "(simulated)"

    def __init__(
        self,
        spec: SimSpec,
        plan: Plan,
        provider: CountingProvider,
        first: CountingProvider | None = None,
    ) -> None:
        self.provider = provider
        self.first = first
        """The failing provider ahead of `provider` in every tier, if any."""
        ids = [s.id for s in plan.subtasks]
        self.checks = SimChecks(spec.check_s, failing_subtasks(ids, spec.fail_rate, spec.seed))
        self.merger_ = SimMerger(spec.merge_s, self.checks)
        providers: dict[str, Provider] = {"sim": provider}
        if first is not None:
            providers = {"first": first, **providers}
        self.providers: Mapping[str, Provider] | None = providers
        self.recorder: Recorder | None = None
        self.oracle = spec.oracle
        self.seed = spec.seed
        self.hosts: dict[str, CountingProvider] = {}
        self._tools = sim_tools(spec.tool_s)
        self.nodes = SimNodes(spec.cluster) if spec.cluster is not None else None
        if self.nodes is not None:
            self.checks.on_node = self.nodes.checked

    def seams(self, run_id: str) -> Seams:
        workspaces: Workspaces = SimWorkspaces()
        if self.nodes is not None:
            workspaces = SimNodeWorkspaces(self.nodes, SimWorkspaces())
        return Seams(workspaces=workspaces, check=self.checks, tools=self._tools)

    async def base(self) -> str:
        return self.merger_.head

    async def prepare(self, run_id: str) -> None:
        return None

    def merger(
        self, run_id: str, base: str, task: Task, options: RunOptions
    ) -> AbstractAsyncContextManager[Merger]:
        return nullcontext(self.merger_)

    async def result(
        self, run_id: str, base: str, status: RunStatus
    ) -> tuple[str | None, str | None]:
        return None, None

    async def baseline(self, queue: Merger, task: Task) -> Baseline:
        return Baseline()

    async def warnings(self, task: Task) -> list[str]:
        return []

    def models(self, source: ModelSource) -> ModelSource:
        if isinstance(source, RouterSource):
            source.router.seed_jitter(self.seed)  # the retries' jitter repeats too
            if self.oracle:
                tell_shifts(source.router)
        self.recorder = Recorder(source)
        return self.recorder


async def simulate(spec: SimSpec) -> dict[str, Any]:
    """Run the workload in the current event loop, through the real `Run`; return figures."""
    run_id = f"sim-{new_run_id()}"
    plan = make_plan(spec.agents, spec.shape, spec.seed)
    shares = dict(
        zip([s.id for s in plan.subtasks], step_shares(spec.agents, spec.steps), strict=True)
    )
    script = SimScript(
        plan, shares, spec.fix_steps, spec.out_tokens, spec.reasoning_tokens, spec.tools_per_step
    )
    engine = SimEngine(
        profile=spec.speed,
        script=script,
        faults=spec.faults,
        seed=spec.seed,
        time_scale=spec.time_scale,
        shifts=spec.shifts,
    )
    provider = CountingProvider(
        SimProvider("sim", engine=engine, stall_timeout_s=spec.stall_timeout_s)
    )
    world = SimWorld(spec, plan, provider, _first_provider(spec, script))
    world.hosts = host_providers(spec.hosts, script, spec.seed, spec.time_scale)
    world.providers = {**world.hosts, **(world.providers or {})}
    task = Task(title="simulated swarm", instructions="a synthetic workload", check="sim-check")
    options = RunOptions(
        max_agents=spec.max_agents or spec.agents,
        max_steps_per_agent=max(shares.values()) + spec.fix_steps + 2,
        compaction=spec.compaction,
    )
    cpu0, real0, t0 = time.process_time(), time.perf_counter(), anyio.current_time()
    with (
        tempfile.TemporaryDirectory(prefix="swarm-sim-") as tmp,
        Journal.open(Path(tmp) / "journal.db") as journal,
    ):
        journal.create_run(run_id, task=task.model_dump(), repo="(simulated)", config={})
        run_spec = RunSpec(
            run_id=run_id,
            task=task,
            config=_config(spec),
            journal=journal,
            limits=BudgetLimits(deadline=spec.deadline),
            options=options,
            traces_dir=spec.traces_dir or Path(tmp),
            quiet=True,
        )
        run = Run(run_spec, world)
        async with run:
            await run.execute()
        wall = anyio.current_time() - t0
    assert run.report is not None and world.recorder is not None
    clock = _Clock(wall, time.process_time() - cpu0, time.perf_counter() - real0)
    return _figures(spec, plan, run.report, world, clock)


def _first_provider(spec: SimSpec, script: SimScript) -> CountingProvider | None:
    if spec.first is None:
        return None
    engine = SimEngine(
        profile=spec.speed,
        script=script,
        faults=spec.first,
        seed=spec.seed + 1,
        time_scale=spec.time_scale,
    )
    return CountingProvider(
        SimProvider("first", engine=engine, stall_timeout_s=spec.stall_timeout_s)
    )


def _config(spec: SimSpec) -> SwarmConfig:
    providers = {"sim": ProviderConfig(kind="sim", rpm=spec.rpm, tpm=spec.tpm)}
    firsts = []
    if spec.first is not None:
        providers = {"first": ProviderConfig(kind="sim", faults=spec.first), **providers}
        firsts = ["first/"]
    tiers = {
        tier: TierConfig(models=[f"{p}{ref}" for p in (*firsts, "sim/")])
        for tier, ref in (("speed", spec.speed), ("reasoning", spec.reasoning))
    }
    if spec.hosts:
        providers.update(host_configs(spec.hosts, spec.time_scale))
        refs = [f"{h.name}/{h.profile}" for h in spec.hosts]
        tiers["speed"] = TierConfig(models=refs, sort=spec.sort)
    return SwarmConfig(providers=providers, tiers=tiers, routing=spec.routing)


@dataclass(frozen=True)
class _Clock:
    wall: float
    cpu: float
    real: float


def _figures(
    spec: SimSpec, plan: Plan, report: RunReport, world: SimWorld, clock: _Clock
) -> dict[str, Any]:
    assert world.recorder is not None
    calls = world.recorder.calls
    b = bound(plan, calls, spec)
    wall, cpu = clock.wall, clock.cpu
    tool_calls = spec.tools_per_step * sum(
        max(0, len(c) - 1) for a, c in calls.items() if not a.startswith("planner")
    )
    skip = ("faults", "first", "routing", "traces_dir", "shifts", "hosts", "cluster")
    first = world.first
    return {
        **{k: v for k, v in asdict(spec).items() if k not in skip},
        "max_agents": spec.max_agents or spec.agents,
        "wall_s": round(wall, 3),
        "real_s": round(clock.real, 3),
        "bound_s": round(b["expected"], 3),
        "ratio": round(wall / b["expected"], 4) if b["expected"] else None,
        "bound_actual_s": round(b["actual"], 3),
        "floor_s": round(b["floor"], 3),
        "cluster": node_figures(world.nodes, wall) if world.nodes is not None else None,
        "ratio_actual": round(wall / b["actual"], 4) if b["actual"] else None,
        "calls": report.calls,
        "attempts": world.provider.attempts,
        "rate_limited": world.provider.rate_limited,
        "first_attempts": first.attempts if first is not None else 0,
        "faults": spec.faults.model_dump(exclude_defaults=True),
        "first_faults": spec.first.model_dump(exclude_defaults=True) if spec.first else None,
        "shifts": [s.model_dump(exclude_none=True) for s in spec.shifts],
        "notes": report.warnings,
        "stop_reason": report.stop_reason,
        "estimates": len(report.estimates),
        "calls_per_host": {n: p.attempts for n, p in world.hosts.items()},
        "over_window": world.provider.over_window,
        "peak_input_tokens": max(
            (c.input_tokens for log in calls.values() for c in log), default=0
        ),
        "tool_calls": tool_calls,
        "tokens": report.tokens,
        "output_tokens": report.output_tokens,
        "cost_usd": report.cost_usd,
        "merged": report.count("merged"),
        "failed": len(report.subtasks) - report.count("merged"),
        "fix_rounds": sum(s.fix_rounds for s in report.subtasks),
        "cpu_s": round(cpu, 3),
        "cpu_ms_per_call": round(1000 * cpu / max(1, report.calls), 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "trace": report.trace if spec.traces_dir is not None else None,
        "trace_note": "span timestamps are on the virtual clock" if spec.virtual else "",
    }
