"""The coordinator: code/test/fix every subtask of a plan in parallel, merge, verify.

Ready subtasks run in one task group, at most `max_agents` at once, longest remaining
chain first; each gets a coder in its own workspace from the current integration head,
then the check, then bounded fixer rounds (escalating to the reasoning tier); green
patches go through the merge queue (a rebase fixer's while its own check runs, as that
check and the queue's were one after the other on a red run's critical path); a final
verification (with a fix loop) closes the run. A subtask whose provider calls failed is
tried again later (bounded); a failed subtask fails alone; a budget running out stops the
dispatch and what did not run is reported as skipped. Subtask states are journaled, so a
resumed run continues without redoing merged work.

Traces carry the structure: a subtask that waited for its dependencies records a
`swarm.wait dependency` span linked (`depends_on`) to the merge spans of the subtasks it
waited for, and every wait (slot, merge) goes through `swarm._tracing.waits`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
from opentelemetry import trace
from opentelemetry.trace import SpanContext

from swarm._tracing import semconv as sc
from swarm._tracing.pulse import PulseRecord
from swarm._tracing.setup import current_run
from swarm._tracing.waits import record_wait, waiting
from swarm.agent._tool import Tool
from swarm.agent._toolbox import CommandResult, coding_tools
from swarm.agent.events import AgentResult
from swarm.errors import (
    BudgetExceeded,
    GaveUp,
    ProviderError,
    StillRed,
    SwarmError,
    WorkspaceError,
)
from swarm.messages import Message
from swarm.run._agent_factory import AgentFactory
from swarm.run._check import (
    Checker,
    CheckFn,
    CheckResult,
    commit_key,
    failing_part,
    tree_key,
)
from swarm.run._copies import Copy, copied_definitions, copy_prompt
from swarm.run._dispatch import Dispatch
from swarm.run._environment import CheckEnvironment
from swarm.run._fix_loop import Checked, FixLoop
from swarm.run._live_path import LivePath
from swarm.run._merge import Merger, MergeResult
from swarm.run._missing import (
    asked_names,
    missing_names,
    missing_prompt,
    named_files,
    taken_prompt,
    words,
)
from swarm.run._outcome import PhaseTimes, RunOutcome, SubtaskOutcome
from swarm.run._plan import Plan, Subtask, fold_steps
from swarm.run._pulse import pulsing, record
from swarm.run._removals import Removal, removal_prompt, unasked_removals
from swarm.run._renamed import left_behind, renames
from swarm.run._report import one_line
from swarm.run._roles import (
    CODER,
    FIXER,
    afresh_note,
    coder_prompt,
    completion_prompt,
    first_step,
    later_step,
    named_symbols,
    rebase_prompt,
    step_prompt,
    unchanged_prompt,
)
from swarm.run._seams import (
    GitWorkspaces,
    Place,
    RunLike,
    RunOptions,
    Seams,
    WorkspaceLike,
    Workspaces,
    is_local,
    releasing,
)
from swarm.run._slack import RouteHints
from swarm.run._strays import Stray, collected_patterns, stray_prompt, stray_tests
from swarm.run._task import Task
from swarm.run._untouched import untouched_files, untouched_prompt

__all__ = ["Coordinator", "node_lost_in"]

T = TypeVar("T")
_Found = TypeVar("_Found")


@dataclass(frozen=True)
class _Coded:
    """What a coder's turn left: the patch (None: not read since the last change), the new
    names its subtask asks for, whether the coder was sent back for missing ones, and its
    own change when that was green before a send-back changed it (None: not green, or
    nothing changed it)."""

    patch: str | None
    asked: list[str]
    sent_back: bool = False
    green: str | None = None
    checked: Checked | str | None = None
    """`patch` checked (`FixLoop.first_check`), when it was before any send-back changed
    it; None: to check."""


@dataclass(frozen=True)
class _SendBack(Generic[_Found]):
    """A rule a finished coder's change is read by (`Coordinator._sent_back`): `find` what
    the patch should not hold, the `prompt` that sends the coder back once, and the
    subtask's `warning` for what is still found after."""

    tag: str
    find: Callable[[str], Awaitable[list[_Found]]]
    prompt: Callable[[list[_Found]], str]
    warning: Callable[[list[_Found]], str]


def _listed(found: Sequence[object]) -> str:
    return ", ".join(map(str, found))


NODE_RESTARTS = 2
"""Times a subtask starts again elsewhere after its workspace's cluster node was lost."""
_REBASING = 1 << 62
"""A rebase fixer's claim on an agent place: its subtask is late already."""


STUCK_RESTARTS = 1
"""Times a coder that got stuck without changing anything starts over, fresh."""
STUCK_RESTARTS_IN_TIME = 3
"""Times it may, while the run's deadline leaves room for `_ROOM_FOR` more attempts like
the last: a sampled model stuck once is often not stuck on a fresh try."""
_ROOM_FOR = 3


