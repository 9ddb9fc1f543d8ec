"""An agent driven by a model that is not a script: feedback it can act on, repeats that
stop, replies cut by `max_tokens`, and calls written as text through the router."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._routing.router import Router
from swarm._sandbox import NoSandbox
from swarm._tracing import semconv as sc
from swarm.agent._loop import Agent
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.agent.events import AgentResult
from swarm.config import ProviderConfig, SwarmConfig, TierConfig
from swarm.config._faults import RealModel
from swarm.messages import ChatRequest, ChatResult, Message, Timing, ToolCall, Usage
from swarm.model import ChatModel
from swarm.providers._call_deadline import DEADLINE_CUT
from swarm.providers._tool_text import calls_from_text, read_calls
from swarm.providers.sim import SimProvider
from swarm.providers.sim._real_model import real_model_script
from swarm.providers.sim._reply import Reply, Script
from swarm.testing import FunctionModel, Scripted, ScriptedModel, call
from tests.test_agent import add, finish


def _told(request: ChatRequest) -> str:
    return request.messages[-1].content or ""


async def test_unknown_tool_gets_the_real_names_and_is_counted() -> None:
    model = ScriptedModel([call("ad", x=1), call("finish", summary="ok")])
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    told = _told(model.requests[1])
    assert "unknown tool 'ad'" in told and "Did you mean 'add'?" in told
    # each tool with its arguments (optional ones marked) and what it does
    assert told.endswith(
        "The tools are:\n- add(a, b): Add two numbers.\n- finish(summary): End the run."
    ), told
    assert result.calls.rejected == 1 and result.finished


async def test_bad_arguments_get_the_schema_error_and_the_expected_shape() -> None:
    model = ScriptedModel([call("add", a="one"), call("finish", summary="ok")])
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    told = _told(model.requests[1])
    assert "b: required argument missing" in told
    assert 'Expected: {"a": integer, "b": integer}' in told
    assert result.calls.rejected == 1


async def test_a_tool_answer_written_back_is_told_as_such() -> None:
    """The 1.5B model answered an argument error with that error, fenced and wrapped as
    JSON, and told its reply "shows code", wrote it back until it was stopped as stuck."""
    model = ScriptedModel(
        [
            call("add", a=1, c=2),
            '```\n{"error": "Invalid arguments for add: c: unexpected argument. '
            'Expected: {\\"a\\": integer, \\"b\\": integer}"}\n```',
            "The error says `c` is not an argument of add, so I will call add with a and b.",
            call("finish", summary="ok"),
        ]
    )
    await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    told = _told(model.requests[2])
    assert told.startswith("Your reply repeats what a tool answered you ('"), told
    assert "c: unexpected argument" in told and "shows code" not in told
    # a reply that quotes the error to act on it is not an echo
    assert _told(model.requests[3]).startswith("Your reply called no tool.")


async def test_a_tool_answer_sent_to_a_tool_that_is_not_there_is_told_as_such() -> None:
    """The 1.5B model sent a tool `error` the answer to its call of a tool that is not
    there (the list of tools), then that answer, until it was stopped as stuck."""
    answer = (
        "error: unknown tool 'refactor'. The tools are:\n- add(a, b): Add two numbers.\n"
        "- finish(summary): End the run."
    )
    model = ScriptedModel(
        [call("refactor", path="a.py"), call("error", message=answer), call("finish", summary="ok")]
    )
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    assert result.finished
    assert _told(model.requests[1]).startswith("error: unknown tool 'refactor'.")
    assert _told(model.requests[2]) == (
        "error: 'error' is not a tool, and what you sent is what a tool answered you "
        "(\"error: unknown tool 'refactor'. The tools are:\"): writing it back does nothing. "
        "Act on it with one of the tools (add, finish)."
    )


async def test_a_reply_without_a_call_gets_the_format_to_use() -> None:
    model = ScriptedModel(["I will add the numbers now.", call("finish", summary="ok")])
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    told = _told(model.requests[1])
    assert "Your reply called no tool." in told
    assert '```json\n{"name": "add", "arguments": {...}}\n```' in told
    assert result.calls.nudges == 1


class _Reading(ChatModel):
    """`inner`, its calls read from its text as the router reads them."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner

    async def chat(self, request: ChatRequest) -> ChatResult:
        result = await self.inner.chat(request)
        read_calls(result, request)
        return result


