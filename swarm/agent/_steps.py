"""One agent run's state and its steps: ask the model, run tools, check the answer.

`Agent.run`, `Agent.iter` and `Agent.resume` all drive a `Steps`; the `Agent` holds what
does not change between runs. Events go to `emit` (None: no events are built), hooks run
when the agent has any, and a call to a tool that needs approval pauses the run unless
`approvals` already decides it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

import anyio
from opentelemetry.trace import Span, Status, StatusCode
from pydantic import ValidationError
from typing_extensions import TypeVar

from swarm._tokens import TOKENS_PER_TOOL
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent import events as ev
from swarm.agent._stuck import StuckWatch
from swarm.agent._tool import Finish, Tool, truncate
from swarm.agent.compaction import Compactor
from swarm.agent.events import AgentEvent, AgentResult, CallCounts, StopReason
from swarm.agent.hooks import Approvals, StepInfo, Veto
from swarm.errors import ContextWindowExceeded, ToolError
from swarm.messages import ChatRequest, ChatResult, Message, ToolCall, Usage
from swarm.model import Delta, Restart, closing, stream_of
from swarm.providers._call_deadline import DEADLINE_CUT
from swarm.providers._repetition import REPETITION
from swarm.providers._tool_text import (
    INVENTED_RESULT_PROBLEM,
    call_format_hint,
    cut_file_call,
    cut_finish,
)

if TYPE_CHECKING:
    from swarm.agent._loop import Agent

__all__ = ["CUT_SHORT", "Emit", "Steps", "call_arguments"]

CUT_SHORT = ("length", REPETITION, DEADLINE_CUT)
"""Finish reasons of a reply that stopped before the model was done."""

T = TypeVar("T", default=str)

Emit = Callable[[AgentEvent], None]
"""Where a run's events go (called synchronously, in order)."""


@dataclass
class _Outcome:
    message: Message
    finish: str | None = None
    call: ToolCall | None = None
    failed: bool = False
    """The call failed (a tool error, a veto, a refusal): said by whoever made the outcome,
    never read from its text (a tool may well answer "error: ..." and have worked)."""


