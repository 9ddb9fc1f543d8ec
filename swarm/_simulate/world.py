"""The simulated world of `swarm simulate`: plan, workspaces, checks, merges, tools, script.

Nothing here touches git, the disk or a subprocess: every tool call, check and merge
sleeps a fixed duration with `anyio.sleep`, so a run behaves the same on the real clock
and on the virtual one. The script makes each agent do its share of model steps
(tool calls, then `finish`); `Recorder` notes every call so the critical-path bound can be
computed from the workload afterwards.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio

from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._tool import Finish, Tool, WriteLog, tool
from swarm.messages import ChatRequest, ChatResult, ToolCall
from swarm.model import (
    FirstTokenCallback,
    Model,
    PieceSink,
    Provider,
    Streamed,
    context_window,
    relay,
    stream_of,
)
from swarm.providers.sim import Reply
from swarm.run._check import CheckResult
from swarm.run._merge import MergeResult, MergeStats
from swarm.run._plan import Plan, Subtask
from swarm.run._seams import ModelSource, WorkspaceLike

__all__ = [
    "CallRecord",
    "CountingProvider",
    "Recorder",
    "Shape",
    "SimChecks",
    "SimMerger",
    "SimScript",
    "SimWorkspaces",
    "make_plan",
    "sim_tools",
    "step_shares",
]

Shape = Literal["fanout", "chain", "dag", "spine"]
_ROOT = Path("/sim")


def step_shares(agents: int, steps: int) -> list[int]:
    """Each coder's model steps: `steps` spread evenly, at least one each."""
    base, extra = divmod(max(steps, agents), agents)
    return [base + (1 if i < extra else 0) for i in range(agents)]