async def test_the_format_to_use_is_the_one_the_model_wrote_its_last_call_in() -> None:
    """Shown `<tool_call>` tags, a model served by llama.cpp that wrote fenced JSON began
    a native call and stopped; a model that wrote the tags is shown the tags."""
    hermes = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    fenced = '```json\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```'
    for written, shown in ((hermes, "<tool_call>\n"), (fenced, "```json\n")):
        model = ScriptedModel([written, "Now I add.", call("finish", summary="ok")])
        agent = Agent[str]("coder", model=_Reading(model), tools=[add, finish])
        await agent.run("go")
        told = _told(model.requests[2])
        assert f'{shown}{{"name": "add", "arguments": {{...}}}}' in told, told


async def test_code_shown_in_a_reply_without_a_call_is_named() -> None:
    model = ScriptedModel(["The fix:\n```python\nx = 2\n```", call("finish", summary="ok")])
    await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    assert _told(model.requests[1]).startswith("Your reply shows code but called no tool")


def _cut(text: str, tokens: int) -> ChatResult:
    return ChatResult(
        message=Message.assistant(text),
        finish_reason="length",
        usage=Usage(output_tokens=tokens),
        timing=Timing(),
    )


async def test_a_cut_reply_is_asked_again_with_a_larger_cap() -> None:
    caps: list[int | None] = []

    def model(request: ChatRequest) -> ChatResult | ToolCall:
        caps.append(request.max_tokens)
        if request.max_tokens is not None and request.max_tokens >= 400:
            return call("finish", summary="ok")
        return _cut('<tool_call>{"name": "finish", "arguments": {"summ', 100)

    agent = Agent[str]("coder", model=FunctionModel(model), tools=[finish], max_tokens=100)
    result = await agent.run("go")
    assert caps == [100, 200, 400]
    assert result.finished and result.calls.truncated == 2


async def test_a_reply_that_looped_is_not_asked_again_but_told_so() -> None:
    looped = _cut('<tool_call>{"name": "add", "arguments": {"a": 1, "b', 900)
    looped.finish_reason = "repetition"
    model = ScriptedModel([looped, call("finish", summary="ok")])
    result = await Agent[str]("coder", model=model, tools=[add, finish], max_tokens=100).run("go")
    assert [r.max_tokens for r in model.requests] == [100, 100]  # no larger cap for a loop
    assert _told(model.requests[1]).startswith("Your reply kept repeating the same text")
    assert result.finished and result.calls.truncated == 1


async def test_a_finish_whose_summary_looped_still_finishes() -> None:
    """A 1.5B model's `finish` summary went round until it was stopped, three times over,
    each told that nothing in it ran: a cut `finish` ends the run, its summary cut."""
    summary = "The hints are added. " * 40
    looped = _cut('```json\n{\n  "name": "finish",\n  "arguments": {"summary": "' + summary, 900)
    looped.finish_reason = "repetition"
    model = ScriptedModel([looped, call("finish", summary="not asked")])
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    assert result.finished and len(model.requests) == 1 and result.output is not None
    assert (
        result.output.startswith("The hints are added. The hints")
        and "(cut short)" in result.output
    )
    assert len(result.output) < 520 and result.calls.repaired == 1
    turn = result.messages[-2]  # the call, sent back as the model wrote it
    assert turn.tool_calls[0].name == "finish" and turn.written == looped.text


async def test_a_cut_call_to_another_tool_still_runs_nothing() -> None:
    cut = _cut('{"name": "add", "arguments": {"a": 1, "summary": "x', 900)
    cut.finish_reason = "repetition"
    model = ScriptedModel([cut, call("finish", summary="ok")])
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    assert len(model.requests) == 2 and result.calls.repaired == 0