class Steps(Generic[T]):
    """The mutable state of one run and the code of its steps."""

    def __init__(
        self,
        agent: Agent[T],
        messages: list[Message],
        emit: Emit | None,
        approvals: Approvals,
        shown: Sequence[ToolCall] = (),
    ) -> None:
        self.agent = agent
        self.messages = messages
        self.emit = emit
        self.approvals = approvals
        self.failed_calls: set[str | None] = set()
        """Ids of the last reply's calls that failed."""
        self.shown = {c.id: c for c in shown}
        """The calls a paused run asked approval for, as they were shown: a decision holds
        only for the call it was made on."""
        self.usage, self.cost, self.tool_calls, self.bad_outputs = Usage(), 0.0, 0, 0
        self.calls = CallCounts()
        self.written = ""
        """The format of the last call read from a reply's text (`call_format_hint`)."""
        self.model = agent.model
        """The model asked now: the agent's, or its fallback once it was escalated."""
        self.watch = StuckWatch(agent.stuck_after)
        self.keeper: Compactor | None = None
        if agent.compaction is not None:
            fixed = TOKENS_PER_TOOL * len(agent.tools)
            self.keeper = Compactor(agent.compaction, agent.model, agent.name, fixed)

    def result(
        self,
        output: T | str | None,
        reason: StopReason,
        steps: int,
        pending: Sequence[ToolCall] = (),
    ) -> AgentResult[T]:
        usage, cost, compactions = self.usage, self.cost, 0
        if self.keeper is not None:
            usage, cost = usage + self.keeper.usage, cost + self.keeper.cost_usd
            compactions = self.keeper.compactions
        done = AgentResult(
            output, reason, steps, usage, cost, self.messages, self.tool_calls, compactions
        )
        done.pending = list(pending)
        done.calls = self.calls
        if reason == "stuck":
            done.repeated = self.watch.repeated
        if self.emit is not None:
            self.emit(ev.FinishEvent(done))
        return done

    def info(self, step: int) -> StepInfo:
        return StepInfo(self.agent.name, step, self.messages)

    async def loop(self, first: int, pending: Sequence[ToolCall] = ()) -> AgentResult[T]:
        """Steps `first`.. until done; `pending`: a paused reply's calls to run first."""
        if pending:
            ended = await self._tools(pending, first - 1)
            if ended is not None:
                return ended
        hooks = self.agent.hooks
        for step in range(first, self.agent.max_steps + 1):
            for hook in hooks:
                veto = await hook.on_step(self.info(step))
                if veto is not None:
                    return self.result(veto.reason, "vetoed", step - 1)
            if self.keeper is not None:
                await self._fit(step)
            reply = await self._ask(step)
            self.failed_calls = set()
            self.messages.append(reply.message)
            self.calls.count(reply)
            if reply.text_tool_calls:
                self.written = reply.tool_call_format.rpartition("+")[2]
            calls = reply.message.tool_calls
            cut = reply.finish_reason in CUT_SHORT
            salvaged = self._cut_call(reply) if cut and not calls else None
            if salvaged is not None:  # its turn holds the call, sent back as it wrote it
                self.messages[-1] = Message.assistant(None, [salvaged], reply.text)
                ended = await self._tools([salvaged], step)
                if ended is None and salvaged.name != "finish":
                    self.messages.append(Message.user(_LOOP_SALVAGED))
            elif cut and (reply.tool_call_problem or not calls):
                self.messages.append(Message.user(_cut_note(reply)))
                ended = None
            elif calls:
                ended = await self._tools(calls, step)
            else:
                ended = await self._answer(reply, step)
            if ended is None:
                ended = await self._judge_repeats(reply, step)
            if ended is not None:
                return ended
        return self.result(None, "max_steps", self.agent.max_steps)

    async def _judge_repeats(self, reply: ChatResult, step: int) -> AgentResult[T] | None:
        """Warn (and escalate, once) an agent that repeats itself; stop it when it goes on."""
        verdict = self.watch.see_reply(reply.message)
        failed = _failures(reply.message, self.messages, self.failed_calls)
        verdict = max(verdict, self.watch.see_failures(reply.message, failed), key=_SEVERITY.index)
        if verdict == "stuck":
            return self.result(None, "stuck", step)
        if verdict == "warn":
            fallback = self.agent.fallback_model
            if fallback is not None and self.model is not fallback:
                self.model = fallback
                self.calls.escalated = True
            shown = await self._files_now(_called_paths(reply.message.tool_calls))
            check = "" if shown else " check the file's current text,"
            warning = (
                "You have now sent the same reply twice, and it did not help. Do something "
                f"different: read the error,{check} or call `finish(summary)` if the work is "
                "done. The same reply again stops you."
            )
            self.messages.append(Message.user("\n\n".join([warning, *shown])))
        return None

    async def _files_now(self, paths: Sequence[str]) -> list[str]:
        """The files `paths` name, as they are now, read by the agent's own `read_file`
        (those it cannot read left out): a model that lost the thread acts on the text,
        and told only to check it, a small one asks what is meant, or asks to be given
        the file in prose (both seen with a 1.5B model)."""
        reader = self.agent.tool_named("read_file")
        if reader is None or self.agent.context is None:
            return []
        shown = []
        for path in list(dict.fromkeys(paths))[:_FILES_SHOWN]:
            try:
                text = await reader.run({"path": path}, self.agent.context)
            except ToolError:
                continue  # not a file that can be read: nothing to show
            shown.append(f"`{path}` as it is now:\n{truncate(text, _FILE_SHOWN_CHARS)}")
        return shown

    async def _fit(self, step: int) -> None:
        assert self.keeper is not None
        before, count = len(self.messages), self.keeper.compactions
        self.messages[:] = await self.keeper.fit(self.messages, step)
        if self.emit is not None and self.keeper.compactions != count:
            self.emit(ev.CompactionEvent(step, before, len(self.messages)))

    def _echoed_text(self, call: ToolCall) -> str | None:
        """The first line of the tool answer a file tool's call would write into a file:
        a 1.5B model wrote `wrote 899 bytes to tests/test_stock.py`, write_file's answer,
        as that test file's content, five times over."""
        said = _plain(_written_text(call)[:_ECHO_HEAD])
        if len(said) < _ECHO_CHARS:
            return None
        answers = [
            m.content
            for m in self.messages
            if m.role == "tool" and m.content and m.name not in _SHOWS_FILES
        ]
        for answer in reversed(answers[-_ECHO_LOOKBACK:]):
            first = answer.strip().splitlines()[0]
            head = _plain(first)[:_ECHO_HEAD]
            if len(head) >= _ECHO_CHARS and said.startswith(head[: len(said)]):
                return first[:120]
        return None

    def _cut_call(self, reply: ChatResult) -> ToolCall | None:
        """The `finish` call a cut reply was writing (`cut_finish`), or the file tool's
        call a reply stopped as a loop was writing (`cut_file_call`), counted repaired;
        None when it was writing neither, or the agent has no such tool."""
        call = cut_finish(reply.text) if self.agent.tool_named("finish") else None
        if call is None and reply.finish_reason == REPETITION:
            call = cut_file_call(reply.text)
        if call is None or self.agent.tool_named(call.name) is None:
            return None
        self.calls.repaired += 1
        return call

    async def _answer(self, reply: ChatResult, step: int) -> AgentResult[T] | None:
        agent, text = self.agent, reply.text
        if agent.requires_finish:
            self.calls.nudges += 1
            hint = call_format_hint([t.name for t in agent.tools], self.written)
            if reply.tool_call_problem == INVENTED_RESULT_PROBLEM:
                problem = f"Your reply called no tool, and {INVENTED_RESULT_PROBLEM}."
            elif reply.tool_call_problem:
                self.calls.rejected += 1
                problem = f"Your tool call could not be read: {reply.tool_call_problem}."
            elif (echo := _echoed(text or "", self.messages)) is not None:
                problem = (
                    f"Your reply repeats what a tool answered you ({echo!r}): that answer came "
                    "from the tool, and writing it back does nothing. Act on it: change the "
                    "call it is about, or make the next step with another tool."
                )
            elif "```" in (text or ""):
                problem = (
                    "Your reply shows code but called no tool: code in a reply changes no "
                    "file. To put it in one, call write_file or edit_file with it."
                )
            else:
                problem = "Your reply called no tool."
            shown = await self._files_now(_NAMED_PATH.findall(text or ""))
            told = f"{problem} {hint} Call `finish` when done."
            self.messages.append(Message.user("\n\n".join([told, *shown])))
            return None
        if agent.output_adapter is None:
            return self.result(text, "final_answer", step)
        try:
            return self.result(agent.parse_output(text), "final_answer", step)
        except ValidationError as exc:
            self._count_bad_output(exc)
            self.messages.append(Message.user(f"Your answer did not validate:\n{exc}\nTry again."))
            return None

    def _count_bad_output(self, exc: ValidationError) -> None:
        self.bad_outputs += 1
        if self.bad_outputs > self.agent.max_output_retries:
            raise self.agent.behavior_error(exc, self.bad_outputs) from exc

    async def _ask(self, step: int) -> ChatResult:
        """One model call; over the window, one compaction (in place) and one retry; cut by
        `max_tokens`, asked again with a larger cap (`_LARGER_CAPS` times)."""
        request = await self._prepared(step)
        reply = await self._ask_within_window(request, step)
        for _ in range(_LARGER_CAPS):
            if reply.finish_reason != "length":
                break
            self.calls.truncated += 1
            cap = _larger_cap(request.max_tokens)
            if cap is None:
                break
            self._spend(reply)
            request = request.model_copy(update={"max_tokens": cap})
            reply = await self._call(request, step)
        # a loop, or a reply that ran on to its deadline: no larger cap
        self.calls.truncated += reply.finish_reason in (REPETITION, DEADLINE_CUT)
        self._spend(reply)
        for hook in self.agent.hooks:
            reply = await hook.after_model(self.info(step), reply) or reply
        if self.emit is not None:
            self.emit(ev.ModelResponseEvent(step, reply))
        return reply

    def _spend(self, reply: ChatResult) -> None:
        self.usage, self.cost = self.usage + reply.usage, self.cost + reply.cost_usd

    async def _ask_within_window(self, request: ChatRequest, step: int) -> ChatResult:
        try:
            reply = await self._call(request, step)
        except ContextWindowExceeded as exc:
            keeper = self.keeper
            compacted = None if keeper is None else await keeper.recover(self.messages, step, exc)
            if compacted is None:
                raise
            if self.emit is not None:
                self.emit(ev.CompactionEvent(step, len(self.messages), len(compacted)))
            self.messages[:] = compacted
            reply = await self._call(await self._prepared(step), step)
        if self.keeper is not None:
            self.keeper.observe(self.messages, reply.usage.input_tokens)
        return reply

    async def _prepared(self, step: int) -> ChatRequest:
        request = self.agent.request(self.messages, step)
        for hook in self.agent.hooks:
            request = await hook.before_model(self.info(step), request) or request
        if self.emit is not None:
            self.emit(ev.ModelRequestEvent(step, request))
        return request

    async def _call(self, request: ChatRequest, step: int) -> ChatResult:
        emit = self.emit
        if emit is None:
            return await self.model.chat(request)
        async with closing(stream_of(self.model, request)) as items:
            async for item in items:
                if isinstance(item, Delta):
                    kind = ev.TextDelta if item.kind == "text" else ev.ThinkingDelta
                    emit(kind(step, item.text, item.attempt))
                elif isinstance(item, Restart):
                    emit(ev.ReplyRestart(step, item.attempt))
                else:
                    return item.result
        raise AssertionError("unreachable: a model's stream ends with its result")

    async def _tools(self, calls: Sequence[ToolCall], step: int) -> AgentResult[T] | None:
        """Run one reply's calls; the run's result if they end it (or pause it).

        Hooks rewrite (or veto) every call first; approval is then decided on the call
        that will run, so a hook's rewrite never runs under a decision made on another."""
        prepared = [(call, await self._hooked(call, step)) for call in calls]
        waiting = [
            ready
            for call, ready in prepared
            if isinstance(ready, ToolCall) and self._needs_decision(call, ready)
        ]
        if waiting:
            if self.emit is not None:
                self.emit(ev.ApprovalEvent(step, waiting))
            return self.result(None, "approval_required", step, waiting)
        self.tool_calls += len(calls)
        outcomes = await self._run_tools(prepared, step)
        summary = next((o for o in outcomes if o.finish is not None), None)
        if summary is not None and self.agent.output_adapter is not None:
            try:
                output = self.agent.parse_output(summary.finish or "")
            except ValidationError as exc:
                self._count_bad_output(exc)
                assert summary.call is not None
                summary.message = Message.tool(
                    summary.call, f"error: the summary is not valid output:\n{exc}\nTry again."
                )
                summary = None
            else:
                self.messages.extend(o.message for o in outcomes)
                return self.result(output, "finish", step)
        self.messages.extend(o.message for o in outcomes)
        self.failed_calls = {o.message.tool_call_id for o in outcomes if o.failed}
        return None if summary is None else self.result(summary.finish, "finish", step)

    async def _hooked(self, call: ToolCall, step: int) -> ToolCall | Veto:
        """`call` as the hooks leave it (or their veto)."""
        for hook in self.agent.hooks:
            changed = await hook.before_tool(self.info(step), call)
            if isinstance(changed, Veto):
                return changed
            call = changed or call
        return call

    def _needs_decision(self, call: ToolCall, ready: ToolCall) -> bool:
        tool = self.agent.tool_named(ready.name)
        if tool is None or not tool.requires_approval:
            return False
        if call.id not in self.approvals:
            return True
        shown = self.shown.get(call.id)  # decided on another call than the hooks made now
        return shown is not None and (shown.name, shown.arguments) != (ready.name, ready.arguments)

    async def _run_tools(
        self, prepared: Sequence[tuple[ToolCall, ToolCall | Veto]], step: int
    ) -> list[_Outcome]:
        """Read-only calls run at once; a reply that changes anything runs in order and
        stops at the first call that fails: the calls after it were written expecting it
        to work (an edit, then the tests, then `finish`), so they are not run."""
        if len(prepared) > 1 and all(self._reads_only(ready) for _, ready in prepared):
            outcomes: list[_Outcome | None] = [None] * len(prepared)

            async def run_one(i: int, call: ToolCall, ready: ToolCall | Veto) -> None:
                outcomes[i] = await self._run_tool(call, ready, step)

            async with anyio.create_task_group() as tg:
                for i, (call, ready) in enumerate(prepared):
                    tg.start_soon(run_one, i, call, ready, name=f"tool:{call.name}")
            return [o for o in outcomes if o is not None]
        done: list[_Outcome] = []
        for i, (call, ready) in enumerate(prepared):
            outcome = await self._run_tool(call, ready, step)
            done.append(outcome)
            if outcome.failed and i + 1 < len(prepared):
                skipped = f"error: not run: `{call.name}` before it in your reply failed"
                for later, _ in prepared[i + 1 :]:
                    done.append(await self._told(step, later, skipped, True))
                break
        return done

    def _reads_only(self, ready: ToolCall | Veto) -> bool:
        if isinstance(ready, Veto):
            return True
        tool = self.agent.tool_named(ready.name)
        return tool is not None and tool.read_only

    async def _run_tool(self, original: ToolCall, call: ToolCall | Veto, step: int) -> _Outcome:
        if isinstance(call, Veto):
            return await self._told(step, original, f"error: vetoed: {call.reason}", True)
        decision = self.approvals.get(original.id, True)
        if decision is not True:
            why = decision.reason if isinstance(decision, Veto) else "the user said no"
            return await self._told(step, call, f"error: not approved: {why}", True)
        if self.emit is not None:
            self.emit(ev.ToolCallEvent(step, call))
        outcome = await self._execute(call, step)
        if outcome.finish is not None:
            outcome.call = call
            if self.emit is not None:
                self.emit(ev.ToolResultEvent(step, call, outcome.message.content or ""))
            return outcome
        return await self._told(step, call, outcome.message.content or "", outcome.failed)

    async def _told(self, step: int, call: ToolCall, text: str, is_error: bool) -> _Outcome:
        """A tool's result, after hooks, reported."""
        for hook in self.agent.hooks:
            text = await hook.after_tool(self.info(step), call, text) or text
        if self.emit is not None:
            self.emit(ev.ToolResultEvent(step, call, text, is_error))
        return _Outcome(Message.tool(call, text), failed=is_error)

    async def _execute(self, call: ToolCall, step: int) -> _Outcome:
        agent = self.agent
        attrs: dict[str, Any] = {
            sc.OPERATION: sc.OP_TOOL,
            sc.TOOL_NAME: call.name,
            sc.TOOL_CALL_ID: call.id,
            sc.ROLE: agent.name,
            sc.STEP: step,
        }
        with tracer().start_as_current_span(f"{sc.OP_TOOL} {call.name}", attributes=attrs) as span:
            tool, note = agent.tool_named(call.name), ""
            if tool is None and (tool := _fitting_tool(call, agent.tools)) is not None:
                note = f"({call.name!r} is not a tool; ran {tool.name}, whose arguments these are) "
                self.calls.repaired += 1
            if tool is None:
                self.calls.rejected += 1
                sent = " ".join(v for v in call_arguments(call).values() if isinstance(v, str))
                if (echo := _echoed(sent, self.messages)) is not None:
                    # a small model sent a tool `error` the answer to its last call, then
                    # that answer (the list of tools), and on until it was stopped as stuck
                    names = ", ".join(sorted(t.name for t in agent.tools))
                    return _error(
                        span,
                        call,
                        f"{call.name!r} is not a tool, and what you sent is what a tool "
                        f"answered you ({echo!r}): writing it back does nothing. Act on it "
                        f"with one of the tools ({names}).",
                    )
                return _error(span, call, _unknown_tool(call.name, agent.tools))
            if tool.takes_context and agent.context is None:
                return _error(span, call, f"{call.name} needs a workspace; this agent has none")
            if tool.name in _FILE_TOOLS and (echo := self._echoed_text(call)) is not None:
                self.calls.rejected += 1
                return _error(
                    span,
                    call,
                    f"the text you gave {tool.name} is what a tool answered you ({echo!r}), "
                    "not the file's: nothing was written. Give the file's own text, or call "
                    "finish if it is done.",
                )
            if tool.span_attributes:
                span.set_attributes(tool.span_attributes)
            while True:
                try:
                    text = await tool.run(call.arguments, agent.context)
                except Finish as done:
                    return _Outcome(Message.tool(call, "finished"), finish=done.summary)
                except ToolError as exc:  # failures and bad arguments go back to the model
                    # arguments it refused may be the other file tool's: that one runs
                    other = _fitting_instead(call, tool, agent.tools) if exc.rejected else None
                    if other is None or note:
                        self.calls.rejected += int(exc.rejected)
                        return _error(span, call, note + str(exc))
                    note = (
                        f"({call.name} does not take these arguments; ran {other.name}, whose "
                        "arguments these are) "
                    )
                    tool = other
                    self.calls.repaired += 1
                    continue
                return _Outcome(Message.tool(call, note + text))


