"""A subtask's own check in its workspace, and the fixer rounds that make it green.

`FixLoop` owns the check command each subtask gets (its files' tests, or the whole check
when pytest finds none there), runs it keyed by the tree so an identical tree is not
checked twice, and sends fixers, a bounded number of rounds (escalating to the reasoning
tier after `escalate_after`), until it passes.

Where the check is the whole pytest suite, a subtask's check in its worktree runs only the
test files its change reaches by imports (`swarm.run._impact`), or the whole suite where
that selection cannot be trusted; the merge queue checks the patch with the whole suite
(`commands`), so the suite runs on the integration branch, not in every worktree. An
agent's green run of the whole suite on the same tree stands for the selection.

The coordinator uses it for a coder's work, a rebase fixer's, and the final verification's
fix loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._tool import WriteLog
from swarm.errors import StillRed
from swarm.run._agent_factory import AgentFactory
from swarm.run._check import NOTHING_TO_TEST, Checker, CheckFn, CheckResult, tree_key
from swarm.run._impact import Selection, changed_files, select, unselectable
from swarm.run._outcome import PhaseTimes, SubtaskOutcome
from swarm.run._plan import Subtask
from swarm.run._roles import FIXER, fix_prompt
from swarm.run._seams import Place, RunOptions, WorkspaceLike, is_local
from swarm.run._task import Task

__all__ = ["Checked", "FixLoop"]


@dataclass(frozen=True)
class Checked:
    """A workspace's patch, the command it was checked with, and how that went."""

    patch: str
    command: str
    """The command that ran (a selection of the check's tests, when `swarm.run._impact`
    chose one)."""
    result: CheckResult


class FixLoop:
    """Checks subtasks' workspaces and sends fixers until they are green."""

    def __init__(
        self,
        task: Task,
        options: RunOptions,
        agents: AgentFactory,
        check: CheckFn,
        times: PhaseTimes,
        fixing: Callable[[str], None],
    ) -> None:
        self.task, self.options, self.agents, self.check = task, options, agents, check
        self.times, self._fixing = times, fixing
        self.commands: dict[str, str] = {}
        """Each subtask's check command for the merge queue (the whole check when its
        files have no tests, or when its worktree ran a selection of the tests)."""
        self.scopes: dict[str, str] = {}
        """What each subtask's last check in its worktree ran: `impact: 2 of 28 test
        files`, or `full` and why (for the report)."""

    async def first_check(
        self, st: Subtask, ws: WorkspaceLike, base: str, patch: str | None = None
    ) -> Checked | str:
        """The workspace's patch (`patch`, if read already) checked once; just the patch
        if there is no check."""
        patch = patch if patch is not None else await ws.patch()
        command = self.commands.get(st.id) or self.task.check_for(st.files)
        if not command or not patch.strip():
            return patch  # a tree equal to its base is as green as the base: not checked
        return await self._checked(st, ws, base, patch, command)

    async def _checked(
        self, st: Subtask, ws: WorkspaceLike, base: str, patch: str, command: str
    ) -> Checked:
        """`patch`'s tree checked with `command`, or with the tests its change reaches
        when `command` is the whole check (see the module)."""
        key = tree_key(base, patch)
        everything = self.task.check_for(())
        if not self.task.impact or command != everything:
            result = await self.timed("checks", self.check(ws.path, command, key=key))
            if result.exit_code in NOTHING_TO_TEST and everything and command != everything:
                command = everything  # pytest found no tests in the subtask's files: check all
                result = await self.timed("checks", self.check(ws.path, command, key=key))
            self.commands[st.id] = command
            return Checked(patch, command, result)
        self.commands[st.id] = command
        with tracer().start_as_current_span(
            f"{sc.IMPACT_SPAN} {st.id}", attributes={sc.SUBTASK_ID: st.id}
        ) as span:
            whole = self._known(command, key)
            scope = await self._selection(ws.path, command, patch) if whole is None else None
            if isinstance(scope, Selection):
                self.scopes[st.id] = scope.describe()
                span.set_attribute(sc.CHECK_TESTS_SELECTED, len(scope.tests))
                span.set_attribute(sc.CHECK_TEST_FILES, scope.total)
                run = scope.command
            else:
                why = scope or "an agent's run of the whole check on this tree passed"
                self.scopes[st.id] = f"full: {why}"
                span.set_attribute(sc.CHECK_FULL_REASON, why)
                run = command
            if whole is not None:
                return Checked(patch, run, whole)
            result = await self.timed("checks", self.check(ws.path, run, key=key))
            return Checked(patch, run, result)

    def _known(self, command: str, key: str) -> CheckResult | None:
        """A green result of the whole check on this tree already (an agent's own run)."""
        if not isinstance(self.check, Checker):
            return None
        known = self.check.result(command, key)
        return known if known is not None and known.passed else None

    @staticmethod
    async def _selection(path: Path, command: str, patch: str) -> Selection | str:
        """The tests `patch` reaches in the worktree at `path`, or why all of them."""
        if not is_local(path):
            return "the worktree is not on this machine"
        changed = changed_files(patch)
        # what the command and the patch alone decide, without a worker thread's round trip
        if (why := unselectable(command, changed)) is not None:
            return why
        return await anyio.to_thread.run_sync(select, path, command, changed)

    async def until_green(
        self,
        st: Subtask,
        ws: WorkspaceLike,
        base: str,
        outcome: SubtaskOutcome,
        *,
        tag: str,
        checked: Checked | str | None = None,
    ) -> str:
        """Check the workspace (unless `checked` already); on failure send fixers, a
        bounded number of rounds. Returns the workspace's patch once its check is green
        (or there is no check)."""
        checked = checked if checked is not None else await self.first_check(st, ws, base)
        if isinstance(checked, str):
            return checked
        patch, command, result = checked.patch, checked.command, checked.result
        rounds = 0
        while not result.passed:
            if rounds >= self.options.fix_rounds:
                raise StillRed(rounds, command, result.output)
            rounds += 1
            outcome.fix_rounds += 1
            self._fixing(st.id)
            await self.fix(st, ws.path, ws.written, result, round_=rounds, tag=tag, command=command)
            patch = await ws.patch()
            if not patch.strip():
                return patch
            checked = await self._checked(st, ws, base, patch, self.commands[st.id])
            command, result = checked.command, checked.result
        return patch

    async def fix(
        self,
        st: Subtask,
        path: Path,
        written: WriteLog,
        failed: CheckResult,
        *,
        round_: int,
        command: str,
        tag: str = "",
    ) -> None:
        escalate = round_ > self.options.escalate_after
        agent_id = f"fixer:{st.id}:{tag}{round_}"
        agent = self.agents.agent(
            "fixer", agent_id, FIXER, Place(path, written), st, escalate=escalate
        )
        shown = await agent.shown(st.files)
        await agent.run(fix_prompt(self.task, st, command, failed.output, shown))

    async def timed(self, phase: str, work: Awaitable[CheckResult]) -> CheckResult:
        started = anyio.current_time()
        try:
            return await work
        finally:
            self.times.add(phase, anyio.current_time() - started)