async def test_a_file_call_that_looped_runs_with_its_text_up_to_the_loop(tmp_path: Path) -> None:
    """The 1.5B model sent back for `test_clamp` wrote it right, then added asserts round
    and round until it was stopped; a cut for length still runs nothing."""
    (tmp_path / "test_m.py").write_text("from m import clamp\n")
    rounds = "    assert clamp(0, 1, 3) == 1\n    assert clamp(4, 1, 3) == 3\n" * 30
    text = (
        '```json\n{"name": "edit_file", "arguments": {"path": "test_m.py", '
        '"old": "def test_clamp() -> None:", "new": """def test_clamp() -> None:\n'
        f"    assert clamp(2, 1, 3) == 2\n{rounds}    assert clamp(4, 1"
    )
    for reason, runs in (("length", False), ("repetition", True)):
        looped = _cut(text, 900)
        looped.finish_reason = reason
        model = ScriptedModel([looped, call("finish", summary="ok")])
        agent = Agent[str](
            "coder",
            model=model,
            tools=coding_tools(),
            context=ToolContext(root=tmp_path, sandbox=NoSandbox()),
        )
        result = await agent.run("go")
        assert result.finished and result.calls.repaired == runs
        written = (tmp_path / "test_m.py").read_text()
        assert ("def test_clamp() -> None:\n    assert clamp(2, 1, 3) == 2\n" in written) is runs
        if runs:
            assert written.endswith("    assert clamp(4, 1, 3) == 3\n")  # whole lines only
            told = [m.content or "" for m in model.requests[1].messages[-2:]]
            assert told[0].startswith("edited test_m.py")
            assert told[1].startswith("Your reply went round in a loop")


async def test_a_reply_that_ran_on_to_its_deadline_is_told_so_and_not_asked_again() -> None:
    ran_on = _cut("Let me explain every step in detail. First, " * 200, 2_400)
    ran_on.finish_reason, ran_on.timing = DEADLINE_CUT, Timing(duration_s=412.0)
    model = ScriptedModel([ran_on, call("finish", summary="ok")])
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    assert [r.max_tokens for r in model.requests] == [None, None]  # no cap to raise
    assert _told(model.requests[1]).startswith(
        "Your reply was still being written after 412 s, the call's deadline, so it was "
        "stopped at 2,400 tokens and nothing in it was run."
    )
    assert result.finished and result.calls.truncated == 1


async def test_a_reply_still_cut_is_named_and_nothing_in_it_runs() -> None:
    cut = _cut('<tool_call>{"name": "add", "arguments": {"a": 1, "b', 50)
    model = ScriptedModel([cut, call("finish", summary="ok")])
    agent = Agent[str]("coder", model=model, tools=[add, finish], max_tokens=8192 * 4)
    result = await agent.run("go")
    told = _told(model.requests[1])
    assert "cut off at 50 tokens (max_tokens; finish_reason: length)" in told
    assert "nothing in it was run" in told
    assert result.calls.truncated == 1  # the cap is at its ceiling: no larger one to ask


def _same(request: ChatRequest) -> ToolCall:
    return call("add", a=1, b=1)


async def test_an_agent_that_repeats_itself_is_escalated_once_then_stopped(
    spans: InMemorySpanExporter,
) -> None:
    model, fallback = FunctionModel(_same), FunctionModel(_same)
    agent = Agent[str]("coder", model=model, fallback_model=fallback, tools=[add, finish])
    result = await agent.run("go")
    assert result.stop_reason == "stuck" and result.steps == 3
    assert len(model.requests) == 2 and len(fallback.requests) == 1  # moved after 2
    assert "You have now sent the same reply twice" in _told(fallback.requests[0])
    assert result.calls.escalated
    assert result.repeated.startswith("add(")
    span = next(s for s in spans.get_finished_spans() if s.name == "invoke_agent coder")
    attrs = span.attributes or {}
    assert attrs[sc.AGENT_STOP_REASON] == "stuck" and attrs[sc.AGENT_ESCALATED] is True
    assert str(attrs[sc.AGENT_REPEATED]).startswith("add(")