def _error(span: Span, call: ToolCall, text: str) -> _Outcome:
    span.set_status(Status(StatusCode.ERROR, text[:200]))
    span.set_attribute(sc.ERROR_TYPE, "tool_error")
    return _Outcome(Message.tool(call, f"error: {text}"), failed=True)


_FILES_SHOWN, _FILE_SHOWN_CHARS = 2, 4000
"""At most this many files a repeated reply names are shown with the warning, each cut to
this length."""
_LARGER_CAPS = 2
"""Times a reply cut by `max_tokens` is asked for again with a larger cap."""
_CAP_WITHOUT_ONE = 8192
"""The cap asked for when a reply with none set was cut (the server's own default)."""
_CAP_CEILING = 32768


_NAMED_PATH = re.compile(r"[\w.-]*\w(?:/[\w.-]+)*\.[A-Za-z]\w*")
"""A file a reply names in its prose (`inventory/pricing.py`, `README.md`)."""


def _called_paths(calls: Sequence[ToolCall]) -> list[str]:
    """The `path` arguments of `calls`."""
    paths = []
    for c in calls:
        path = call_arguments(c).get("path")
        if isinstance(path, str) and path.strip():
            paths.append(path)
    return paths


def _larger_cap(cap: int | None) -> int | None:
    """The next `max_tokens` for a reply that was cut (None: no larger cap to try)."""
    if cap is None:
        return _CAP_WITHOUT_ONE
    return min(cap * 2, _CAP_CEILING) if cap < _CAP_CEILING else None


