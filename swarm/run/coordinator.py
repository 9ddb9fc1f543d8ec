"""The coordinator: plan, then code/test/fix every subtask in parallel, then merge.

One run: a planner (reasoning tier) writes the plan, or `--plan` supplies it; ready
subtasks run in one task group, at most `max_agents` at once, longest remaining chain
first; each gets a coder in its own worktree from the current integration head, then the
check, then bounded fixer rounds (escalating to the reasoning tier); green patches go
through the merge queue; a final verification (with a fix loop) closes the run.
Subtask states are journaled, so `swarm resume` continues without redoing merged work.

Seams (`CoordinatorParts`): where workspaces come from (`Sandbox`), how a check runs and
which tools agents get. They default to git worktrees, the check subprocess and the coding
tools; `swarm simulate` plugs in in-memory versions that only sleep.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio

from swarm.agent.loop import Agent
from swarm.agent.tool import Tool, ToolContext
from swarm.agent.toolbox import coding_tools
from swarm.budget import RunBudget
from swarm.errors import BudgetExceeded, SwarmError
from swarm.model import Model
from swarm.run.check import CheckResult, check_env, run_check
from swarm.run.journal import Journal
from swarm.run.merge import Merger, MergeResult
from swarm.run.plan import Plan, PlanError, Subtask, parse_plan_reply
from swarm.run.progress import Progress
from swarm.run.roles import (
    CODER,
    FIXER,
    PLANNER,
    PLANNER_TOOLS,
    coder_prompt,
    fix_prompt,
    planner_prompt,
    rebase_prompt,
)
from swarm.run.task import Task
from swarm.run.workspace import Workspace

__all__ = [
    "CheckFn",
    "Coordinator",
    "CoordinatorParts",
    "GitSandbox",
    "ModelSource",
    "Sandbox",
    "SolveOptions",
    "SubtaskOutcome",
    "WorkspaceLike",
]


class ModelSource(Protocol):
    """Gives each agent its model: by role, with an id stable across resumes."""

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model: ...


class WorkspaceLike(Protocol):
    """One agent's working copy: where its tools act, and its changes as a patch."""

    @property
    def path(self) -> Path: ...

    async def patch(self) -> str: ...

    async def apply(self, patch: str) -> None: ...


class Sandbox(Protocol):
    """Opens a workspace at commit `base`, named after its subtask, removed on exit."""

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]: ...


CheckFn = Callable[[Path], Awaitable[CheckResult]]
"""Runs the task's check in a workspace."""


class GitSandbox:
    """The real sandbox: a git worktree of `repo` per workspace."""

    def __init__(self, repo: Path, run_id: str) -> None:
        self.repo, self.run_id = repo, run_id

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]:
        return Workspace.open(self.repo, base=base, name=name, run_id=self.run_id)


@dataclass(frozen=True)
class CoordinatorParts:
    """The coordinator's seams; None means the real implementation."""

    sandbox: Sandbox | None = None
    """Where workspaces come from (default: git worktrees of the repository)."""
    check: CheckFn | None = None
    """How the task's check runs (default: its command in a subprocess)."""
    tools: Sequence[Tool] | None = None
    """The tools agents get (default: `coding_tools()`)."""


@dataclass(frozen=True)
class SolveOptions:
    max_agents: int = 8
    max_steps_per_agent: int = 40
    fix_rounds: int = 3
    """Fixer rounds per subtask before it is given up."""
    escalate_after: int = 1
    """Fixer rounds on the speed tier before the reasoning tier takes over."""
    rebase_rounds: int = 2
    plan_retries: int = 2
    check_timeout_s: float = 600.0


@dataclass
class SubtaskOutcome:
    id: str
    title: str
    status: str = "pending"
    """pending, running, merged, failed or skipped."""
    fix_rounds: int = 0
    rebases: int = 0
    commit: str | None = None
    error: str | None = None
    wall_s: float = 0.0


@dataclass
class _Times:
    """Where the wall-clock of agents and checks went, summed over all subtasks."""

    by_phase: dict[str, float] = field(default_factory=dict)

    def add(self, phase: str, seconds: float) -> None:
        self.by_phase[phase] = self.by_phase.get(phase, 0.0) + seconds