async def test_the_same_failing_call_in_other_words_is_stuck_too() -> None:
    def model(request: ChatRequest) -> ChatResult:
        n = len(request.messages)
        bad = ToolCall(id=f"c{n}", name="add", arguments='{"a": "x", "b": 1}')
        return ChatResult(message=Message.assistant(f"Attempt number {n} at adding.", [bad]))

    result = await Agent[str]("coder", model=FunctionModel(model), tools=[add, finish]).run("go")
    assert result.stop_reason == "stuck" and result.steps == 3
    assert "add(" in result.repeated and "error" in result.repeated


async def test_a_tool_answer_given_as_a_file_s_text_is_not_written(tmp_path: Path) -> None:
    """A 1.5B model wrote write_file's answer (`wrote 899 bytes to tests/test_stock.py`)
    as that file's content, five times over; copying read_file's answer is left alone."""
    test = "def test_low():\n    assert True\n"
    model = ScriptedModel(
        [
            call("write_file", path="test_stock.py", content=test),
            call("write_file", path="test_stock.py", content="wrote 32 bytes to test_stock.py"),
            call("read_file", path="test_stock.py"),
            call(
                "write_file", path="copy.py", content="     1\tdef test_low():\n     2\t    x = 1\n"
            ),
            call("finish", summary="ok"),
        ]
    )
    ctx = ToolContext(root=tmp_path, sandbox=NoSandbox())
    result = await Agent[str]("coder", model=model, tools=coding_tools(), context=ctx).run("go")
    assert (tmp_path / "test_stock.py").read_text() == test
    told = model.requests[2].messages[-1].content or ""
    assert told.startswith("error: the text you gave write_file is what a tool answered you")
    assert "('wrote 32 bytes to test_stock.py')" in told, told
    assert (tmp_path / "copy.py").read_text() == "def test_low():\n    x = 1\n"
    assert result.finished and result.calls.rejected == 1


async def test_a_repeated_edit_is_answered_with_the_files_current_text(tmp_path: Path) -> None:
    """A 1.5B model told to "check the file's current text" asked what was meant: the
    warning shows the file its repeated call names, read as `read_file` would."""
    (tmp_path / "calc.py").write_text("def total(xs):\n    return sum(xs)\n")
    edit = call("edit_file", path="calc.py", old="def calc_total(xs):", new="def total(xs):")
    model = FunctionModel(lambda r: edit)
    ctx = ToolContext(root=tmp_path, sandbox=NoSandbox())
    result = await Agent[str]("coder", model=model, tools=coding_tools(), context=ctx).run("go")
    assert result.stop_reason == "stuck"
    told = _told(model.requests[2])
    assert told.startswith("You have now sent the same reply twice, and it did not help.")
    assert "check the file's current text" not in told  # it is shown instead
    assert told.endswith(
        "`calc.py` as it is now:\n     1\tdef total(xs):\n     2\t    return sum(xs)"
    ), told


async def test_a_reply_asking_for_a_file_in_prose_is_shown_it(tmp_path: Path) -> None:
    """A 1.5B model asked in prose to be given a file's text, again and again, instead of
    calling read_file: the nudge shows the files its reply names (those that exist)."""
    (tmp_path / "calc.py").write_text("def total(xs):\n    return sum(xs)\n")
    asks = "Please provide the current text of the file `calc.py` (not e.g. notes.txt)."
    model = ScriptedModel([asks, call("finish", summary="ok")])
    ctx = ToolContext(root=tmp_path, sandbox=NoSandbox())
    await Agent[str]("coder", model=model, tools=coding_tools(), context=ctx).run("go")
    told = _told(model.requests[1])
    assert told.startswith("Your reply called no tool.")
    assert told.endswith(
        "Call `finish` when done.\n\n`calc.py` as it is now:\n     1\tdef total(xs):\n"
        "     2\t    return sum(xs)"
    ), told


async def test_a_repeated_call_naming_no_readable_file_is_told_to_check_it(
    tmp_path: Path,
) -> None:
    edit = call("edit_file", path="missing.py", old="a", new="b")
    model = FunctionModel(lambda r: edit)
    ctx = ToolContext(root=tmp_path, sandbox=NoSandbox())
    await Agent[str]("coder", model=model, tools=coding_tools(), context=ctx).run("go")
    told = _told(model.requests[2])
    assert "check the file's current text" in told and "as it is now" not in told