_LOOP_SALVAGED = (
    "Your reply went round in a loop, writing the same lines over and over, so it was "
    "stopped; the call it was writing ran with the text up to its last whole line (above: "
    "what it did). Check the file, then go on with one short call per reply."
)


def _cut_note(reply: ChatResult) -> str:
    """What a model is told when its reply was cut off and could not be used."""
    tokens = reply.usage.output_tokens
    if reply.finish_reason == REPETITION:
        return (
            "Your reply kept repeating the same text over and over, so it was stopped and "
            "nothing in it was run. Write one short tool call, then stop."
        )
    if reply.finish_reason == DEADLINE_CUT:
        return (
            f"Your reply was still being written after {reply.timing.duration_s:.0f} s, the "
            f"call's deadline, so it was stopped at {tokens:,} tokens and nothing in it was "
            "run. Answer in fewer tokens: one short tool call per reply."
        )
    return (
        f"Your reply was cut off at {tokens:,} tokens (max_tokens; finish_reason: length), so "
        "nothing in it was run. Answer in fewer tokens: one tool call per reply, and smaller "
        "edits (edit_file with a short `old` and `new`) instead of writing whole files."
    )


_ECHO_CHARS = 30
"""How much of a tool's answer a text reply must hold to be that answer written back."""
_ECHO_LOOKBACK = 6
"""How many of the latest tool answers a text reply is compared with."""
_ECHO_HEAD = 80
"""How much of a file tool's text and a tool answer's first line are compared (cheap:
each write would otherwise be matched against the last answers whole)."""


