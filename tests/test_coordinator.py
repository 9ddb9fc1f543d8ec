"""The coordinator's rules with in-memory parts: no git, no subprocess, milliseconds each.

The same behaviour is tested once end to end on real git repositories in test_solve.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio
import pytest

from swarm.agent._tool import Tool, WriteLog
from swarm.agent._toolbox import coding_tools
from swarm.budget import Budget, BudgetLimits
from swarm.config import SwarmConfig
from swarm.errors import NodeLost, WorkspaceError
from swarm.messages import ChatRequest, ChatResult, ModelSettings
from swarm.model import Model
from swarm.run._check import CheckResult
from swarm.run._coordinator import Coordinator
from swarm.run._merge import MergeResult, MergeStats
from swarm.run._models import RunModels
from swarm.run._outcome import RunOutcome
from swarm.run._plan import Plan, Subtask
from swarm.run._progress import Progress
from swarm.run._seams import ModelSource, RunOptions, Seams, WorkspaceLike
from swarm.run._slack import RouteHints
from swarm.run._task import Task
from swarm.run.journal import Journal
from swarm.testing import FunctionModel, call, reply


@dataclass
class _Workspace:
    path: Path
    written: WriteLog = field(default_factory=WriteLog)

    async def patch(self) -> str:
        return f"patch of {self.path.name}\n"

    async def apply(self, patch: str, *, reverse: bool = False) -> None:
        await anyio.lowlevel.checkpoint()


class Workspaces:
    def __init__(self) -> None:
        self.opened: list[str] = []

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]:
        return self._open(name)

    @asynccontextmanager
    async def _open(self, name: str) -> AsyncIterator[WorkspaceLike]:
        self.opened.append(name)
        yield _Workspace(Path("/mem") / name)


@dataclass
class Merger:
    """Merges in memory; `conflicts` lists subtasks whose first merge conflicts."""

    conflicts: set[str] = field(default_factory=set)
    order: list[str] = field(default_factory=list)
    waited_on: set[str] = field(default_factory=set)
    head: str = "c0"
    worktree: Path = Path("/mem/_integration")
    written: WriteLog = field(default_factory=WriteLog)

    stats: MergeStats = field(default_factory=MergeStats)
    expected: list[int] = field(default_factory=list)
    """What the coordinator said was still coming, each time it said it."""

    def expect(self, coming: int) -> None:
        self.expected.append(coming)

    async def merge(
        self, name: str, title: str, patch: str, *, waited_on: bool = False, **_: object
    ) -> MergeResult:
        await anyio.lowlevel.checkpoint()
        if name in self.conflicts:
            self.conflicts.discard(name)
            return MergeResult("conflict", output="both edited x.py")
        self.order.append(name)
        if waited_on:
            self.waited_on.add(name)
        self.head = f"c{len(self.order)}"
        return MergeResult("merged", self.head)

    async def landed(self) -> dict[str, str]:
        return {}

    async def run_check(self, command: str = "") -> CheckResult:
        return CheckResult(True, 0, "ok", 0.0)

    async def commit(self, message: str, *, stage_edits: bool = False) -> str:
        return self.head

    async def reset(self) -> None:
        await anyio.lowlevel.checkpoint()


class Checks:
    """A check that fails the first `fails[name]` times it runs in workspace `name`."""

    def __init__(self, fails: dict[str, int] | None = None) -> None:
        self.fails = dict(fails or {})
        self.runs: list[str] = []

    async def __call__(
        self,
        path: Path,
        command: str = "",
        *,
        key: str | None = None,
        priority: bool = False,
        commit: str | None = None,
        excuse: bool = True,
    ) -> CheckResult:
        await anyio.lowlevel.checkpoint()
        self.runs.append(path.name)
        if self.fails.get(path.name, 0) > 0:
            self.fails[path.name] -= 1
            return CheckResult(False, 1, "1 failed", 0.0)
        return CheckResult(True, 0, "ok", 0.0)


class Source:
    """Every agent calls `finish` at once; records (agent id, escalated) per model."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.asked: list[tuple[str, bool]] = []
        self.calls = 0
        self.delay_s = delay_s

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        self.asked.append((agent_id, escalate))

        async def finish(request: ChatRequest) -> ChatResult:
            self.calls += 1
            await anyio.sleep(self.delay_s)
            return reply(call("finish", summary="done"), cost_usd=0.01)

        return FunctionModel(finish, name=agent_id)