class Coordinator:
    def __init__(
        self,
        *,
        task: Task,
        repo: Path,
        run_id: str,
        models: ModelSource,
        journal: Journal,
        budget: RunBudget,
        options: SolveOptions,
        progress: Progress,
        parts: CoordinatorParts = CoordinatorParts(),
    ) -> None:
        self.task, self.repo, self.run_id = task, repo, run_id
        self.models, self.journal, self.budget = models, journal, budget
        self.options, self.progress = options, progress
        self.outcomes: dict[str, SubtaskOutcome] = {}
        self.times = _Times()
        self.stop_reason: str | None = None
        """Why the run stopped early: a budget kind, `deadline`, or None."""
        self.final_check: CheckResult | None = None
        self._tools = list(parts.tools) if parts.tools is not None else coding_tools()
        self._sandbox: Sandbox = parts.sandbox or GitSandbox(repo, run_id)
        self._run_check: CheckFn = parts.check or self._check_command
        self._queue: Merger | None = None
        self._changed = anyio.Event()
        self._dispatch_scope: anyio.CancelScope | None = None

    # -- planning ---------------------------------------------------------------------

    async def make_plan(self, base: str) -> Plan:
        """Ask the planner, feeding validation errors back a bounded number of times."""
        tools = [t for t in self._tools if t.name in PLANNER_TOOLS]
        errors: list[str] | None = None
        async with self._sandbox.open(base, "planner") as ws:
            for attempt in range(self.options.plan_retries + 1):
                agent_id = "planner" if attempt == 0 else f"planner:{attempt}"
                agent: Agent[str] = Agent(
                    "planner",
                    model=self.models.model("planner", agent_id=agent_id),
                    instructions=PLANNER,
                    tools=tools,
                    context=self._context(ws.path),
                    max_steps=self.options.max_steps_per_agent,
                    agent_id=agent_id,
                )
                started = anyio.current_time()
                result = await agent.run(planner_prompt(self.task, errors))
                self.times.add("planning", anyio.current_time() - started)
                try:
                    return parse_plan_reply(str(result.output or ""))
                except PlanError as exc:
                    errors = exc.problems or [str(exc)]
        raise PlanError(
            f"the planner gave no valid plan after {self.options.plan_retries + 1} attempts",
            problems=errors or [],
        )

    # -- the run ----------------------------------------------------------------------

    async def execute(self, plan: Plan, queue: Merger, done: set[str]) -> None:
        """Run every subtask not already in `done` (merged by an earlier process)."""
        self._queue = queue
        for st in plan.subtasks:
            status = "merged" if st.id in done else "pending"
            self.outcomes[st.id] = SubtaskOutcome(st.id, st.title, status)
        self.progress.start(total=len(plan.subtasks), merged=len(done))
        started: set[str] = set(done)
        finished: set[str] = set(done)
        limiter = anyio.CapacityLimiter(self.options.max_agents)
        try:
            async with anyio.create_task_group() as tg:
                self._dispatch_scope = tg.cancel_scope
                while True:
                    for st in plan.ready(done, started):
                        started.add(st.id)
                        self.progress.queued(st.id)
                        tg.start_soon(self._subtask, st, limiter, done, finished, name=st.id)
                    if started <= finished:
                        break
                    await self._changed.wait()
                    self._changed = anyio.Event()
        except* BudgetExceeded as group:
            exc = group.exceptions[0]
            assert isinstance(exc, BudgetExceeded)
            self.stop_reason = exc.kind
        for outcome in self.outcomes.values():
            if outcome.status in ("pending", "running"):
                outcome.status = "skipped"
                reason = self.stop_reason or "a dependency failed"
                outcome.error = f"not run: {reason}"
                self.journal.set_subtask(self.run_id, outcome.id, "skipped", error=outcome.error)

    async def verify(self) -> CheckResult | None:
        """The full check on the integration branch, with a bounded fix loop."""
        queue = self._queue
        assert queue is not None
        if not self.task.check:
            return None
        result = await self._timed("checks", queue.run_check())
        final = Subtask(id="final", title="final verification", instructions=self.task.title)
        for n in range(1, self.options.fix_rounds + 1):
            if result.passed:
                break
            await self._fix(final, queue.worktree, result, round_=n)
            await queue.commit("swarm: final verification fixes")
            result = await self._timed("checks", queue.run_check())
        self.final_check = result
        return result

    # -- one subtask ------------------------------------------------------------------

    async def _subtask(
        self, st: Subtask, limiter: anyio.CapacityLimiter, done: set[str], finished: set[str]
    ) -> None:
        outcome = self.outcomes[st.id]
        started: float | None = None  # the virtual clock may start at 0
        try:
            async with limiter:
                started = anyio.current_time()
                outcome.status = "running"
                self.progress.running(st.id)
                self.journal.set_subtask(self.run_id, st.id, "running")
                merged = await self._code_test_merge(st, outcome)
            outcome.status = "merged" if merged.ok else "failed"
            outcome.commit = merged.commit
            if not merged.ok:
                outcome.error = f"{merged.kind}: {merged.output[-500:]}"
        except BudgetExceeded:
            outcome.status, outcome.error = "pending", None
            raise
        except SwarmError as exc:  # a failed subtask does not cancel its siblings
            outcome.status, outcome.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            outcome.wall_s = anyio.current_time() - started if started is not None else 0.0
            if outcome.status in ("merged", "failed"):
                finished.add(st.id)
                if outcome.status == "merged":
                    done.add(st.id)
                self.journal.set_subtask(
                    self.run_id, st.id, outcome.status, commit=outcome.commit, error=outcome.error
                )
                self.progress.finished(st.id, outcome.status)
            self._changed.set()

    async def _code_test_merge(self, st: Subtask, outcome: SubtaskOutcome) -> MergeResult:
        queue = self._queue
        assert queue is not None
        async with self._sandbox.open(queue.head, st.id) as ws:
            await self._agent("coder", f"coder:{st.id}", CODER, ws.path, st).run(
                coder_prompt(self.task, st)
            )
            await self._until_green(st, ws.path, outcome, tag="")
            patch = await ws.patch()
        merged = await queue.merge(st.id, st.title, patch)
        while not merged.ok and outcome.rebases < self.options.rebase_rounds:
            outcome.rebases += 1
            reason = (
                "its patch no longer applies (merge conflict)"
                if merged.kind == "conflict"
                else f"the check fails after merging it:\n{merged.output[-3000:]}"
            )
            async with self._sandbox.open(queue.head, f"{st.id}-rebase{outcome.rebases}") as ws:
                if merged.kind == "red":
                    await ws.apply(patch)
                agent_id = f"fixer:{st.id}:rebase{outcome.rebases}"
                await self._agent("fixer", agent_id, FIXER, ws.path, st).run(
                    rebase_prompt(st, patch, reason)
                )
                await self._until_green(st, ws.path, outcome, tag=f"r{outcome.rebases}")
                patch = await ws.patch()
            merged = await queue.merge(st.id, st.title, patch)
        return merged

    async def _until_green(
        self, st: Subtask, path: Path, outcome: SubtaskOutcome, tag: str
    ) -> None:
        """Run the check; on failure send fixers, a bounded number of rounds."""
        if not self.task.check:
            return
        result = await self._timed("checks", self._run_check(path))
        rounds = 0
        while not result.passed:
            if rounds >= self.options.fix_rounds:
                raise _GaveUp(f"check still failing after {rounds} fix rounds")
            rounds += 1
            outcome.fix_rounds += 1
            self.progress.fixing(st.id)
            await self._fix(st, path, result, round_=rounds, tag=tag)
            result = await self._timed("checks", self._run_check(path))

    async def _fix(
        self, st: Subtask, path: Path, failed: CheckResult, *, round_: int, tag: str = ""
    ) -> None:
        escalate = round_ > self.options.escalate_after
        agent_id = f"fixer:{st.id}:{tag}{round_}"
        agent = self._agent("fixer", agent_id, FIXER, path, st, escalate=escalate)
        await agent.run(fix_prompt(st, self.task.check or "", failed.output))

    # -- helpers ----------------------------------------------------------------------

    def _agent(
        self,
        role: str,
        agent_id: str,
        instructions: str,
        path: Path,
        st: Subtask,
        *,
        escalate: bool = False,
    ) -> _TimedAgent:
        agent: Agent[str] = Agent(
            role,
            model=self.models.model(role, agent_id=agent_id, escalate=escalate),
            instructions=instructions,
            tools=self._tools,
            context=self._context(path),
            max_steps=self.options.max_steps_per_agent,
            agent_id=agent_id,
            subtask_id=st.id,
        )
        return _TimedAgent(agent, self.times, role)

    def _context(self, path: Path) -> ToolContext:
        return ToolContext(
            root=path,
            check=self.task.check,
            env=check_env(path),
            timeout_s=self.options.check_timeout_s,
        )

    async def _check_command(self, path: Path) -> CheckResult:
        assert self.task.check is not None
        return await run_check(self.task.check, path, timeout_s=self.options.check_timeout_s)

    async def _timed(self, phase: str, work: Awaitable[CheckResult]) -> CheckResult:
        started = anyio.current_time()
        try:
            return await work
        finally:
            self.times.add(phase, anyio.current_time() - started)


class _GaveUp(SwarmError):
    """A subtask's fix rounds ran out."""


class _TimedAgent:
    def __init__(self, agent: Agent[str], times: _Times, phase: str) -> None:
        self._agent, self._times, self._phase = agent, times, phase

    async def run(self, prompt: str) -> None:
        started = anyio.current_time()
        try:
            await self._agent.run(prompt)  # the check, not the agent's word, decides
        finally:
            self._times.add(self._phase, anyio.current_time() - started)