def _written_text(call: ToolCall) -> str:
    """The text a file tool's call would put in the file (`content`, `new`), or ""."""
    arguments = call_arguments(call)
    text = arguments.get("content", arguments.get("new"))
    return text if isinstance(text, str) else ""


def _echoed(text: str, messages: Sequence[Message]) -> str | None:
    """The first line of the tool answer a text reply writes back, if it does: a small model
    that gets an error answers with that error, fenced or wrapped as `{"error": ...}`, and
    told its reply "shows code", it writes it back again until it is stopped as stuck."""
    said = _plain(text)
    if len(said) < _ECHO_CHARS:
        return None
    answers = [m.content for m in messages if m.role == "tool" and m.content]
    for answer in reversed(answers[-_ECHO_LOOKBACK:]):
        matcher = difflib.SequenceMatcher(None, said, _plain(answer), autojunk=False)
        same = sum(block.size for block in matcher.get_matching_blocks())
        if same >= _ECHO_CHARS and same * 3 >= len(said) * 2:
            return answer.strip().splitlines()[0][:120]
    return None


def _plain(text: str) -> str:
    """`text` as compared for an echo: lower case, one space between words, no fences,
    quotes, braces or backslashes (the JSON a model wraps an answer in), at most 2,000
    characters."""
    for mark in ("```", '"', "\\", "{", "}"):
        text = text.replace(mark, " ")
    return " ".join(text.lower().split())[:2000]


