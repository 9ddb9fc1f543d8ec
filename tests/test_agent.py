from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel, ValidationError

from swarm.agent._loop import Agent
from swarm.agent._tool import Finish, ToolContext, tool
from swarm.agent._toolbox import coding_tools
from swarm.agent.events import ToolResultEvent
from swarm.errors import ModelBehaviorError, ToolError
from swarm.messages import ChatRequest
from swarm.testing import FunctionModel, ScriptedModel, call


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def finish(summary: str) -> None:
    """End the run."""
    raise Finish(summary)


@tool
def broken(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"broken: {reason}")


def tool_texts(request: ChatRequest) -> list[str]:
    return [m.content or "" for m in request.messages if m.role == "tool"]


async def test_tools_then_finish() -> None:
    model = ScriptedModel([call("add", a=2, b=3), call("finish", summary="sum is 5")])
    result = await Agent[str]("coder", model=model, tools=[add, finish]).run("add 2 and 3")
    assert result.finished
    assert result.stop_reason == "finish"
    assert result.output == "sum is 5"
    assert result.steps == 2
    assert tool_texts(model.requests[1]) == ["5"]
    model.assert_complete()


async def test_tool_errors_unknown_tools_and_bad_arguments_go_back_to_the_model() -> None:
    model = ScriptedModel(
        [
            call("broken", reason="disk"),
            call("nope"),
            call("add", a="x", b=1),
            call("finish", summary="gave up"),
        ]
    )
    result = await Agent[str]("coder", model=model, tools=[add, broken, finish]).run("go")
    assert result.finished
    (broken_text,) = tool_texts(model.requests[1])
    unknown_text, bad_args_text = tool_texts(model.requests[3])[1:]
    assert broken_text == "error: broken: disk"
    assert "unknown tool 'nope'" in unknown_text
    assert "add" in unknown_text
    assert bad_args_text.startswith("error:")
    assert "a" in bad_args_text


async def test_a_failed_call_stops_the_rest_of_its_reply_finish_included() -> None:
    """A weak model writes an edit, the tests and `finish` in one reply without seeing a
    result: when the edit fails, neither the rest nor the finish is run."""
    ran: list[str] = []

    @tool
    def note(text: str) -> str:
        """Notes text."""
        ran.append(text)
        return "noted"

    model = ScriptedModel(
        [
            [
                call("note", text="a"),
                call("broken", reason="no match"),
                call("note", text="b"),
                call("finish", summary="all done"),
            ],
            call("finish", summary="fixed it"),
        ]
    )
    result = await Agent[str]("coder", model=model, tools=[note, broken, finish]).run("go")
    assert ran == ["a"]
    assert result.output == "fixed it"
    texts = tool_texts(model.requests[1])
    assert texts[:2] == ["noted", "error: broken: no match"]
    assert texts[2:] == ["error: not run: `broken` before it in your reply failed"] * 2


async def test_parallel_read_only_tool_calls_run_concurrently() -> None:
    ping, pong = anyio.Event(), anyio.Event()

    @tool(read_only=True)
    async def first() -> str:
        """Waits for the second."""
        ping.set()
        with anyio.fail_after(2):
            await pong.wait()
        return "first"

    @tool(read_only=True)
    async def second() -> str:
        """Waits for the first."""
        with anyio.fail_after(2):
            await ping.wait()
        pong.set()
        return "second"

    model = ScriptedModel([[call("first"), call("second")], "both done"])
    result = await Agent[str]("coder", model=model, tools=[first, second]).run("go")
    assert result.output == "both done"
    assert tool_texts(model.requests[1]) == ["first", "second"]


async def test_step_budget_stops_the_loop() -> None:
    model = FunctionModel(lambda request: call("add", a=len(request.messages), b=1))
    result = await Agent[str]("coder", model=model, tools=[add, finish], max_steps=3).run("loop")
    assert not result.finished
    assert result.stop_reason == "max_steps"
    assert result.steps == 3
    assert len(model.requests) == 3


async def test_text_reply_when_finish_is_required_gets_a_nudge() -> None:
    model = ScriptedModel(["I think I am done", call("finish", summary="done")])
    result = await Agent[str]("coder", model=model, tools=[finish]).run("go")
    assert result.output == "done"
    assert "finish" in (model.requests[1].messages[-1].content or "")


class Verdict(BaseModel):
    ok: bool
    reason: str


async def test_output_type_invalid_reply_is_retried() -> None:
    model = ScriptedModel(['{"ok": "maybe"}', '```json\n{"ok": true, "reason": "tests pass"}\n```'])
    result = await Agent[Verdict]("tester", model=model, output_type=Verdict).run("judge")
    assert result.output == Verdict(ok=True, reason="tests pass")
    assert "did not validate" in (model.requests[1].messages[-1].content or "")


async def test_output_type_retries_are_bounded_then_a_model_behavior_error() -> None:
    model = ScriptedModel(["no", '{"ok": "maybe"}', "never"])
    agent = Agent[Verdict]("tester", model=model, output_type=Verdict, max_output_retries=2)
    with pytest.raises(ModelBehaviorError) as info:
        await agent.run("judge")
    err = info.value
    assert (err.agent, err.attempts) == ("tester", 3)
    assert "not a valid Verdict" in err.problem
    assert str(err).startswith("agent tester: output is not a valid Verdict")
    assert isinstance(err.__cause__, ValidationError)
    model.assert_complete()