class Coordinator:
    def __init__(
        self,
        run: RunLike,
        task: Task,
        *,
        options: RunOptions,
        repo: Path | None = None,
        seams: Seams | None = None,
    ) -> None:
        self._run, self.task, self.options = run, task, options
        seams = seams or Seams()
        self.times = PhaseTimes()
        self._tools: list[Tool] = list(seams.tools) if seams.tools is not None else coding_tools()
        if seams.workspaces is None and repo is None:
            raise ValueError("a Coordinator needs a repo or workspaces")
        self._environment = seams.environment or CheckEnvironment.resolve(repo or Path())
        self._workspaces: Workspaces = seams.workspaces or GitWorkspaces(
            repo or Path(), run.id, self._environment
        )
        checker = seams.check or Checker(
            self._environment,
            timeout_s=options.check_timeout_s,
            max_concurrent=options.merge.check_slots,
        )
        self._check: CheckFn = checker
        slot = seams.check_slot or (checker.slot if isinstance(checker, Checker) else None)
        self._trees: dict[Path, tuple[WorkspaceLike, str]] = {}
        """Each open workspace of a subtask by path, with its base: an agent's own full
        check there counts as the tree's check (`_remember`)."""
        remember = self._remember if isinstance(checker, Checker) else None
        self._agents = AgentFactory(
            run, task, options, self._tools, self._environment, self.times, slot, remember
        )
        self._changed = anyio.Event()
        self._merge_spans: dict[str, SpanContext] = {}
        self._fix_loop = FixLoop(task, options, self._agents, checker, self.times, self._fixing)
        self._plan_ready_ns = 0
        self._order, self._waited_on = dict[str, int](), set[str]()
        """Each subtask's place in the merge queue's line (`Plan.merge_rank`); the waited on."""
        self._priority: dict[str, int] = {}
        """Each subtask's claim on an agent place (`Plan.place_priority`)."""
        self._live: LivePath | None = None
        self._queued: set[str] = set()
        """Subtasks whose patch is in the merge queue now."""
        self._steps: dict[str, list[str]] = {}
        """Each subtask's instructions as steps, the parts folded into it (`fold_steps`)."""
        self._asked: dict[str, list[str]] = {}
        """The new names each subtask was asked for (`_missing`), once its coder ran."""
        self._task_new: list[str] = []
        """The names the task asks for that no file had when the run started."""
        self._renames = renames(task.title, task.instructions)
        """The (old, new) names the task renames (`_renamed`)."""
        self._added: dict[str, str] = {}
        """The names merged subtasks were asked for, each with the subtask that added it:
        a later subtask may not take them away unasked."""

    # -- planning ---------------------------------------------------------------------

    async def make_plan(self, base: str) -> Plan:
        """Ask the planner, feeding validation errors back a bounded number of times."""
        async with self._workspaces.open(base, "planner") as ws:
            return await self._agents.plan(ws.path, ws.written)

    # -- the run ----------------------------------------------------------------------

    async def run(
        self, plan: Plan, queue: Merger, *, done: frozenset[str] = frozenset()
    ) -> RunOutcome:
        """Run every subtask not in `done` (merged by an earlier process), then verify.

        A spent budget or the deadline is not an error here: the outcome says `stopped`,
        what merged stays merged, and what did not run is `skipped`.
        """
        self._order = {st.id: plan.merge_rank(st.id) for st in plan.subtasks}
        self._waited_on = {st.id for st in plan.subtasks if plan.chain_length(st.id) > 1}
        self._priority = {st.id: plan.place_priority(st.id) for st in plan.subtasks}
        self._steps = {st.id: fold_steps(plan, st) for st in plan.subtasks}
        dispatch = Dispatch.for_plan(plan, queue, done, self.options.max_agents)
        final: CheckResult | None = None
        missing: list[str] = []
        left: dict[str, list[str]] = {}
        trace = current_run()
        started = anyio.current_time()

        def now() -> PulseRecord:
            run = self._run
            return record(started, self._live, run.progress, run.budget, len(self._queued))

        with anyio.move_on_after(self._run.budget.remaining_s()) as deadline:
            async with pulsing(trace.path if trace is not None else None, now):
                self._task_new = await self._names_at_start(queue)
                stop = await self._dispatch_all(plan, dispatch)
                async with releasing(self._workspaces):  # no one needs them any more
                    if stop is None:
                        try:
                            final = await self._verify(queue)
                            missing, left = await self._asked_of_the_run(queue, dispatch, final)
                        except BudgetExceeded as exc:
                            stop = exc.kind
        if deadline.cancelled_caught:
            stop = "deadline"
        for outcome in dispatch.skip_rest(stop):
            self._run.journal.set_subtask(self._run.id, outcome.id, "skipped", error=outcome.error)
        outcomes = tuple(dispatch.outcomes.values())
        stuck = dict(self._agents.stuck)
        return RunOutcome(outcomes, stop, final, self.times, stuck, tuple(missing), left)

    async def _names_at_start(self, queue: Merger) -> list[str]:
        """The names the task asks for (`_missing`) that no file of the integration
        worktree has before any subtask merged."""
        if not is_local(queue.worktree):
            return []
        asked = asked_names(self.task.title, self.task.instructions)
        return await missing_names(queue.worktree, asked)  # none asked: no git run

    async def _dispatch_all(self, plan: Plan, dispatch: Dispatch) -> str | None:
        """Start subtasks as they become ready; returns the budget kind that stopped it. A
        spent budget stops new starts; those in flight finish (their calls in flight
        settle and count) or stop at their next call."""
        self._run.progress.start(total=len(plan.subtasks), merged=len(dispatch.done))
        self._plan_ready_ns = time.time_ns()
        # without the router's hints (a library's own model source) the live path only
        # estimates the finish, for the pulse: no deadline to pace, no router to tell
        hints = self._run.hints
        note = self._run.progress.note
        self._live = LivePath(plan, hints or RouteHints(), limiter=dispatch.limiter, note=note)
        if hints is not None:
            self._live.deadline(self._run.budget.remaining_s)
        self._live.done_before(dispatch.done)
        started = set(dispatch.done)
        async with anyio.create_task_group() as tg:
            while True:
                if dispatch.stop is None:
                    orders_only = self.task.dependencies == "order"
                    ready = plan.ready(
                        dispatch.done, started, dispatch.finished, orders_only=orders_only
                    )
                    for st in ready:
                        started.add(st.id)
                        self._run.progress.queued(st.id)
                        tg.start_soon(self._subtask, st, dispatch, name=st.id)
                if started <= dispatch.finished:
                    break
                await self._changed.wait()
                self._changed = anyio.Event()
        return dispatch.stop

    async def _verify(self, queue: Merger) -> CheckResult | None:
        """`accept` on the integration branch, with a bounded fix loop; fixes are committed
        only once green, and dropped otherwise: nothing red is committed."""
        accept = self.task.accept_command
        if not accept:
            return None
        fix_loop = self._fix_loop
        excuse = self._excused(accept)
        # the head's tree was checked already when its last batch was (same command)
        key = commit_key(queue.head)
        result = await fix_loop.timed(
            "checks", self._check(queue.worktree, accept, key=key, excuse=excuse)
        )
        final = Subtask(id="final", title="final verification", instructions=self.task.title)
        fixed = await self._fixed(queue, final, result, accept, excuse)
        if not fixed.passed:
            await queue.reset()
            return fixed
        if fixed is not result:  # fixers made it green
            await queue.commit("swarm: final verification fixes", stage_edits=True)
        return fixed

    def _excused(self, accept: str) -> bool:
        """Whether failures the base commit had are excused in `accept`'s result: an
        explicit `accept` is judged by itself."""
        return not self.task.accept or accept == self.task.check_for(())

    async def _fixed(
        self, queue: Merger, st: Subtask, result: CheckResult, accept: str, excuse: bool
    ) -> CheckResult:
        """Fixer rounds in the integration worktree until `accept` passes there (or the
        rounds run out); the last check's result. Nothing is committed here."""
        for n in range(1, self.options.fix_rounds + 1):
            if result.passed:
                break
            await self._fix_loop.fix(
                st, queue.worktree, queue.written, result, round_=n, command=accept
            )
            result = await self._fix_loop.timed(
                "checks", self._check(queue.worktree, accept, excuse=excuse)
            )
        return result

    async def _asked_of_the_run(
        self, queue: Merger, dispatch: Dispatch, final: CheckResult | None
    ) -> tuple[list[str], dict[str, list[str]]]:
        """The names the task asks for that no file of the branch has (the run's
        `missing`) and the lines that still hold a name it renames (`_renamed`); when the
        branch is green, one coder is given them first (`_complete`), whether every
        subtask merged or some failed."""
        if not self._task_new and not self._renames:
            return [], {}
        missing = await missing_names(queue.worktree, self._task_new)
        left = await left_behind(queue.worktree, self._renames)
        failed = [o.title for id_, o in dispatch.outcomes.items() if id_ not in dispatch.done]
        accept = self.task.accept_command
        if (missing or left) and accept and final is not None and final.passed:
            await self._complete(queue, accept, missing, left, failed)
            missing = await missing_names(queue.worktree, missing)
            left = await left_behind(queue.worktree, self._renames)
        return missing, left

    async def _complete(
        self,
        queue: Merger,
        accept: str,
        missing: list[str],
        left: dict[str, list[str]],
        failed: list[str],
    ) -> None:
        """Names the task asks for that no file of the green branch has (a planner's
        subtasks left them out, their coders did, or the subtasks that would have added
        them failed: `failed`, by title), and lines still holding a name the task renames,
        go to one coder in the integration worktree (sent back once when it finishes with
        the names still missing), with fixer rounds after it. Its change is committed
        green, or dropped: the green branch stays as it was; so is one that added none of
        the names and took no old name away."""
        excuse = self._excused(accept)
        asked = [*missing, *(f"{old} renamed" for old in left)]
        self._run.progress.note(f"the task asks for {', '.join(asked)}: one coder adds it")
        st = Subtask(
            id="complete",
            title="what the task asks for and no subtask added",
            instructions=self.task.instructions,
        )
        place = Place(queue.worktree, queue.written)
        coder = self._agents.agent("coder", "coder:complete", CODER, place, st)
        result = await coder.run(completion_prompt(self.task, missing, failed, self._renamed(left)))
        if result.finished and (still_missing := await missing_names(queue.worktree, missing)):
            # a small model's completing coder said "Added test_clamp" and wrote nothing:
            # sent back once, as a subtask's coder is
            files = named_files(queue.worktree, self.task.instructions)
            told = missing_prompt(still_missing, files, self._agents.writes_fences(place.path))
            again = self._agents.agent("coder", "coder:complete:missing", CODER, place, st)
            await again.run(told, history=result.messages)
        added = len(await missing_names(queue.worktree, missing)) < len(missing)
        still = await left_behind(queue.worktree, self._renames)
        if not added and sum(map(len, still.values())) >= sum(map(len, left.values())):
            # none of it done: what it changed is not what it was asked for (a small
            # model renamed `summary` to `summary_old` in the README, and back)
            await queue.reset()
            return
        checked = await self._fix_loop.timed(
            "checks", self._check(queue.worktree, accept, excuse=excuse)
        )
        if (await self._fixed(queue, st, checked, accept, excuse)).passed:
            await queue.commit(
                "swarm: what the task asks for and no subtask added", stage_edits=True
            )
        else:
            await queue.reset()

    def _renamed(self, left: dict[str, list[str]]) -> list[tuple[str, str, list[str]]]:
        """(old, new, lines still holding old) of each rename `left` names."""
        return [(old, new, left[old]) for old, new in self._renames if old in left]

    # -- one subtask ------------------------------------------------------------------

    async def _subtask(self, st: Subtask, dispatch: Dispatch) -> None:
        """One subtask; tried again later (`subtask_retries` times, waiting without its
        place) when it failed because its provider calls did, not because it stayed red."""
        outcome = dispatch.outcomes[st.id]
        self._record_dependency_wait(st)
        started: list[float] = []  # when it first got a place (the virtual clock may start at 0)
        try:
            while True:
                try:
                    return await self._try_subtask(st, dispatch, outcome, started)
                except ProviderError as exc:
                    dispatch.note_failure(exc)
                    if not dispatch.retry_later(exc, outcome, self.options.subtask_retries):
                        raise
                with waiting(sc.WAIT_BACKOFF, attributes={sc.SUBTASK_ID: st.id}):
                    await anyio.sleep(self.options.subtask_retry_after_s * outcome.retries)
        except SwarmError as exc:  # a failed subtask does not cancel its siblings
            self._ended_by(exc, outcome, dispatch)
        except BaseExceptionGroup as group:  # from a task group of the subtask's own
            errors, rest = group.split(SwarmError)
            if rest is not None or errors is None:
                raise
            self._ended_by(_first_leaf(errors), outcome, dispatch)
        finally:
            outcome.wall_s = anyio.current_time() - started[0] if started else 0.0
            self._settle(outcome, dispatch)

    def _ended_by(self, exc: BaseException, outcome: SubtaskOutcome, dispatch: Dispatch) -> None:
        """A subtask's error ends that subtask, never the run: a spent budget leaves it
        pending (reported skipped); anything else fails it, saying why."""
        if isinstance(exc, BudgetExceeded):
            outcome.status, outcome.error = "pending", None
            dispatch.stop = dispatch.stop or exc.kind
            return
        kind = "" if isinstance(exc, GaveUp) else f"{type(exc).__name__}: "
        outcome.status, outcome.error = "failed", f"{kind}{exc}"
        if isinstance(exc, SwarmError) and not isinstance(exc, ProviderError):
            dispatch.note_failure(exc)

    async def _try_subtask(
        self, st: Subtask, dispatch: Dispatch, outcome: SubtaskOutcome, started: list[float]
    ) -> None:
        async with dispatch.limiter.slot(self._priority.get(st.id, 0)):
            if dispatch.stop is not None:  # stopped while this one waited for a slot
                return
            started.append(anyio.current_time())
            if self._live is not None:
                self._live.started(st.id)
            outcome.status = "running"
            if missing := [d for d in st.depends_on if d not in dispatch.done]:
                outcome.warning = f"ran without {', '.join(missing)} (failed)"
            self._run.progress.running(st.id)
            self._run.journal.set_subtask(self._run.id, st.id, "running")
            base = self._run.journal.base_of(self._run.id, st.id, dispatch.queue.head)
            patch = await self._code_and_test_anywhere(st, outcome, base)
        # waiting for the merge queue holds no agent place: the next subtask codes
        merged = await self._merge_or_rebase(st, outcome, patch, dispatch)
        outcome.status = {"merged": "merged", "empty": "empty"}.get(merged.kind, "failed")
        if merged.ok:
            for name in self._asked.get(st.id, ()):
                self._added.setdefault(name, st.id)
        dispatch.provider_failures = 0
        outcome.commit = merged.commit
        if not merged.ok:
            outcome.error = f"{merged.kind}: {merged.output[-500:]}"

    def _settle(self, outcome: SubtaskOutcome, dispatch: Dispatch) -> None:
        dispatch.finished.add(outcome.id)
        outcome.check = self._fix_loop.scopes.get(outcome.id)
        self._expect(dispatch)
        if outcome.status != "pending" and self._live is not None:
            self._live.finished(outcome.id, outcome.wall_s)
        if outcome.status in ("merged", "empty", "failed"):
            if outcome.status != "failed":
                dispatch.done.add(outcome.id)
            self._run.journal.set_subtask(
                self._run.id,
                outcome.id,
                outcome.status,
                commit=outcome.commit,
                error=outcome.error,
            )
            self._run.progress.finished(outcome.id, outcome.status)
        self._changed.set()

    def _fixing(self, subtask: str) -> None:
        self._run.progress.fixing(subtask)
        if self._live is not None:
            self._live.fixing(subtask)

    def _dependency_spans(self, st: Subtask) -> list[SpanContext]:
        """The merge spans of the subtasks `st` depends on (those merged by this process)."""
        return [self._merge_spans[d] for d in st.depends_on if d in self._merge_spans]

    def _record_dependency_wait(self, st: Subtask) -> None:
        """The time a subtask waited for the ones it depends on, linked to their merges."""
        if st.depends_on:
            links = self._dependency_spans(st)
            record_wait(sc.WAIT_DEPENDENCY, since_ns=self._plan_ready_ns, links=links)

    def _expect(self, dispatch: Dispatch) -> None:
        """Tell the queue how many patches are still on their way (none once stopped)."""
        coming = len(dispatch.outcomes) - len(dispatch.finished) - len(self._queued)
        dispatch.queue.expect(0 if dispatch.stop is not None else max(coming, 0))

    async def _merge(self, st: Subtask, patch: str, dispatch: Dispatch) -> MergeResult:
        queue = dispatch.queue
        with waiting(sc.WAIT_MERGE, attributes={sc.SUBTASK_ID: st.id}) as span:
            started = anyio.current_time()
            self._queued.add(st.id)
            self._expect(dispatch)
            try:
                merged = await queue.merge(
                    st.id,
                    st.title,
                    patch,
                    check=self._fix_loop.commands.get(st.id),
                    order=self._order.get(st.id, 0),
                    waited_on=st.id in self._waited_on,
                )
            finally:
                self._queued.discard(st.id)
                self._expect(dispatch)
            self.times.add("merge", anyio.current_time() - started)
            if merged.batch is not None:  # the batch that decided it: the wait's cause
                span.add_link(merged.batch, {sc.LINK_TYPE: sc.LINK_DEPENDS_ON})
        self._merge_spans[st.id] = span.get_span_context()
        return merged

    async def _code_and_test(self, st: Subtask, outcome: SubtaskOutcome, base: str) -> str:
        """Code the subtask in a workspace at `base`; its patch once its check is green.
        Still red after the fix rounds, it starts afresh from `base` with a new coder told
        what stayed red (`fresh_starts` times), the red change thrown away, and with it
        what the attempt was warned of."""
        told = ""
        warned = outcome.warning  # before any attempt (ran without a failed dependency)
        while True:
            outcome.warning = warned
            try:
                async with self._workspaces.open(base, st.id) as ws:
                    with self._tree(ws, base):
                        coded = await self._code(st, ws, base, outcome, told)
                        patch = await self._green(st, ws, base, outcome, coded)
                        return await self._asked_for(st, ws, base, outcome, coded, patch)
            except StillRed as red:
                if len(outcome.started_afresh) >= self.options.fresh_starts:
                    raise
                told = afresh_note(red.command, red.output)
                outcome.started_afresh.append(f"started afresh: {red}")
                self._agents.fresh[st.id] = len(outcome.started_afresh)
                self._run.progress.note(f"{st.id}: {red}: starting afresh")

    async def _green(
        self, st: Subtask, ws: WorkspaceLike, base: str, outcome: SubtaskOutcome, coded: _Coded
    ) -> str:
        """The coder's change checked, and fixed while red: its patch once green. Still red,
        it goes back to the coder's own change if that was green before the coder was sent
        back (a small model sent back for `low_stock` wrote imports of names no file has,
        and the subtask started afresh without its green rename); else `StillRed`."""
        checked = coded.checked
        if checked is None:
            checked = await self._fix_loop.first_check(st, ws, base, coded.patch)
        try:
            return await self._fix_loop.until_green(st, ws, base, outcome, tag="", checked=checked)
        except StillRed as red:
            if coded.green is None:
                raise
            await _restore(ws, coded.green)
            outcome.warn(
                f"what the coder was sent back for was undone: `{one_line(red.command, 80)}`"
                f" stayed red after {self.options.fix_rounds} fix rounds"
            )
            return coded.green

    async def _code(
        self, st: Subtask, ws: WorkspaceLike, base: str, outcome: SubtaskOutcome, told: str = ""
    ) -> _Coded:
        """The coder's turn, then what its change should not hold sent back once each
        (`_send_backs`): what is still there is the subtask's warning. A coder that finished
        without the new names its subtask asks for (`_missing`) is sent back once too,
        in its own conversation."""
        new_names, kept = await self._names_before(st, ws)
        self._asked[st.id] = new_names
        result, patch = await self._coder_turn(st, ws, base, outcome, told)
        if result is None or not result.finished or patch is None:
            return _Coded(patch, new_names)
        own, checked = patch, await self._fix_loop.first_check(st, ws, base, patch)
        for rule in self._send_backs(st, ws, base):
            patch = await self._sent_back(st, ws, outcome, patch, result.messages, rule)
        patch = await self._keep(st, ws, outcome, kept, result.messages) or patch
        missing = await missing_names(ws.path, new_names)  # none asked: no git run
        if missing:
            await self._send_back_missing(st, ws, missing, result.messages)
            patch = await ws.patch()
        if patch == own:  # the check stands
            return _Coded(patch, new_names, sent_back=bool(missing), checked=checked)
        green = own if isinstance(checked, str) or checked.result.passed else None
        return _Coded(patch, new_names, sent_back=bool(missing), green=green)

    def _send_backs(self, st: Subtask, ws: WorkspaceLike, base: str) -> list[_SendBack[Any]]:
        """What a finished coder's change is read for, in order: definitions removed that
        no instruction names (`_removals`), near copies of definitions it left as they
        were (`_copies`), tests added where pytest never collects them (`_strays`), and
        files the subtask names that it left as they were (`_untouched`). The last three
        read the worktree, so only a local one."""
        asked = (self.task.title, self.task.instructions, st.title, st.instructions)

        async def removed(patch: str) -> list[Removal]:
            return unasked_removals(patch, *asked)

        rules: list[_SendBack[Any]] = [
            _SendBack(
                "removed", removed, removal_prompt,
                lambda found: f"removes {_listed(found)}; no instruction names it",
            )
        ]  # fmt: skip
        if not is_local(ws.path):
            return rules

        async def copied(patch: str) -> list[Copy]:
            return await copied_definitions(ws.path, base, patch, *asked)

        patterns = collected_patterns(ws.path)

        async def strays(patch: str) -> list[Stray]:
            return stray_tests(patch, patterns)

        async def untouched(patch: str) -> list[str]:
            return untouched_files(patch, st.files, ws.path, patterns)

        return [
            *rules,
            _SendBack(
                "copied", copied, copy_prompt,
                lambda found: f"adds {_listed(found)}; the original is unchanged",
            ),
            _SendBack(
                "strays", strays,
                lambda found: stray_prompt(found, patterns, ws.path),
                lambda found: f"adds {_listed(found)}, which the tests never run",
            ),
            _SendBack(
                "untouched", untouched, untouched_prompt,
                lambda found: (
                    f"leaves {_listed(found)} as {'it was' if len(found) == 1 else 'they were'}; "
                    f"the subtask names {'it' if len(found) == 1 else 'them'}"
                ),
            ),
        ]  # fmt: skip

    async def _sent_back(
        self,
        st: Subtask,
        ws: WorkspaceLike,
        outcome: SubtaskOutcome,
        patch: str,
        history: list[Message],
        rule: _SendBack[Any],
    ) -> str:
        """The coder whose change `patch` holds what `rule` finds is sent back once, its
        conversation so far before it, to undo that; what is found after is the
        subtask's warning. The patch after."""
        found = await rule.find(patch)
        if not found:
            return patch
        coder = self._agents.agent("coder", f"coder:{st.id}:{rule.tag}", CODER, ws, st)
        await coder.run(rule.prompt(found), history=history)
        patch = await ws.patch()
        if found := await rule.find(patch):
            outcome.warn(rule.warning(found))
        return patch

    async def _names_before(
        self, st: Subtask, ws: WorkspaceLike
    ) -> tuple[list[str], dict[str, str]]:
        """Before the subtask's change: the names it asks for that no file has (a name it
        renames or removes is there, and may go), and the names merged subtasks added that
        are here and its words do not name (to keep), each with the subtask that added it."""
        if not is_local(ws.path):
            return [], {}
        asked = asked_names(st.title, st.instructions)
        named = words(st.title, st.instructions)
        added = {n: by for n, by in self._added.items() if n not in named and by != st.id}
        absent = set(await missing_names(ws.path, [*asked, *added]))  # none: no git run
        kept = {name: by for name, by in added.items() if name not in absent}
        return [name for name in asked if name in absent], kept

    async def _keep(
        self,
        st: Subtask,
        ws: WorkspaceLike,
        outcome: SubtaskOutcome,
        kept: dict[str, str],
        history: list[Message],
    ) -> str | None:
        """The coder whose change took away names merged subtasks added is sent back once
        to put them back; what is still gone is the subtask's warning. The patch after it
        was sent back (None: it was not)."""
        taken = {name: kept[name] for name in await missing_names(ws.path, list(kept))}
        if not taken:
            return None
        coder = self._agents.agent("coder", f"coder:{st.id}:kept", CODER, ws, st)
        await coder.run(taken_prompt(taken), history=history)
        for name in await missing_names(ws.path, list(taken)):
            outcome.warn(f"takes away {name}, which {taken[name]} added")
        return await ws.patch()

    async def _send_back_missing(
        self, st: Subtask, ws: WorkspaceLike, missing: list[str], history: list[Message]
    ) -> None:
        coder = self._agents.agent("coder", f"coder:{st.id}:missing", CODER, ws, st)
        told = missing_prompt(missing, st.files, self._agents.writes_fences(ws.path))
        await coder.run(told, history=history)

    async def _asked_for(
        self,
        st: Subtask,
        ws: WorkspaceLike,
        base: str,
        outcome: SubtaskOutcome,
        coded: _Coded,
        patch: str,
    ) -> str:
        """The green patch, looked at for the new names the subtask asks for: a fixer may
        have taken one out, a coder that got stuck never put it in. Missing ones are sent
        back once (if the coder was not already), the change checked green again, or
        undone when it stays red (a small model sent back for `low_stock` renamed what was
        there, and its fixers could not bring the green rename back); what is still
        missing is the subtask's warning: a green check that runs the old tests alone does
        not make "Add test_clamp" done."""
        missing = await missing_names(ws.path, coded.asked)  # none asked: no git run
        if missing and not coded.sent_back:
            green = patch
            await self._send_back_missing(st, ws, missing, [])
            patch = await ws.patch()
            checked = await self._fix_loop.first_check(st, ws, base, patch)
            try:
                patch = await self._fix_loop.until_green(
                    st, ws, base, outcome, tag="missing", checked=checked
                )
            except StillRed:  # the green change stands: what the coder added is undone
                await _restore(ws, green)
                patch = green
            missing = await missing_names(ws.path, missing)
        if missing:
            outcome.warn(f"asked for {', '.join(missing)}; no file has it")
        return patch

    async def _coder_turn(
        self, st: Subtask, ws: WorkspaceLike, base: str, outcome: SubtaskOutcome, told: str = ""
    ) -> tuple[AgentResult[str] | None, str | None]:
        """The coder's turn: its last result (None: it ended without a change) and the
        patch as it read it after (None: not read); a coder that got stuck without
        changing anything starts over with a fresh conversation (`_may_restart`), then the
        subtask fails. The steps a coder that made a change got stuck on are the
        subtask's warning."""
        agent_id, stuck_on = f"coder:{st.id}", ""
        steps = self._steps.get(st.id) or [st.instructions]
        for again in range(STUCK_RESTARTS_IN_TIME + 1):
            started = anyio.current_time()
            coder = self._agents.agent("coder", agent_id, CODER, ws, st)
            coder.depends_on(self._dependency_spans(st))
            shown = await coder.shown(st.files, named_symbols(st))
            prompt = coder_prompt(self.task, first_step(st, steps), shown) + told
            if stuck_on:
                prompt += (
                    f"\n\nAn earlier attempt got stuck sending this again and again: "
                    f"{stuck_on}\nDo not repeat it."
                )
            first = await coder.run(prompt)
            result, stuck_steps = await self._steps_after(
                st, ws, base, outcome, agent_id, steps, first
            )
            if patch := await ws.patch():
                for stuck in stuck_steps:
                    outcome.warn(stuck)
                return result, patch  # to check (a stuck coder may have made it, then looped)
            if result.finished:  # finished without a change: asked once to make it
                again_id = f"{agent_id}:unchanged"
                coder = self._agents.agent("coder", again_id, CODER, ws, st)
                asked = await coder.run(unchanged_prompt(st), history=result.messages)
                patch = await ws.patch()
                if asked.stop_reason == "stuck" and not patch:
                    # not "empty" (nothing needed): it never said so, it looped
                    raise GaveUp(f"the coder got stuck, changing nothing: {asked.repeated[:300]}")
                return asked, patch
            if result.stop_reason != "stuck":
                return None, None
            stuck_on = result.repeated[:300]
            if not self._may_restart(again + 1, anyio.current_time() - started):
                break
            agent_id = f"coder:{st.id}:again{again + 1}"
        raise GaveUp(f"the coder got stuck, changing nothing: {stuck_on}")

    def _may_restart(self, restarts: int, last_took_s: float) -> bool:
        """Whether a coder stuck without a change starts over once more: `STUCK_RESTARTS`
        times always; up to `STUCK_RESTARTS_IN_TIME` while the run's deadline leaves room
        for `_ROOM_FOR` attempts as long as the last (without a deadline there is no
        measure of room, and a model that loops costs money each time)."""
        if restarts <= STUCK_RESTARTS:
            return True
        room = self._run.budget.remaining_s()
        return (
            restarts <= STUCK_RESTARTS_IN_TIME
            and room != float("inf")
            and (room >= _ROOM_FOR * last_took_s)
        )

    async def _steps_after(
        self,
        st: Subtask,
        ws: WorkspaceLike,
        base: str,
        outcome: SubtaskOutcome,
        agent_id: str,
        steps: list[str],
        result: AgentResult[str],
    ) -> tuple[AgentResult[str], list[str]]:
        """The coder's next steps, each given once it finished the one before, in its
        own conversation; the last result, and what it got stuck on. One stuck on a step
        after it changed something is given the next too (a step its earlier change had
        done left a small model with nothing to do, and it looped); one stuck with nothing
        changed yet starts over instead (`_coder_turn`), and one stopped otherwise (a
        budget, its step limit) gets no more. A step the coder got stuck on, or finished
        without a change, is given once more to a fresh coder (`_step_afresh`). Each step
        ends green, or undone (`_step_green`)."""
        stuck_steps: list[str] = []
        before, undone = "", False
        for number, step in enumerate(steps, start=1):
            if number > 1:
                # stuck with nothing changed: a fresh start does better than the next step
                if not result.finished and (result.stop_reason != "stuck" or not await ws.patch()):
                    break
                step_id = f"{agent_id}:step{number}"
                before = await ws.patch()
                if undone:  # the conversation holds the undone step: a fresh coder
                    result = await self._step_afresh(st, ws, step_id, steps, number)
                else:
                    coder = self._agents.agent("coder", step_id, CODER, ws, st)
                    prompt = step_prompt(step, number, len(steps))
                    result = await coder.run(prompt, history=result.messages)
                    # once more, out of that conversation: stuck, or done with nothing
                    # changed (a small model "added type hints" and "added low_stock" in
                    # two replies)
                    if result.stop_reason == "stuck" or (
                        result.finished and await ws.patch() == before
                    ):
                        result = await self._step_afresh(st, ws, step_id, steps, number)
            if len(steps) == 1:
                break
            if result.stop_reason == "stuck":
                stuck_steps.append(
                    f"got stuck on step {number} of {len(steps)} ({one_line(step, 80)}), which"
                    f" may be undone: {one_line(result.repeated, 80)}"
                )
            undone = not await self._step_green(st, ws, base, outcome, steps, number, before)
        return result, stuck_steps

    async def _step_green(
        self,
        st: Subtask,
        ws: WorkspaceLike,
        base: str,
        outcome: SubtaskOutcome,
        steps: list[str],
        number: int,
        before: str,
    ) -> bool:
        """Whether step `number` of a folded subtask ends green: checked, and fixed while
        red. One that stays red is undone, its files back as the steps before left them
        (green), and is the subtask's warning, so the steps that worked still merge: one
        bad step (type hints a small model could not get right) took a rename and a new
        function down with it. Step 1 has nothing before it to keep: it raises `StillRed`
        (the subtask starts afresh)."""
        tag = f"step{number}:"
        try:
            await self._fix_loop.until_green(st, ws, base, outcome, tag=tag)
        except StillRed as red:
            if number == 1:
                raise
            await _restore(ws, before)
            outcome.warn(
                f"step {number} of {len(steps)} ({one_line(steps[number - 1], 80)}) was undone:"
                f" `{one_line(red.command, 80)}` stayed red after {self.options.fix_rounds}"
                " fix rounds"
            )
            return False
        return True

    async def _step_afresh(
        self, st: Subtask, ws: WorkspaceLike, agent_id: str, steps: list[str], number: int
    ) -> AgentResult[str]:
        """Step `number` given to a fresh coder, shown the files as the earlier steps left
        them: a small model that finished a rename answered the next step with a lone
        "```", again and again, in the conversation that held the rename; another called
        `finish` at once, twice, saying it had made the step's change."""
        coder = self._agents.agent("coder", f"{agent_id}:afresh", CODER, ws, st)
        shown = await coder.shown(st.files, named_symbols(st))
        return await coder.run(coder_prompt(self.task, later_step(st, steps, number), shown))

    @contextmanager
    def _tree(self, ws: WorkspaceLike, base: str) -> Iterator[None]:
        self._trees[ws.path] = (ws, base)
        try:
            yield
        finally:
            self._trees.pop(ws.path, None)

    async def _remember(self, path: Path, command: str, result: CommandResult) -> None:
        """An agent's green run of the whole check in its workspace: the tree's check, so
        the coordinator and the merge queue do not run the suite on it again."""
        tree = self._trees.get(path)
        checker = self._check
        if tree is None or result.exit_code != 0 or result.timed_out:
            return
        if not isinstance(checker, Checker):
            return
        ws, base = tree
        patch = await ws.patch()
        if patch.strip():
            done = CheckResult(True, 0, result.output, result.duration_s)
            checker.remember(command, tree_key(base, patch), done)

    async def _code_and_test_anywhere(self, st: Subtask, outcome: SubtaskOutcome, base: str) -> str:
        """`_code_and_test`, started again from `base` when the cluster node holding its
        workspace is lost (`NODE_RESTARTS` times, then the subtask fails); nothing had
        merged yet."""
        return await self._anywhere(st, outcome, lambda: self._code_and_test(st, outcome, base))

    async def _anywhere(
        self, st: Subtask, outcome: SubtaskOutcome, work: Callable[[], Awaitable[T]]
    ) -> T:
        """`work`, started again from the start when the cluster node holding its workspace
        is lost (at any moment: placing, cloning, a tool call, a check, the patch), at most
        `NODE_RESTARTS` times; each loss is said in the report and on the current span."""
        while True:
            try:
                return await work()
            except (WorkspaceError, BaseExceptionGroup) as exc:
                lost = node_lost_in(exc)
                if lost is None or len(outcome.nodes_lost) >= NODE_RESTARTS:
                    raise
                self._note_lost(st, outcome, lost)

    def _note_lost(self, st: Subtask, outcome: SubtaskOutcome, lost: WorkspaceError) -> None:
        node = getattr(lost, "node", "") or "unknown"
        during = getattr(lost, "during", "") or "a call"
        at = (time.time_ns() - self._plan_ready_ns) / 1e9
        outcome.nodes_lost.append(f"node {node[:12]} lost during {during} at {at:.1f}s")
        self._agents.restarts[st.id] = len(outcome.nodes_lost)
        attrs = {sc.SUBTASK_ID: st.id, sc.NODE_ID: node, sc.NODE_LOST_DURING: during}
        trace.get_current_span().add_event(sc.NODE_LOST_EVENT, attrs)
        self._run.progress.note(f"{st.id}: cluster node {node[:12]} lost during {during}: again")

    async def _merge_or_rebase(
        self, st: Subtask, outcome: SubtaskOutcome, patch: str, dispatch: Dispatch
    ) -> MergeResult:
        """Merge; on a conflict or a red merge, a fixer rebases on the new head (a bounded
        number of times), with an agent place again for the work."""
        merged = await self._merge(st, patch, dispatch)
        while not merged.ok and outcome.rebases < self.options.rebase_rounds:
            outcome.rebases += 1
            merged, patch = await self._anywhere(
                st, outcome, partial(self._rebase, st, outcome, patch, merged, dispatch)
            )
        return merged

    async def _rebase(
        self,
        st: Subtask,
        outcome: SubtaskOutcome,
        patch: str,
        merged: MergeResult,
        dispatch: Dispatch,
    ) -> tuple[MergeResult, str]:
        """A fixer rebases `patch`, and its patch goes to the queue at once, while its own
        check runs: one after the other, the two checks were on a red run's critical path.
        If its own check is red, the queue's verdict comes first: merged, it stands (the
        queue's check passed); else fixer rounds make it green, and that patch merges."""
        reason = (
            "its patch no longer applies (merge conflict)"
            if merged.kind == "conflict"
            else f"the check fails after merging it:\n{failing_part(merged.output, 3000)}"
        )
        verdict: list[MergeResult] = []
        decided = anyio.Event()

        async def merge(rebased: str) -> None:
            verdict.append(await self._merge(st, rebased, dispatch))
            decided.set()

        async with anyio.create_task_group() as tg:
            async with dispatch.limiter.slot(_REBASING):  # late already: before any new start
                name = f"{st.id}-rebase{outcome.rebases}"
                on = merged.base or dispatch.queue.head
                base = self._run.journal.base_of(self._run.id, name, on)
                async with self._workspaces.open(base, name) as ws:
                    if merged.kind == "red":  # after a conflict the fixer re-applies by hand
                        await ws.apply(patch)
                    agent_id = f"fixer:{st.id}:rebase{outcome.rebases}"
                    fixer = self._agents.agent("fixer", agent_id, FIXER, ws, st)
                    await fixer.run(rebase_prompt(st, patch, reason, await fixer.shown(st.files)))
                    rebased = await ws.patch()
                    if not rebased.strip() and patch.strip():
                        # nothing re-applied (a fixer that got stuck, or gave up): the
                        # subtask's work would vanish as "empty"; another round, or failed
                        lost = "the rebase left no change: the earlier patch was not re-applied"
                        return MergeResult("conflict", output=lost), patch
                    patch = rebased
                    tg.start_soon(merge, patch)
                    try:
                        checked = await self._fix_loop.first_check(st, ws, base, patch)
                    except SwarmError:  # the queue holds the patch: its verdict stands
                        await decided.wait()
                        if not verdict[0].ok:
                            raise
                        checked = patch
                    if not isinstance(checked, str) and not checked.result.passed:
                        await decided.wait()
                        if not verdict[0].ok:
                            verdict.clear()
                            patch = await self._fix_loop.until_green(
                                st, ws, base, outcome, tag=f"r{outcome.rebases}", checked=checked
                            )
        return (verdict[0] if verdict else await self._merge(st, patch, dispatch)), patch


async def _restore(ws: WorkspaceLike, patch: str) -> None:
    """The workspace's files put back as they were at `patch`, an earlier patch of its
    own: what came since is taken back out."""
    await ws.apply(await ws.patch(), reverse=True)
    await ws.apply(patch)


def node_lost_in(exc: BaseException) -> WorkspaceError | None:
    """The lost node `exc` reports: itself, or the first of a (nested) group whose errors
    all say a node was lost; None for anything else."""
    if isinstance(exc, WorkspaceError):
        return exc if exc.node_lost else None
    if isinstance(exc, BaseExceptionGroup):
        found = [node_lost_in(e) for e in exc.exceptions]
        if found and all(f is not None for f in found):
            return found[0]
    return None


def _first_leaf(group: BaseExceptionGroup[SwarmError]) -> SwarmError:
    """The first error inside a (nested) exception group."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    assert isinstance(first, SwarmError)
    return first
