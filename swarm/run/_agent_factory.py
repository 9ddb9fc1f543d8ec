"""The agents a coordinator puts to work: each role's model, tools and workspace context,
and the planner's bounded rounds (`AgentFactory.plan`).

Every agent of a run is made here, so each gets its role's model (escalated to the
reasoning tier when asked), the run's tools, a context confining them to their worktree
with the repository's own environment, the subtask's check command for `run_tests`, and
its role's context policy: coders keep their six newest tool outputs whole and fixers
their four (a fixer's history is mostly test output), older ones become one line, and the
oldest turns are dropped when that is not enough.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path

import anyio
from opentelemetry.trace import SpanContext

from swarm.agent._fenced_files import FencedFileWrites
from swarm.agent._loop import Agent
from swarm.agent._tool import Tool, ToolContext, WriteLog
from swarm.agent._toolbox import CommandResult
from swarm.agent.compaction import ContextPolicy
from swarm.agent.context import Chain, MaskToolOutputs, RecentWindow
from swarm.agent.events import AgentResult
from swarm.agent.hooks import Hooks
from swarm.errors import ModelBehaviorError, WorkspaceError
from swarm.messages import ChatRequest, ChatResult, Message
from swarm.model import Model, Streamed, stream_of
from swarm.run._asked_calls import RENAME_TOOL, AskedRenames, KeptDefinitions, NotATool
from swarm.run._coverage import coverage_problem, uncovered_parts
from swarm.run._environment import CheckEnvironment
from swarm.run._git import git
from swarm.run._missing import asked_names, words
from swarm.run._outcome import PhaseTimes
from swarm.run._plan import Plan, PlanError, Subtask, fold_contained, parse_plan_reply
from swarm.run._roles import (
    PLANNER,
    PLANNER_TOOLS,
    RENAME_NOTE,
    mentions_text,
    planner_prompt,
    shown_files,
)
from swarm.run._seams import RunLike, RunOptions, Where, is_local
from swarm.run._task import Task

__all__ = ["AgentFactory", "TimedAgent", "role_policy"]

_KEEP_OUTPUTS = {"coder": 6, "fixer": 4}
_RENAMING = re.compile(r"\brenam", re.IGNORECASE)
"""A task that speaks of renaming (rename, renames, renamed, renaming)."""


def role_policy(role: str) -> ContextPolicy:
    """The context policy `swarm solve` gives a role's agents."""
    keep = _KEEP_OUTPUTS.get(role, 4)
    return ContextPolicy(Chain((MaskToolOutputs(keep_last=keep), RecentWindow())))


