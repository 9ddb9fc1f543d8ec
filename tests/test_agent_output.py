"""Structured output with and without `finish`, run_sync, misuse errors, trace run ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from swarm import Agent, AgentResult, ModelBehaviorError, coding_tools
from swarm._tracing.setup import run_tracing
from swarm.errors import UsageError
from swarm.testing import ScriptedModel, call


class Verdict(BaseModel):
    ok: bool
    reason: str


async def test_structured_output_from_a_final_answer() -> None:
    model = ScriptedModel(['{"ok": true}', '```json\n{"ok": true, "reason": "tests pass"}\n```'])
    result = await Agent("judge", model, output_type=Verdict).run("judge it")
    assert result.output == Verdict(ok=True, reason="tests pass")
    assert "did not validate" in (model.requests[1].messages[-1].content or "")


async def test_structured_output_through_the_finish_tool() -> None:
    """With a `finish` tool, its summary is the output: validated, and retried if not."""
    model = ScriptedModel(
        [
            call("finish", summary="looks fine"),
            call("finish", summary='{"ok": false, "reason": "no tests"}'),
        ]
    )
    agent: Agent[Verdict] = Agent(
        "judge", model, tools=coding_tools(include=["finish"]), output_type=Verdict
    )
    result = await agent.run("judge it")
    assert result.stop_reason == "finish"
    assert result.output == Verdict(ok=False, reason="no tests")
    system = model.requests[0].messages[0].content or ""
    assert '"reason"' in system  # the model is told the schema the summary must match
    retry = model.requests[1].messages[-1]
    assert retry.role == "tool" and "not valid output" in (retry.content or "")


async def test_finish_output_that_never_validates_raises_after_retries() -> None:
    model = ScriptedModel([call("finish", summary="nope")] * 3)
    agent: Agent[Verdict] = Agent(
        "judge", model, tools=coding_tools(include=["finish"]), output_type=Verdict
    )
    with pytest.raises(ModelBehaviorError, match="output is not a valid Verdict"):
        await agent.run("judge it")


async def test_finish_works_without_a_context() -> None:
    model = ScriptedModel([call("read_file", path="a.py"), call("finish", summary="done")])
    agent: Agent[str] = Agent("coder", model, tools=coding_tools())
    result = await agent.run("go")
    assert (result.stop_reason, result.output) == ("finish", "done")
    first_tool = next(m for m in result.messages if m.role == "tool")
    assert "needs a workspace" in (first_tool.content or "")


def test_run_sync_runs_an_agent_from_plain_code() -> None:
    result: AgentResult[str] = Agent("a", ScriptedModel(["hello"])).run_sync("hi")
    assert result.output == "hello"


async def test_run_sync_inside_an_event_loop_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="await run"):
        Agent("a", ScriptedModel(["hello"])).run_sync("hi")


def test_agent_misuse_is_a_usage_error() -> None:
    finish = coding_tools(include=["finish"])
    with pytest.raises(UsageError, match="two tools are named finish"):
        Agent("a", ScriptedModel([]), tools=[*finish, *finish])
    with pytest.raises(UsageError, match="cannot be validated"):
        Agent("a", ScriptedModel([]), output_type=object.__new__)  # type: ignore[arg-type]


def test_a_reused_trace_run_id_is_refused_not_merged(tmp_path: Path) -> None:
    from swarm._tracing.setup import tracer

    with run_tracing("r1", traces_dir=tmp_path):
        with tracer().start_as_current_span("first"):
            pass
    lines = (tmp_path / "r1.jsonl").read_text().splitlines()
    with pytest.raises(UsageError, match="already there"), run_tracing("r1", traces_dir=tmp_path):
        pass
    assert (tmp_path / "r1.jsonl").read_text().splitlines() == lines
    with run_tracing("r1", traces_dir=tmp_path, resume=True):  # the same run, continued
        with tracer().start_as_current_span("second"):
            pass
    assert len((tmp_path / "r1.jsonl").read_text().splitlines()) > len(lines)