async def test_an_agent_without_a_context_can_finish() -> None:
    model = ScriptedModel([call("read_file", path="a.py"), call("finish", summary="nothing to do")])
    tools = coding_tools(include=["read_file", "finish"])
    result = await Agent[str]("coder", model=model, tools=tools).run("go")
    assert (result.stop_reason, result.output) == ("finish", "nothing to do")
    assert tool_texts(model.requests[1]) == [
        "error: read_file needs a workspace; this agent has none"
    ]


async def test_a_crash_in_our_own_code_propagates() -> None:
    def crash(request: ChatRequest) -> str:
        raise RuntimeError("bug in the model double")

    with pytest.raises(RuntimeError, match="bug in the model double"):
        await Agent[str]("coder", model=FunctionModel(crash)).run("go")


async def test_cancellation_mid_tool_ends_the_tool_and_the_spans(
    spans: InMemorySpanExporter,
) -> None:
    started, cleaned = anyio.Event(), anyio.Event()

    @tool
    async def slow() -> str:
        """Never returns on its own."""
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cleaned.set()
        return "unreachable"

    model = ScriptedModel([call("slow")])
    async with anyio.create_task_group() as tg:
        tg.start_soon(Agent[str]("coder", model=model, tools=[slow]).run, "go")
        await started.wait()
        tg.cancel_scope.cancel()
    assert cleaned.is_set()
    names = sorted(s.name for s in spans.get_finished_spans())
    assert names == ["execute_tool slow", "invoke_agent coder"]


async def test_spans_nest_tools_under_the_agent(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel([call("add", a=1, b=2), call("finish", summary="3")])
    await Agent[str]("coder", model=model, tools=[add, finish], agent_id="coder-7").run("go")
    by_name = {s.name: s for s in spans.get_finished_spans()}
    agent_span = by_name["invoke_agent coder"]
    tool_span = by_name["execute_tool add"]
    assert tool_span.parent is not None
    assert tool_span.parent.span_id == agent_span.context.span_id
    assert agent_span.attributes is not None and tool_span.attributes is not None
    assert agent_span.attributes["gen_ai.agent.id"] == "coder-7"
    assert agent_span.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert tool_span.attributes["gen_ai.tool.name"] == "add"
    assert tool_span.attributes["swarm.step"] == 1


async def test_a_call_named_after_no_tool_runs_the_one_tool_its_arguments_fit() -> None:
    written: dict[str, str] = {}

    @tool
    def save(path: str, content: str) -> str:
        """Saves content."""
        written[path] = content
        return "saved"

    @tool
    def show(path: str) -> str:
        """Shows a file."""
        return written.get(path, "")

    @tool
    def listing(path: str = ".") -> str:
        """Lists a directory."""
        return "a.py"

    model = ScriptedModel(
        [
            call("create-item", path="a.py", content="x = 1"),
            call("look", path="a.py"),  # fits `show` and `listing`: not guessed
            call("finish", summary="done"),
        ]
    )
    agent = Agent[str]("coder", model=model, tools=[save, show, listing, finish])
    result = await agent.run("go")
    assert written == {"a.py": "x = 1"}
    assert tool_texts(model.requests[1]) == [
        "('create-item' is not a tool; ran save, whose arguments these are) saved"
    ]
    assert "unknown tool 'look'" in tool_texts(model.requests[2])[-1]
    assert (result.calls.repaired, result.calls.rejected) == (1, 1)


async def test_a_file_tool_called_with_the_other_one_s_arguments_runs_that_one(
    tmp_path: Path,
) -> None:
    """A small model called edit_file with write_file's `path` and `content`, and the
    reverse; arguments that fit neither are the named tool's error."""
    (tmp_path / "a.py").write_text("x = 1\n")
    model = ScriptedModel(
        [
            call("edit_file", path="b.py", content="y = 2\n"),
            call("write_file", path="a.py", old="x = 1", new="x = 3"),
            call("edit_file", path="a.py", text="z"),
            call("finish", summary="done"),
        ]
    )
    tools = coding_tools(include=["edit_file", "write_file", "finish"])
    agent = Agent[str]("coder", model=model, tools=tools, context=ToolContext(root=tmp_path))
    result = await agent.run("go")
    assert (tmp_path / "b.py").read_text() == "y = 2\n"
    assert (tmp_path / "a.py").read_text() == "x = 3\n"
    told = [tool_texts(model.requests[n])[-1] for n in (1, 2, 3)]
    assert told[0].startswith(
        "(edit_file does not take these arguments; ran write_file, whose arguments these "
        "are) wrote 6 bytes to b.py"
    )
    assert told[1].startswith("(write_file does not take these arguments; ran edit_file")
    assert told[2].startswith("error: invalid arguments for edit_file")
    assert (result.calls.repaired, result.calls.rejected) == (2, 1)


async def test_a_result_that_reads_like_an_error_is_not_one() -> None:
    """Whether a call failed is said by the tool raising, never read from its text."""

    @tool
    def grep_log() -> str:
        """Greps a log."""
        return "error: disk full (line 3)"

    ran: list[str] = []

    @tool
    def after() -> str:
        """Runs after."""
        ran.append("after")
        return "ok"

    events: list[object] = []
    model = ScriptedModel([[call("grep_log"), call("after")], call("finish", summary="x")])
    agent = Agent[str]("coder", model=model, tools=[grep_log, after, finish])
    await agent.run("go", on_event=events.append)
    assert ran == ["after"]  # the batch went on: grep_log did not fail
    results = [e for e in events if isinstance(e, ToolResultEvent) and e.call.name == "grep_log"]
    assert [e.is_error for e in results] == [False]