@dataclass(frozen=True)
class AgentFactory:
    """Makes a run's agents."""

    run: RunLike
    task: Task
    options: RunOptions
    tools: Sequence[Tool]
    environment: CheckEnvironment
    times: PhaseTimes
    check_slot: Callable[[], AbstractAsyncContextManager[None]] | None = None
    """Where an agent's `run_tests` waits for its place among the checks."""
    remember: Callable[[Path, str, CommandResult], Awaitable[None]] | None = None
    """Told of an agent's run of the whole check in its workspace (by path)."""
    stuck: dict[str, str] = field(default_factory=dict)
    """Agents stopped for repeating themselves, by id: what they kept sending."""
    restarts: dict[str, int] = field(default_factory=dict)
    """Times each subtask started again after its cluster node was lost, by id: its
    agents then take fresh journal keys (`agent`)."""
    fresh: dict[str, int] = field(default_factory=dict)
    """Times each subtask started afresh after its fix rounds left it red, by id (fresh
    journal keys too)."""

    def agent(
        self,
        role: str,
        agent_id: str,
        instructions: str,
        where: Where,
        st: Subtask,
        *,
        escalate: bool = False,
    ) -> TimedAgent:
        """An agent working in `where` (a workspace: its path, and the log its tools note
        their new files in)."""
        models = self.run.models
        if again := self.restarts.get(st.id, 0):
            # Asked anew, not replayed: the replayed calls would send the lost attempt's
            # tool calls again, and the one its node was lost in may be why (a command
            # that takes a node down, or holds it until it is lost).
            agent_id = f"{agent_id}:node{again}"
        if afresh := self.fresh.get(st.id, 0):
            agent_id = f"{agent_id}:afresh{afresh}"  # replayed, it would make the red change
        # an agent that repeats itself moves to the reasoning tier once (its own journal key)
        fallback = None
        if not escalate:
            fallback = _MadeOnFirstCall(
                partial(models.model, role, agent_id=f"{agent_id}:up", escalate=True)
            )
        agent: Agent[str] = Agent(
            role,
            model=models.model(role, agent_id=agent_id, escalate=escalate),
            fallback_model=fallback,
            instructions=instructions
            if RENAME_TOOL in self._tool_names
            else instructions.replace(RENAME_NOTE, ""),
            tools=self._offered,
            hooks=self._hooks(where.path, st),
            context=self.context(where.path, where.written, self.task.check_for(st.files)),
            max_steps=self.options.max_steps_per_agent,
            agent_id=agent_id,
            subtask_id=st.id,
            compaction=role_policy(role) if self.options.compaction else None,
            settings=self.run.settings.get(role),
        )
        return TimedAgent(agent, self.times, role, self.stuck)

    def writes_fences(self, path: Path) -> bool:
        """Whether the agents working in `path` have code they show in a fence written
        (`swarm.agent._fenced_files`): a local worktree, with a `write_file` tool."""
        return is_local(path) and "write_file" in self._tool_names

    @cached_property
    def _offered(self) -> Sequence[Tool]:
        """The tools the run's coders and fixers get: `rename` only when the task speaks
        of renaming (asked to add a test, a small model renamed `clamp` to `clamp_test`
        and back, four times, and wrote no test)."""
        if _RENAMING.search(f"{self.task.title}\n{self.task.instructions}"):
            return self.tools
        return [t for t in self.tools if t.name != RENAME_TOOL]

    @cached_property
    def _tool_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self._offered)

    @cached_property
    def _task_words(self) -> frozenset[str]:
        """The words of the task, read once for every agent's `AskedRenames`."""
        return words(self.task.title, self.task.instructions)

    def _hooks(self, path: Path, st: Subtask) -> tuple[Hooks, ...]:
        """A rename no instruction asks for is vetoed, an edit that would put new code in
        the place of definitions none names keeps them, and a call to a name the subtask
        asks to write is told so (`swarm.run._asked_calls`). A coder's or fixer's reply
        that shows its files whole in fences, calling no tool, writes them
        (`swarm.agent._fenced_files`; not on another node's files)."""
        tools = self._tool_names
        fenced = self.writes_fences(path)
        names = frozenset(asked_names(st.title, st.instructions)) - tools
        root = path if is_local(path) else None
        ours = words(st.title, st.instructions)
        hooks: list[Hooks] = [NotATool(names, tuple(st.files), fenced, root)]
        if root is not None:
            hooks.append(KeptDefinitions(ours | self._task_words, root))
        if RENAME_TOOL in tools:
            hooks.append(AskedRenames(ours, self._task_words, tuple(st.files), tools))
        if fenced:
            asked = f"{st.title}\n{st.instructions}"
            hooks.append(FencedFileWrites(path, st.files, asked=asked, tools=tools))
        return tuple(hooks)

    async def plan(self, path: Path, written: WriteLog) -> Plan:
        """Ask the planner (working in `path`), feeding validation errors back a bounded
        number of times. A valid plan that leaves parts of the task out (`_coverage`) is
        asked for once more, told which: the one that leaves out fewer is kept."""
        tools = [t for t in self.tools if t.name in PLANNER_TOOLS]
        known = await _files_in(path)
        errors: list[str] | None = None
        best: Plan | None = None
        left: list[str] = []  # the parts of the task `best` leaves out
        asked_again = False
        for attempt in range(self.options.plan_retries + 1):
            agent_id = "planner" if attempt == 0 else f"planner:{attempt}"
            agent: Agent[str] = Agent(
                "planner",
                model=self.run.models.model("planner", agent_id=agent_id),
                instructions=PLANNER,
                tools=tools,
                context=self.context(path, written, self.task.accept_command),
                max_steps=self.options.max_steps_per_agent,
                agent_id=agent_id,
                settings=self.run.settings.get("planner"),
            )
            started = anyio.current_time()
            result = await agent.run(planner_prompt(self.task, errors, sorted(known)))
            self.times.add("planning", anyio.current_time() - started)
            if result.stop_reason == "stuck":
                self.stuck[agent_id] = result.repeated
            try:
                plan = fold_contained(parse_plan_reply(str(result.output or ""), known))
            except PlanError as exc:
                if best is not None:  # asked again for the parts left out: that went wrong
                    return best
                errors = exc.problems or [str(exc)]
                if result.calls.truncated:
                    errors.append(
                        f"the planner's reply was cut off by max_tokens {result.calls.truncated} "
                        "times (finish_reason: length); raise `max_tokens` for the planner"
                    )
                if result.stop_reason not in ("final_answer", "finish"):
                    errors.append(f"the planner ended with {result.stop_reason}, not an answer")
                continue
            missed = uncovered_parts(self.task.instructions, plan)
            if best is None or len(missed) < len(left):
                best, left = plan, missed
            if not left or asked_again:
                return best
            asked_again, errors = True, [coverage_problem(left)]
            self.run.progress.note(
                f"the plan leaves out {len(left)} part(s) of the task: asked again"
            )
        if best is not None:
            return best
        raise ModelBehaviorError(
            "no valid plan: " + "; ".join(errors or ["no reply"]),
            agent="planner",
            attempts=self.options.plan_retries + 1,
        )

    def context(self, path: Path, written: WriteLog, check: str | None) -> ToolContext:
        timeout_s = self.options.check_timeout_s
        ctx = self.environment.context(path, check=check, timeout_s=timeout_s, written=written)
        if self.check_slot is None and self.remember is None:
            return ctx
        remember = self.remember
        return replace(  # one copy, not one per field: every agent's context is made here
            ctx,
            check_slot=self.check_slot or ctx.check_slot,
            checked=partial(remember, path) if remember is not None else ctx.checked,
        )


