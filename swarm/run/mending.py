"""A subtask's own check in its workspace, and the fixer rounds that make it green.

`Mender` owns the check command each subtask gets (its files' tests, or the whole check
when pytest finds none there), runs it keyed by the tree so an identical tree is not
checked twice, and sends fixers, a bounded number of rounds (escalating to the reasoning
tier after `escalate_after`), until it passes. The coordinator uses it for a coder's
work, a rebase fixer's, and the final verification's fix loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from swarm.errors import GaveUp
from swarm.run.check import NOTHING_TO_TEST, CheckFn, CheckResult, tree_key
from swarm.run.outcome import PhaseTimes, SubtaskOutcome
from swarm.run.parts import SolveOptions, WorkspaceLike
from swarm.run.plan import Subtask
from swarm.run.roles import FIXER, fix_prompt
from swarm.run.staff import Staff
from swarm.run.task import Task

__all__ = ["Checked", "Mender"]


@dataclass(frozen=True)
class Checked:
    """A workspace's patch, the command it was checked with, and how that went."""

    patch: str
    command: str
    result: CheckResult


class Mender:
    """Checks subtasks' workspaces and sends fixers until they are green."""

    def __init__(
        self,
        task: Task,
        options: SolveOptions,
        staff: Staff,
        check: CheckFn,
        times: PhaseTimes,
        fixing: Callable[[str], None],
    ) -> None:
        self.task, self.options, self.staff, self.check = task, options, staff, check
        self.times, self._fixing = times, fixing
        self.commands: dict[str, str] = {}
        """Each subtask's check command (the whole check when its files have no tests)."""

    async def first_check(
        self, st: Subtask, ws: WorkspaceLike, base: str, patch: str | None = None
    ) -> Checked | str:
        """The workspace's patch (`patch`, if read already) checked once; just the patch
        if there is no check."""
        patch = patch if patch is not None else await ws.patch()
        command = self.commands.get(st.id) or self.task.check_for(st.files)
        if not command or not patch.strip():
            return patch  # a tree equal to its base is as green as the base: not checked
        key = tree_key(base, patch)
        result = await self.timed("checks", self.check(ws.path, command, key=key))
        everything = self.task.check_for(())
        if result.exit_code in NOTHING_TO_TEST and everything and command != everything:
            command = everything  # pytest found no tests in the subtask's files: check all
            result = await self.timed("checks", self.check(ws.path, command, key=key))
        self.commands[st.id] = command
        return Checked(patch, command, result)

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
                raise GaveUp(f"check still failing after {rounds} fix rounds")
            rounds += 1
            outcome.fix_rounds += 1
            self._fixing(st.id)
            await self.fix(st, ws.path, result, round_=rounds, tag=tag, command=command)
            patch = await ws.patch()
            key = tree_key(base, patch)
            result = await self.timed("checks", self.check(ws.path, command, key=key))
        return patch

    async def fix(
        self,
        st: Subtask,
        path: Path,
        failed: CheckResult,
        *,
        round_: int,
        command: str,
        tag: str = "",
    ) -> None:
        escalate = round_ > self.options.escalate_after
        agent_id = f"fixer:{st.id}:{tag}{round_}"
        agent = self.staff.agent("fixer", agent_id, FIXER, path, st, escalate=escalate)
        await agent.run(fix_prompt(st, command, failed.output, await agent.shown(st.files)))

    async def timed(self, phase: str, work: Awaitable[CheckResult]) -> CheckResult:
        started = anyio.current_time()
        try:
            return await work
        finally:
            self.times.add(phase, anyio.current_time() - started)