def plan(*subtasks: tuple[str, tuple[str, ...]]) -> Plan:
    """A plan of (id, dependencies)."""
    return Plan(
        subtasks=tuple(
            Subtask(id=i, title=f"do {i}", instructions=f"do {i}", files=(f"{i}.py",), depends_on=d)
            for i, d in subtasks
        )
    )


@dataclass(frozen=True)
class InMemoryRun:
    """What a coordinator uses of its run (`RunLike`), without a router or a trace."""

    id: str
    models: ModelSource
    journal: Journal
    budget: Budget
    progress: Progress
    settings: Mapping[str, ModelSettings] = field(default_factory=dict)
    hints: RouteHints | None = None


@dataclass
class World:
    tmp_path: Path
    source: Source = field(default_factory=Source)
    checks: Checks = field(default_factory=Checks)
    merger: Merger = field(default_factory=Merger)
    workspaces: Workspaces = field(default_factory=Workspaces)
    limits: BudgetLimits = field(default_factory=BudgetLimits)
    options: RunOptions = field(default_factory=lambda: RunOptions(max_agents=4))
    dependencies: Literal["order", "need"] = "order"

    async def run(
        self, p: Plan, *, done: frozenset[str] = frozenset()
    ) -> tuple[RunOutcome, Budget]:
        budget = Budget(self.limits)
        budget.start()
        with Journal.open(self.tmp_path / "journal.db") as journal:
            journal.create_run("r1", task={}, repo="(memory)", config={})
            models = RunModels(
                self.source,
                journal,
                run_id="r1",
                budget=budget,
                config=SwarmConfig(),
                reserves=True,
            )
            run = InMemoryRun("r1", models, journal, budget, Progress(budget, quiet=True))
            tools: list[Tool] = [t for t in coding_tools() if t.name == "finish"]
            seams = Seams(workspaces=self.workspaces, check=self.checks, tools=tools)
            task = Task(title="t", instructions="i", check="check", dependencies=self.dependencies)
            coordinator = Coordinator(run, task, options=self.options, seams=seams)
            return await coordinator.run(p, self.merger, done=done), budget


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


async def test_independent_subtasks_all_merge(world: World) -> None:
    outcome, _ = await world.run(plan(("a", ()), ("b", ()), ("c", ())))
    assert outcome.status == "done"
    assert sorted(world.merger.order) == ["a", "b", "c"]


async def test_dependencies_merge_before_their_dependents(world: World) -> None:
    await world.run(plan(("a", ()), ("b", ("a",)), ("c", ("b",))))
    assert world.merger.waited_on == {"a", "b"}  # batched apart from patches none waits for
    assert world.merger.order == ["a", "b", "c"]


async def test_a_red_check_gets_fixers_that_escalate_then_give_up(world: World) -> None:
    world.checks = Checks({"a": 99})
    outcome, _ = await world.run(plan(("a", ()), ("b", ("a",))))
    by_id = {s.id: s for s in outcome.subtasks}
    # three rounds, then afresh from its base with a new coder: three more, then it fails
    assert by_id["a"].status == "failed" and by_id["a"].fix_rounds == 6
    assert by_id["a"].error == "check still failing after 3 fix rounds"
    assert by_id["a"].started_afresh == ["started afresh: check still failing after 3 fix rounds"]
    assert by_id["b"].status == "merged" and by_id["b"].warning == "ran without a (failed)"
    asked = [(a, e) for a, e in world.source.asked if a.startswith(("fixer:a", "coder:a"))]
    rounds = [("fixer:a:1", False), ("fixer:a:2", True), ("fixer:a:3", True)]
    again = [(f"{a}:afresh1", e) for a, e in [("coder:a", False), *rounds]]
    assert asked == [("coder:a", False), *rounds, *again]


async def test_a_dependency_that_is_a_need_skips_its_dependents_when_it_fails(
    world: World,
) -> None:
    world.checks, world.dependencies = Checks({"a": 99}), "need"
    outcome, _ = await world.run(plan(("a", ()), ("b", ("a",)), ("c", ())))
    by_id = {s.id: s for s in outcome.subtasks}
    assert by_id["a"].status == "failed" and by_id["c"].status == "merged"
    assert by_id["b"].status == "skipped" and "dependency failed" in (by_id["b"].error or "")