def _fitting_tool(call: ToolCall, tools: Sequence[Tool]) -> Tool | None:
    """The one tool whose parameters `call`'s arguments fill, for a call under a name that
    is no tool's: a small model names its call after its task (`create-item-class` with
    `path` and `content`) rather than the tool it means (`write_file`)."""
    return _fitting(_given(call), tools)


def _fitting(given: set[str], tools: Sequence[Tool]) -> Tool | None:
    if not given:
        return None
    fits = [
        t
        for t in tools
        if _fills(given, t)
        and t.name != "finish"
        and not t.requires_approval  # approval is decided on the name the call came with
    ]
    return fits[0] if len(fits) == 1 else None


def _fitting_instead(call: ToolCall, tool: Tool, tools: Sequence[Tool]) -> Tool | None:
    """The one other tool whose parameters `call`'s arguments fill, when `tool`, the one
    it names, refused them: a small model called `edit_file` with `path` and `content`,
    the arguments of `write_file`. Only between the file-writing tools."""
    if tool.name not in _FILE_TOOLS:
        return None
    other = _fitting(_given(call), tools)
    return other if other is not None and other is not tool and other.name in _FILE_TOOLS else None


_FILE_TOOLS = frozenset({"edit_file", "write_file"})
_SHOWS_FILES = frozenset({"read_file", "search"})
"""Tools whose answer is a file's text: copied into a file, it is not an echo."""


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """`call`'s arguments as an object; empty when they do not parse as one."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


def _given(call: ToolCall) -> set[str]:
    """The names of the arguments `call` gives (not null); none when they do not parse."""
    return {k for k, v in call_arguments(call).items() if v is not None}


def _fills(given: set[str], tool: Tool) -> bool:
    return (
        given <= set(tool.parameters.get("properties", {}))
        and set(tool.parameters.get("required", ())) <= given
    )


def _unknown_tool(name: str, tools: Sequence[Tool]) -> str:
    """What a call under no tool's name is told: the one it may have meant, and each tool
    with its arguments and what it does (a small model that names its call after its task,
    `add_item_class`, learns from a list of bare names neither which tool writes a file nor
    what that one takes)."""
    close = difflib.get_close_matches(name, [t.name for t in tools], n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = "\n".join(f"- {_signature(t)}" for t in sorted(tools, key=lambda t: t.name))
    return f"unknown tool {name!r}.{hint} The tools are:\n{listed or 'none'}"


def _signature(t: Tool) -> str:
    """`edit_file(path, old, new, replace_all?): Replace an exact, unique snippet ...`."""
    required = set(t.parameters.get("required", ()))
    names = [n if n in required else f"{n}?" for n in t.parameters.get("properties", {})]
    summary = t.description.strip().split("\n", 1)[0]
    return (
        f"{t.name}({', '.join(names)}): {summary}" if summary else f"{t.name}({', '.join(names)})"
    )


_SEVERITY = ("ok", "warn", "stuck")


def _failures(
    message: Message, messages: list[Message], failed: set[str | None]
) -> list[tuple[str, str, str]]:
    """(name, arguments, error) of the calls of `message` that failed."""
    if not message.tool_calls:
        return []
    results = {m.tool_call_id: m.content or "" for m in messages[-len(message.tool_calls) :]}
    calls = message.tool_calls
    return [(c.name, c.arguments, results.get(c.id, "")) for c in calls if c.id in failed]