async def _mentions(path: Path, names: Sequence[str], skip: Sequence[str]) -> list[str]:
    """`path:line:text` for each tracked line of `path` outside `skip` naming one of
    `names` as a whole word."""
    if not names:
        return []
    patterns = [arg for name in names for arg in ("-e", name)]
    try:
        found = await git("grep", "-n", "-I", "-w", "-F", "--no-color", *patterns, cwd=path)
    except WorkspaceError:
        return []  # no match (git grep exits 1), or no git: nothing to add
    skipped = set(skip)
    return [line for line in found.splitlines() if line.split(":", 1)[0] not in skipped]


async def _files_in(path: Path) -> frozenset[str]:
    """The files git tracks in `path` (none when it is not a local worktree)."""
    if not is_local(path):
        return frozenset()
    try:
        listed = await git("ls-files", "-z", cwd=path)
    except WorkspaceError:
        return frozenset()
    return frozenset(name for name in listed.split("\0") if name)


class TimedAgent:
    """An agent whose run time is added to its phase; the check, not its word, decides."""

    def __init__(
        self, agent: Agent[str], times: PhaseTimes, phase: str, stuck: dict[str, str]
    ) -> None:
        self._agent, self._times, self._phase, self._stuck = agent, times, phase, stuck

    def depends_on(self, spans: list[SpanContext]) -> None:
        self._agent.depends_on = spans

    async def shown(self, files: Sequence[str], names: Sequence[str] = ()) -> str:
        """The current text of `files` in this agent's workspace, then where `names`
        appear in its other files, for its prompt ("" for a workspace on another node:
        the agent reads its files there with its tools)."""
        context = self._agent.context
        if context is None or not is_local(context.root):
            return ""
        # read here, not in a worker thread: at most `SHOWN_CHARS` of a few local files,
        # cheaper than the thread's round trip (5 % of a 300-subtask solve's CPU was that)
        await anyio.lowlevel.checkpoint()
        text = shown_files(context, files) if files else ""
        return text + mentions_text(await _mentions(context.root, names, files), names)

    async def run(self, prompt: str, history: Sequence[Message] = ()) -> AgentResult[str]:
        """Run the agent (after `history`, to go on with a conversation); its result says
        how it ended (the check, not its word, decides whether its work is good)."""
        started = anyio.current_time()
        try:
            result = await self._agent.run(prompt, history=history)
            if result.stop_reason == "stuck":
                self._stuck[self._agent.agent_id or self._agent.name] = result.repeated
            return result
        finally:
            self._times.add(self._phase, anyio.current_time() - started)


class _MadeOnFirstCall:
    """A model made when it is first called: an agent's fallback, rarely needed."""

    name = "fallback"

    def __init__(self, make: Callable[[], Model]) -> None:
        self._make: Callable[[], Model] = make
        self._model: Model | None = None

    async def chat(self, request: ChatRequest) -> ChatResult:
        return await self._made().chat(request)

    def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        return stream_of(self._made(), request)

    def _made(self) -> Model:
        if self._model is None:
            self._model = self._make()
        return self._model