def make_plan(agents: int, shape: Shape, seed: int) -> Plan:
    """N subtasks: independent (fanout), one chain, a layered DAG of width ~sqrt(N), or a
    spine (a chain of N/3 that sets the makespan, the rest independent, with slack)."""
    rng = random.Random(seed)
    ids = [f"s{i:04d}" for i in range(agents)]
    width = max(1, round(agents**0.5))
    subtasks = []
    for i, sid in enumerate(ids):
        deps: tuple[str, ...] = ()
        if (shape == "chain" or (shape == "spine" and i < max(2, agents // 3))) and i:
            deps = (ids[i - 1],)
        elif shape == "dag" and i >= width:
            layer = i // width
            prev = ids[(layer - 1) * width : layer * width]
            deps = tuple(sorted(set(rng.sample(prev, min(len(prev), 2)))))
        subtasks.append(
            Subtask(id=sid, title=f"simulated {sid}", instructions=f"do {sid}", depends_on=deps)
        )
    return Plan(subtasks=tuple(subtasks))


@dataclass
class SimScript:
    """Replies for every role: the planner returns the plan, agents step then finish."""

    plan: Plan
    shares: dict[str, int]
    """Coder steps by subtask id."""
    fix_steps: int = 2
    out_tokens: int = 200
    """Visible text tokens per step, besides the tool call."""
    reasoning_tokens: int | None = None
    """Thinking tokens per call; None keeps the profile's figure."""
    tools_per_step: int = 1
    """Tool calls in each reply but the last (the agent runs them concurrently)."""
    _text: str = field(init=False, repr=False)
    _plan_text: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._text = " ".join(["edit"] * self.out_tokens)
        self._plan_text = json.dumps(
            {
                "subtasks": [
                    s.model_dump(include={"id", "title", "instructions", "depends_on"})
                    for s in self.plan.subtasks
                ]
            }
        )

    def __call__(self, request: ChatRequest) -> Reply:
        meta = request.metadata
        role, agent = meta.get("role", ""), meta.get("agent", "")
        if role == "planner":
            return Reply(text=self._plan_text, reasoning_tokens=self.reasoning_tokens)
        steps = self.fix_steps
        if role == "coder":
            steps = self.shares.get(meta.get("subtask", ""), 1)
        # the agent numbers its steps; counting replies breaks once history is compacted
        step = meta.get("step")
        done = int(step) - 1 if step else sum(1 for m in request.messages if m.role == "assistant")
        if done + 1 < steps:
            calls = tuple(
                ToolCall.model_construct(
                    # a path per step: an agent that sends the same call again is stuck
                    id=f"c{done}.{i}",
                    name="sim_edit",
                    arguments=f'{{"path": "{agent}/{done}.{i}.py"}}',
                )
                for i in range(self.tools_per_step)
            )
        else:
            calls = (
                ToolCall.model_construct(
                    id=f"c{done}", name="finish", arguments='{"summary": "done"}'
                ),
            )
        return Reply(
            text=self._text or None, tool_calls=calls, reasoning_tokens=self.reasoning_tokens
        )


def sim_tools(tool_s: float) -> list[Tool]:
    """`sim_edit` (sleeps `tool_s`) and `finish`."""

    async def sim_edit(path: str) -> str:
        """Edit a file (simulated: takes a fixed time)."""
        await anyio.sleep(tool_s)
        return f"edited {path}"

    async def finish(summary: str) -> str:
        """Say the work is done."""
        raise Finish(summary)

    return [tool(sim_edit), tool(finish)]


@dataclass
class _Workspace:
    path: Path
    written: WriteLog = field(default_factory=WriteLog)

    async def patch(self) -> str:
        return f"simulated patch of {self.path.name}\n"

    async def apply(self, patch: str, *, reverse: bool = False) -> None:
        await anyio.lowlevel.checkpoint()


class SimWorkspaces:
    """In-memory workspaces, opened and removed in `open_s`."""

    def __init__(self, open_s: float = 0.0) -> None:
        self.open_s = open_s
        self.opened = 0

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]:
        return self._open(name)

    @asynccontextmanager
    async def _open(self, name: str) -> AsyncIterator[WorkspaceLike]:
        self.opened += 1
        if self.open_s:
            await anyio.sleep(self.open_s)
        yield _Workspace(_ROOT / name)


class SimChecks:
    """The check: sleeps `check_s`; a chosen subtask's first check fails (a fix round).

    `on_node(name, seconds)`, when set, notes the check on the simulated node holding
    workspace `name` and returns that node's name (the check span's `host.name`)."""

    def __init__(self, check_s: float, failing: set[str]) -> None:
        self.check_s, self.failing = check_s, failing
        self.runs: dict[str, int] = defaultdict(int)
        self.on_node: Callable[[str, float], str | None] | None = None

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
        name = path.name
        attrs = {sc.OPERATION: sc.OP_TOOL, sc.TOOL_NAME: "run_tests"}
        with tracer().start_as_current_span(f"{sc.OP_TOOL} run_tests", attributes=attrs) as span:
            host = self.on_node(name, self.check_s) if self.on_node else None
            if host is not None:
                span.set_attribute(sc.HOST_NAME, host)
            await anyio.sleep(self.check_s)
        self.runs[name] += 1
        passed = not (name in self.failing and self.runs[name] == 1)
        return CheckResult(passed, 0 if passed else 1, "ok" if passed else "1 failed", self.check_s)


class SimMerger:
    """The merge queue: one merge at a time, each taking `merge_s`, always green."""

    def __init__(self, merge_s: float, check: SimChecks) -> None:
        self.merge_s, self._check = merge_s, check
        self.worktree = _ROOT / "_integration"
        self.written = WriteLog()
        self.head = "sim-0"
        self.merges = 0
        self.stats = MergeStats()
        self._lock = anyio.Lock()

    async def merge(
        self, name: str, title: str, patch: str, *, check: str | None = None, **_: object
    ) -> MergeResult:
        async with self._lock:
            if self.merge_s:
                await anyio.sleep(self.merge_s)
            self.merges += 1
            self.stats.batches = self.stats.merged = self.merges
            return MergeResult("merged", await self.commit(f"swarm: {name}: {title}"))

    async def landed(self) -> Mapping[str, str]:
        return {}

    def expect(self, coming: int) -> None:
        """One merge at a time, each at once: nothing to gather."""

    async def run_check(self, command: str = "") -> CheckResult:
        return await self._check(self.worktree)

    async def commit(self, message: str, *, stage_edits: bool = False) -> str:
        self.head = f"sim-{self.merges}"
        return self.head

    async def reset(self) -> None:
        await anyio.lowlevel.checkpoint()


@dataclass(frozen=True)
class CallRecord:
    """One model call as the workload saw it."""

    model: str
    input_tokens: int
    output_tokens: int
    """Visible output tokens (reasoning excluded)."""
    reasoning_tokens: int
    duration_s: float


class Recorder:
    """A model source that notes every call by agent id."""

    def __init__(self, inner: ModelSource) -> None:
        self.inner = inner
        self.calls: dict[str, list[CallRecord]] = defaultdict(list)

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        return _Recorded(
            self.inner.model(role, agent_id=agent_id, escalate=escalate), self.calls[agent_id]
        )


class _Recorded:
    def __init__(self, inner: Model, log: list[CallRecord]) -> None:
        self.name, self._inner, self._log = inner.name, inner, log
        self.context_window = context_window(inner)

    async def chat(self, request: ChatRequest) -> ChatResult:
        return self._record(await self._inner.chat(request))

    def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        return relay(stream_of(self._inner, request), self._record)

    def _record(self, result: ChatResult) -> ChatResult:
        u = result.usage
        self._log.append(
            CallRecord(
                result.model,
                u.input_tokens,
                u.output_tokens - u.reasoning_tokens,
                u.reasoning_tokens,
                result.timing.duration_s,
            )
        )
        return result


class CountingProvider:
    """Wraps a provider, counting attempts and 429s."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name, self.kind, self.address = inner.name, inner.kind, inner.address
        self.attempts = 0
        self.rate_limited = 0
        self.over_window = 0
        """Calls rejected (400) for being longer than the model's window."""

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
        on_delta: PieceSink | None = None,
    ) -> ChatResult:
        from swarm.errors import ContextWindowExceeded, RateLimited

        self.attempts += 1
        try:
            if on_delta is None:  # a provider that does not stream need not take it
                return await self.inner.chat(model, request, on_first_token=on_first_token)
            return await self.inner.chat(
                model, request, on_first_token=on_first_token, on_delta=on_delta
            )
        except RateLimited:
            self.rate_limited += 1
            raise
        except ContextWindowExceeded:
            self.over_window += 1
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()


def failing_subtasks(ids: Sequence[str], rate: float, seed: int) -> set[str]:
    """The subtasks whose first check fails, chosen by `seed`."""
    rng = random.Random(seed + 1)
    return {i for i in ids if rng.random() < rate}