async def test_near_identical_text_replies_count_as_repeats() -> None:
    texts = iter(
        ["I think I should add them.", "I think I should add them!", "i think i should add them."]
    )
    model = FunctionModel(lambda r: next(texts))
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("go")
    assert result.stop_reason == "stuck"


async def test_varied_work_is_never_stuck() -> None:
    def model(request: ChatRequest) -> ToolCall:
        n = len(request.messages)
        return call("finish", summary="done") if n > 12 else call("add", a=n, b=1)

    result = await Agent[str]("coder", model=FunctionModel(model), tools=[add, finish]).run("go")
    assert result.stop_reason == "finish"


async def test_going_round_a_longer_cycle_of_calls_that_work_is_stuck() -> None:
    """As the 1.5B model did for 35 replies: rename a name, edit a file, rename it back,
    edit another, rename again; every call worked, and none was the one before."""
    cycle = [call("add", a=n, b=1) for n in range(5)]
    model = FunctionModel(lambda r: cycle[(len(model.requests) - 1) % 5])
    result = await Agent[str]("coder", model=model, tools=[add, finish], max_steps=40).run("go")
    assert result.stop_reason == "stuck" and result.steps == 15
    assert result.repeated.startswith("going round the same 5 replies: add(")


async def test_work_that_comes_back_to_a_call_now_and_then_is_not_a_cycle() -> None:
    """run_tests after every edit: the same call over and over, between calls that differ."""

    def model(request: ChatRequest) -> ToolCall:
        n = len(request.messages)
        if n > 30:
            return call("finish", summary="done")
        return call("add", a=0, b=0) if n % 4 == 1 else call("add", a=n, b=1)

    result = await Agent[str]("coder", model=FunctionModel(model), tools=[add, finish]).run("go")
    assert result.stop_reason == "finish"


# -- through the router: calls written as text, per provider mode ---------------------------

_TEXT_ONLY = RealModel(text_calls=1.0, wrong_names=0, repeats=0, truncated=0, no_call=0)


def _reader(seen: list[ChatRequest]) -> Callable[[ChatRequest], Reply]:
    """A model that reads a.py, then finishes; every request is kept in `seen`."""

    def script(request: ChatRequest) -> Reply:
        seen.append(request)
        done = any(
            m.role in ("tool", "user") and "x = 1" in (m.content or "") for m in request.messages
        )
        name, args = ("finish", {"summary": "read"}) if done else ("read_file", {"path": "a.py"})
        return Reply(tool_calls=[ToolCall(id="c", name=name, arguments=json.dumps(args))])

    return script


async def _run(tmp_path: Path, mode: str | None, script: Script) -> AgentResult[str]:
    (tmp_path / "a.py").write_text("x = 1\n")
    config = SwarmConfig(
        providers={"sim": ProviderConfig(kind="sim", time_scale=0, tool_calls=mode)},
        tiers={"speed": TierConfig(models=["sim/kimi-k2.6"])},
    )
    provider = SimProvider("sim", script=script, time_scale=0)
    async with Router(config, providers={"sim": provider}, env={}) as router:
        agent = Agent[str](
            "coder",
            model=router.model("speed"),
            tools=coding_tools(),
            context=ToolContext(root=tmp_path, sandbox=NoSandbox()),
            max_steps=6,
        )
        return await agent.run("read a.py")


async def test_calls_written_as_text_are_read_and_run(tmp_path: Path) -> None:
    seen: list[ChatRequest] = []
    result = await _run(tmp_path, None, real_model_script(_reader(seen), _TEXT_ONLY))
    assert result.finished and result.output == "read"
    assert (result.calls.parsed, result.calls.native) == (2, 0)


async def test_a_native_provider_leaves_text_alone(tmp_path: Path) -> None:
    seen: list[ChatRequest] = []
    result = await _run(tmp_path, "native", real_model_script(_reader(seen), _TEXT_ONLY))
    assert not result.finished and result.calls.parsed == 0  # prose to a native provider