async def test_a_fix_round_that_turns_the_check_green_merges(world: World) -> None:
    world.checks = Checks({"a": 1})
    outcome, _ = await world.run(plan(("a", ())))
    (a,) = outcome.subtasks
    assert (a.status, a.fix_rounds) == ("merged", 1)


async def test_a_merge_conflict_goes_to_a_rebase_fixer(world: World) -> None:
    world.merger = Merger(conflicts={"a"})
    outcome, _ = await world.run(plan(("a", ())))
    (a,) = outcome.subtasks
    assert (a.status, a.rebases) == ("merged", 1)
    assert "a-rebase1" in world.workspaces.opened
    assert ("fixer:a:rebase1", False) in world.source.asked


@dataclass
class ScriptedMerger(Merger):
    """Decides each merge of a subtask by its script (then merges); notes every call."""

    script: dict[str, list[str]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    called: anyio.Event = field(default_factory=anyio.Event)

    async def merge(self, name: str, title: str, patch: str, **kw: object) -> MergeResult:
        self.calls.append(name)
        self.called.set()
        if steps := self.script.get(name):
            kind = steps.pop(0)
            if kind != "merged":
                return MergeResult("red" if kind == "red" else "conflict", output=kind)
        return await super().merge(name, title, patch, **kw)  # type: ignore[arg-type]


class ChecksAfterMerge(Checks):
    """A check that, in a rebase's workspace, runs only once the queue has its patch."""

    def __init__(self, merger: ScriptedMerger, fails: dict[str, int] | None = None) -> None:
        super().__init__(fails)
        self.merger = merger

    async def __call__(self, path: Path, command: str = "", **kw: object) -> CheckResult:
        if "rebase" in path.name:
            self.merger.called = anyio.Event()
            with anyio.fail_after(5):  # never, if the queue waited for this check
                while self.merger.calls.count(path.name.split("-")[0]) < 2:
                    await self.merger.called.wait()
                    self.merger.called = anyio.Event()
        return await super().__call__(path, command, **kw)  # type: ignore[arg-type]


async def test_a_rebased_patch_goes_to_the_queue_while_its_own_check_runs(
    world: World,
) -> None:
    """The rebase fixer's patch is merged (its own check green) in the time of one
    check, not its own check's and then the queue's."""
    world.merger = merger = ScriptedMerger(script={"a": ["red"]})
    world.checks = ChecksAfterMerge(merger)
    outcome, _ = await world.run(plan(("a", ())))
    (a,) = outcome.subtasks
    assert (a.status, a.rebases, a.fix_rounds) == ("merged", 1, 0)
    assert merger.calls == ["a", "a"]


@pytest.mark.parametrize("queue", ["merged", "red"])
async def test_a_rebased_patch_red_on_its_own_is_fixed_unless_the_queue_merged_it(
    world: World, queue: str
) -> None:
    """Its own check is red: the queue's verdict comes first. Merged (its check passed),
    it stands; red, fixer rounds make it green and that patch merges."""
    world.merger = merger = ScriptedMerger(script={"a": ["red", queue]})
    world.checks = ChecksAfterMerge(merger, fails={"a-rebase1": 1})
    outcome, _ = await world.run(plan(("a", ())))
    (a,) = outcome.subtasks
    assert (a.status, a.rebases) == ("merged", 1)
    if queue == "merged":
        assert a.fix_rounds == 0 and merger.calls == ["a", "a"]
    else:
        assert a.fix_rounds == 1 and merger.calls == ["a", "a", "a"]
        assert ("fixer:a:r11", False) in world.source.asked


async def test_merged_subtasks_of_an_earlier_process_are_not_redone(world: World) -> None:
    await world.run(plan(("a", ()), ("b", ("a",))), done=frozenset({"a"}))
    assert world.merger.order == ["b"]
    assert "a" not in world.workspaces.opened


@pytest.mark.parametrize("agents", [20, 300])
async def test_a_step_budget_is_never_overshot_by_concurrent_agents(
    world: World, agents: int
) -> None:
    """The old budget checked then added: a 12-step cap spent 18 and 20 steps."""
    world.source = Source(delay_s=0.01)
    world.limits = BudgetLimits(steps=12)
    world.options = RunOptions(max_agents=agents)
    ids = [(f"s{i:03d}", ()) for i in range(agents)]
    outcome, budget = await world.run(plan(*ids))
    assert outcome.status == "stopped" and outcome.stop_reason == "steps"
    assert budget.spent.steps == 12 and world.source.calls == 12
    statuses = {s.status for s in outcome.subtasks}
    assert statuses <= {"merged", "skipped"}
    assert sum(s.status == "merged" for s in outcome.subtasks) == 12  # in-flight work finished


async def test_the_deadline_stops_the_run_and_keeps_what_merged(world: World) -> None:
    # one agent, a 1 s call per subtask: a merges at about 1 s, c could not before 3 s
    world.source = Source(delay_s=1.0)
    world.limits = BudgetLimits(deadline=2.5)
    world.options = RunOptions(max_agents=1)
    outcome, _ = await world.run(plan(("a", ()), ("b", ()), ("c", ())))
    assert outcome.stop_reason == "deadline"
    statuses = {s.id: s.status for s in outcome.subtasks}
    # what was under way when the deadline came is stopped; what never started, skipped
    assert statuses["a"] == "merged" and statuses["c"] in ("stopped", "skipped")
    assert set(statuses.values()) <= {"merged", "stopped", "skipped"}


class LosingNodes(Workspaces):
    """Workspaces whose node is lost the first `losses` times a workspace is coded in."""

    def __init__(self, losses: int) -> None:
        super().__init__()
        self.losses = losses

    @asynccontextmanager
    async def _open(self, name: str) -> AsyncIterator[WorkspaceLike]:
        self.opened.append(name)
        if self.losses > 0:
            self.losses -= 1
            raise WorkspaceError("the workspace's cluster node was lost", node_lost=True)
        yield _Workspace(Path("/mem") / name)


async def test_a_lost_node_restarts_the_subtask_and_merges_it_once(tmp_path: Path) -> None:
    world = World(tmp_path, workspaces=LosingNodes(losses=2))
    outcome, _ = await world.run(plan(("a", ())))
    assert [s.status for s in outcome.subtasks] == ["merged"]
    assert world.workspaces.opened == ["a", "a", "a"]
    assert world.merger.order == ["a"]


async def test_a_node_lost_too_often_fails_only_its_subtask(tmp_path: Path) -> None:
    one_at_a_time = RunOptions(max_agents=1)
    world = World(tmp_path, workspaces=LosingNodes(losses=3), options=one_at_a_time)
    outcome, _ = await world.run(plan(("a", ()), ("b", ())))
    by_id = {s.id: s for s in outcome.subtasks}
    assert by_id["a"].status == "failed" and "node was lost" in str(by_id["a"].error)
    assert by_id["b"].status == "merged"
    assert world.merger.order == ["b"]


@dataclass
class _LostAtPatch(_Workspace):
    """A workspace whose node is lost when its patch goes back."""

    async def patch(self) -> str:
        raise NodeLost("node n1 was lost", node="n1", during="returning the patch")


class LosingAtPatch(Workspaces):
    """Workspaces whose node is lost returning the patch, the first `losses` times."""

    def __init__(self, losses: int) -> None:
        super().__init__()
        self.losses = losses

    @asynccontextmanager
    async def _open(self, name: str) -> AsyncIterator[WorkspaceLike]:
        self.opened.append(name)
        self.losses -= 1
        yield (_LostAtPatch if self.losses >= 0 else _Workspace)(Path("/mem") / name)


async def test_a_subtask_started_again_says_each_loss_and_asks_its_model_anew(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, workspaces=LosingAtPatch(losses=2))
    outcome, _ = await world.run(plan(("a", ())))
    (a,) = outcome.subtasks
    assert a.status == "merged"
    assert [lost.split(" at ")[0] for lost in a.nodes_lost] == [
        "node n1 lost during returning the patch"
    ] * 2
    coders = [agent for agent, _ in world.source.asked if agent.startswith("coder:a")]
    assert coders[:3] == ["coder:a", "coder:a:node1", "coder:a:node2"]  # none replayed


async def test_the_queue_hears_how_many_patches_are_still_coming(world: World) -> None:
    """So it can gather them: two more while the first merges at one agent, none at the end."""
    world.options = RunOptions(max_agents=1)
    outcome, _ = await world.run(plan(("a", ()), ("b", ()), ("c", ())))
    assert outcome.status == "done"
    assert world.merger.expected[0] == 2 and world.merger.expected[-1] == 0
    assert all(0 <= n <= 3 for n in world.merger.expected)
