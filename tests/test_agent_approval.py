"""Tool approval: a run pauses, is answered in-process, or later after a process restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarm import Agent, Finish, tool
from swarm.agent.events import ApprovalEvent
from swarm.agent.hooks import Hooks, StepInfo, Veto
from swarm.errors import UsageError
from swarm.messages import ToolCall
from swarm.testing import ScriptedModel, call

SCRIPT = Path(__file__).parent / "agent_scripts" / "approval_run.py"

removed: list[str] = []


@tool(requires_approval=True)
def delete_branch(name: str) -> str:
    """Delete a git branch."""
    removed.append(name)
    return f"deleted {name}"


@tool
def finish(summary: str) -> None:
    """Finish."""
    raise Finish(summary)


async def test_a_run_pauses_for_approval_and_resumes_in_process() -> None:
    removed.clear()
    model = ScriptedModel([call("delete_branch", name="old"), call("finish", summary="cleaned")])
    agent: Agent[str] = Agent("janitor", model, tools=[delete_branch, finish])
    events: list[object] = []
    paused = await agent.run("clean up", on_event=events.append)
    assert paused.stop_reason == "approval_required" and not paused.finished
    assert [c.name for c in paused.pending] == ["delete_branch"] and removed == []
    assert any(isinstance(e, ApprovalEvent) for e in events)
    done = await agent.resume(paused, {paused.pending[0].id: True})
    assert (done.stop_reason, done.output, done.steps) == ("finish", "cleaned", 2)
    assert removed == ["old"]
    model.assert_complete()


async def test_a_denied_call_tells_the_model_why() -> None:
    removed.clear()
    model = ScriptedModel([call("delete_branch", name="main"), call("finish", summary="kept")])
    agent: Agent[str] = Agent("janitor", model, tools=[delete_branch, finish])
    paused = await agent.run("clean up")
    done = await agent.resume(paused, {paused.pending[0].id: Veto("main is protected")})
    assert done.output == "kept" and removed == []
    tool_texts = [m.content for m in done.messages if m.role == "tool"]
    assert tool_texts[0] == "error: not approved: main is protected"


class Rewrite(Hooks):
    """A hook that turns each call into another: `names` maps a branch to the next."""

    def __init__(self, names: dict[str, str], into: str = "delete_branch") -> None:
        self.names, self.into = names, into

    async def before_tool(self, info: StepInfo, call: ToolCall) -> ToolCall | None:
        name = json.loads(call.arguments).get("name", "")
        if name not in self.names:
            return None
        arguments = json.dumps({"name": self.names[name]})
        return call.model_copy(update={"name": self.into, "arguments": arguments})


async def test_approval_is_asked_for_the_call_a_hook_made_and_holds_only_for_it() -> None:
    """The human sees the call that will run, not the model's; a rewrite that differs
    from what was approved asks again."""
    removed.clear()
    model = ScriptedModel([call("delete_branch", name="old"), call("finish", summary="ok")])
    hook = Rewrite({"old": "main"})
    agent: Agent[str] = Agent("janitor", model, tools=[delete_branch, finish], hooks=[hook])
    paused = await agent.run("clean up")
    (shown,) = paused.pending
    assert json.loads(shown.arguments) == {"name": "main"}  # not the model's "old"
    hook.names = {"old": "release"}  # the hook now makes another call than was approved
    again = await agent.resume(paused, {shown.id: True})
    assert again.stop_reason == "approval_required" and removed == []
    assert json.loads(again.pending[0].arguments) == {"name": "release"}
    done = await agent.resume(again, {shown.id: True})
    assert done.output == "ok" and removed == ["release"]


async def test_a_hook_that_makes_a_gated_call_pauses_the_run() -> None:
    removed.clear()
    model = ScriptedModel([call("finish", summary="x"), call("finish", summary="ok")])
    # `finish(summary="x")` has no `name`: make the hook act on it by a name of its own
    hook = Rewrite({"": "main"})
    agent: Agent[str] = Agent("janitor", model, tools=[delete_branch, finish], hooks=[hook])
    paused = await agent.run("clean up")
    assert paused.stop_reason == "approval_required" and removed == []
    assert paused.pending[0].name == "delete_branch"


async def test_resume_misuse_is_a_clear_error() -> None:
    agent: Agent[str] = Agent("a", ScriptedModel(["done"]))
    result = await agent.run("x")
    with pytest.raises(UsageError, match="only a run paused for approval"):
        await agent.resume(result, {})
    model = ScriptedModel([call("delete_branch", name="x")])
    janitor: Agent[str] = Agent("j", model, tools=[delete_branch])
    paused = await janitor.run("x")
    with pytest.raises(UsageError, match="no pending tool call has id 'nope'"):
        await janitor.resume(paused, {"nope": True})


def _run(*args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[2])}  # this checkout's swarm
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def test_an_approval_answered_after_a_process_restart(tmp_path: Path) -> None:
    journal = str(tmp_path / "journal.db")
    first = _run(journal, "first")
    assert first["stop_reason"] == "approval_required" and first["deployed"] == []
    pending = first["pending"]
    assert isinstance(pending, list) and len(pending) == 1
    # a new process: the model call is replayed from the journal, the approval applies
    second = _run(journal, "approve", *pending)
    assert second["stop_reason"] == "finish" and second["output"] == "shipped"
    assert second["deployed"] == ["prod"] and second["replayed"] == 1