async def test_text_mode_sends_tools_in_the_prompt(tmp_path: Path) -> None:
    seen: list[ChatRequest] = []
    result = await _run(tmp_path, "text", real_model_script(_reader(seen), _TEXT_ONLY))
    assert result.finished and result.calls.parsed == 2
    assert all(r.tools == [] for r in seen)
    assert "<tool_call>" in (seen[0].messages[0].content or "")


async def test_alternating_between_two_replies_is_stuck() -> None:
    """A B B A B B: each repeat breaks the other's streak, but nothing moves."""
    texts = ["I will look at it.", "Let me think about the tests.", "Let me think about the tests."]
    model = FunctionModel(lambda r: texts[len(model.requests) % 3 - 1])
    result = await Agent[str]("coder", model=model, tools=[add, finish], max_steps=30).run("go")
    assert result.stop_reason == "stuck" and result.steps <= 6
    assert result.repeated.startswith("alternating between two replies")


async def test_an_alternation_with_an_empty_reply_names_both() -> None:
    """As the 1.5B model did: a failing edit, then nothing, then the edit again."""
    texts = ["Let me edit mathutil.", "", "Let me edit mathutil.", ""]
    model = FunctionModel(lambda r: texts[(len(model.requests) - 1) % 2])
    result = await Agent[str]("coder", model=model, tools=[add, finish], max_steps=30).run("go")
    assert result.stop_reason == "stuck"
    assert result.repeated == (
        "alternating between two replies: Let me edit mathutil. / (an empty reply)"
    )


async def test_replies_in_other_words_that_call_nothing_that_works_are_stuck() -> None:
    """As the 1.5B model did for 22 replies: three texts, each in new words each time, and
    a failing call between them; no two neighbours alike."""
    texts = [
        "Please provide the current text of the file, version {}.",
        "Here is the final version of the file, with {} changes I made in my head.",
        "I see you have updated the file {} times; it looks good to me now.",
    ]

    def model(request: ChatRequest) -> ChatResult | Scripted:
        n = len(model_.requests)
        if n % 4 == 0:
            return call("add", a="x", b=n)  # fails: not a number
        return texts[n % 3].format(n * 7919)

    model_ = FunctionModel(model)
    result = await Agent[str]("coder", model=model_, tools=[add, finish], max_steps=40).run("go")
    assert result.stop_reason == "stuck" and result.steps == 9
    assert result.repeated.startswith("9 replies in a row with no tool call that worked; the last:")


async def test_a_tool_result_the_model_invents_is_dropped_and_it_is_told(tmp_path: Path) -> None:
    seen: list[ChatRequest] = []

    def script(request: ChatRequest) -> Reply:
        seen.append(request)
        if len(seen) == 1:
            return Reply(text="<tool_response>\nall tests passed\n</tool_response>")
        return Reply(tool_calls=[ToolCall(id="c", name="finish", arguments='{"summary": "ok"}')])

    result = await _run(tmp_path, None, script)
    assert result.finished and result.calls.rejected == 0 and result.calls.nudges == 1
    told = _told(seen[1])
    assert told.startswith("Your reply called no tool, and you wrote a tool's result yourself")
    assert all("all tests passed" not in (m.content or "") for m in seen[1].messages)


async def test_the_simulator_writes_raw_quotes_and_invented_results_that_are_read() -> None:
    code = 'def f(d):\n    """Doc."""\n    return d["k"]\n'
    wrote = ToolCall(
        id="c", name="write_file", arguments=json.dumps({"path": "a.py", "content": code})
    )
    spoilt = RealModel(
        text_calls=1.0,
        formats=["fenced"],
        raw_quotes=1.0,
        invented_results=1.0,
        wrong_names=0,
        repeats=0,
        truncated=0,
        no_call=0,
    )
    script = real_model_script(lambda request: Reply(tool_calls=[wrote]), spoilt)
    pending = script(ChatRequest(messages=[Message.user("go")]))
    assert not isinstance(pending, Reply)
    text = (await pending).text or ""
    assert text.startswith("<tool_response>") and '"""Doc."""' in text
    found = calls_from_text(text, {"write_file"})
    assert found.repaired == 1 and json.loads(found.calls[0].arguments)["content"] == code
