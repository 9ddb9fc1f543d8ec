"""run, run_tests and finish: real subprocesses in their own process groups.

The tests that follow a command's processes by their pids run it on the host
(`NoSandbox()`): the pids a sandboxed command writes are its PID namespace's."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._sandbox import NoSandbox, _process, bwrap_problem
from swarm._tracing.semconv import SANDBOX_KIND, TESTS_FAILED, TESTS_PASSED, TOOL_EXIT_CODE
from swarm.agent._tool import Finish, ToolContext
from swarm.agent._toolbox import coding_tools, run_command
from swarm.errors import ToolError

TOOLS = {t.name: t for t in coding_tools()}


Context = Callable[..., ToolContext]


@pytest.fixture(params=["pidfd", "anyio"])
def context(request: pytest.FixtureRequest) -> Context:
    """Every command test runs both ways a command is started: waited on through a pidfd
    (Linux), and through anyio's `open_process` (elsewhere), as its sandbox's policy says."""
    if request.param == "pidfd" and not _process.PIDFD:
        pytest.skip("no pidfd here")
    pidfd = request.param == "pidfd"

    def make(**fields: Any) -> ToolContext:
        ctx = ToolContext(**fields)
        return replace(
            ctx, sandbox=ctx.sandbox.with_policy(replace(ctx.sandbox.policy, pidfd=pidfd))
        )

    return make


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for a parent that may never reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def _wait_gone(*pids: int) -> None:
    with anyio.fail_after(5):
        while any(_alive(p) for p in pids):  # noqa: ASYNC110 - nothing to wait on but /proc
            await anyio.sleep(0.02)


async def test_run_reports_exit_code_and_combined_output(tmp_path: Path, context: Context) -> None:
    ctx = context(root=tmp_path)
    out = await TOOLS["run"].run({"command": "echo out; echo err >&2; pwd; exit 3"}, ctx)
    first, *rest = out.splitlines()
    assert first == "command exited with code 3"  # no wall time: a resumed run replays it
    assert rest == ["out", "err", str(tmp_path)]
    assert (await TOOLS["run"].run({"command": "true"}, ctx)).startswith(
        "command exited with code 0"
    )


async def test_run_truncates_long_output_keeping_head_and_tail(
    tmp_path: Path, context: Context
) -> None:
    ctx = context(root=tmp_path, max_output_chars=1000)
    out = await TOOLS["run"].run({"command": "seq 1 100000"}, ctx)
    lines = out.splitlines()
    assert lines[0].startswith("command exited with code 0")
    assert lines[1:4] == ["1", "2", "3"]
    assert lines[-1] == "100000"
    total = sum(len(f"{i}\n") for i in range(1, 100001))
    # 800 characters of output are kept (200 are left for the status line): 400 + 400
    assert f"\n[… {total - 800} bytes cut …]\n" in out
    assert len(out) <= 1000 + 100


async def test_run_rejects_bad_timeouts(tmp_path: Path, context: Context) -> None:
    with pytest.raises(ToolError, match="timeout: Input should be greater than 0"):
        await TOOLS["run"].run({"command": "true", "timeout": 0}, context(root=tmp_path))


SPAWN_TREE = (
    "bash -c 'sleep 30 & echo $! > grandchild.pid; wait' & echo $! > child.pid; echo started; wait"
)


async def test_timeout_kills_the_whole_process_group(tmp_path: Path, context: Context) -> None:
    out = await TOOLS["run"].run(
        {"command": SPAWN_TREE, "timeout": 0.5}, context(root=tmp_path, sandbox=NoSandbox())
    )
    assert out.startswith("command hit its 0.5s time limit")
    assert "killed it and its children" in out and "started" in out
    child = int((tmp_path / "child.pid").read_text())
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    await _wait_gone(child, grandchild)


async def test_cancellation_kills_the_whole_process_group(tmp_path: Path, context: Context) -> None:
    with anyio.move_on_after(0.5) as scope:
        await TOOLS["run"].run({"command": SPAWN_TREE}, context(root=tmp_path, sandbox=NoSandbox()))
    assert scope.cancelled_caught
    child = int((tmp_path / "child.pid").read_text())
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    await _wait_gone(child, grandchild)


async def test_leftover_background_processes_neither_block_nor_survive(
    tmp_path: Path, context: Context
) -> None:
    ctx = context(root=tmp_path, timeout_s=20, sandbox=NoSandbox())
    with anyio.fail_after(10):
        result = await run_command("sleep 30 & echo $! > bg.pid; echo done", ctx)
    assert (result.exit_code, result.output, result.timed_out) == (0, "done\n", False)
    await _wait_gone(int((tmp_path / "bg.pid").read_text()))


async def test_subprocess_env_is_scrubbed_and_carries_traceparent(
    tmp_path: Path, context: Context
) -> None:
    ctx = context(
        root=tmp_path,
        env={
            "PATH": os.environ["PATH"],
            "OPENAI_API_KEY": "sk-1",
            "DEPLOY_TOKEN": "t",
            "VISIBLE": "yes",
            "TRACEPARENT": "00-stale",
        },
    )
    provider = TracerProvider()
    with provider.get_tracer("test").start_as_current_span("execute_tool run") as span:
        out = await TOOLS["run"].run({"command": "env"}, ctx)
    env = dict(line.split("=", 1) for line in out.splitlines()[1:] if "=" in line)
    assert env["VISIBLE"] == "yes"
    assert "OPENAI_API_KEY" not in env and "DEPLOY_TOKEN" not in env
    sc = span.get_span_context()
    expected = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"
    assert env["TRACEPARENT"] == expected


def _spans(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, ...]:
    return exporter.get_finished_spans()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "test_calc.py").write_text(
        "def test_ok():\n    assert 1 + 1 == 2\n\n"
        "def test_also_ok():\n    assert True\n\n"
        "def test_bad():\n    assert 1 - 1 == 2\n"
    )
    return tmp_path


async def test_run_tests_reports_pass_and_fail_with_span_attributes(
    project: Path, context: Context
) -> None:
    check = f"{sys.executable} -m pytest -q -p no:cacheprovider"
    env = {"PATH": os.environ["PATH"], "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    ctx = context(root=project, check=check, env=env)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("execute_tool run_tests"):
        failed = await TOOLS["run_tests"].run({}, ctx)
    with tracer.start_as_current_span("execute_tool run_tests"):
        passed = await TOOLS["run_tests"].run({"args": "-k ok"}, ctx)
    assert failed.startswith(f"FAILED: `{check}` exited with code 1\n")
    assert "1 failed, 2 passed" in failed
    assert passed.startswith(f"PASSED: `{check} -k ok` exited with code 0")
    first, second = _spans(exporter)
    assert first.attributes == {
        SANDBOX_KIND: "bwrap" if bwrap_problem() is None else "none",  # secure by default
        TOOL_EXIT_CODE: 1,
        TESTS_PASSED: 2,
        TESTS_FAILED: 1,
    }
    assert second.attributes == {
        SANDBOX_KIND: first.attributes[SANDBOX_KIND],
        TOOL_EXIT_CODE: 0,
        TESTS_PASSED: 2,
    }


async def test_run_tests_without_a_check_command(tmp_path: Path, context: Context) -> None:
    with pytest.raises(ToolError, match="no check command"):
        await TOOLS["run_tests"].run({}, context(root=tmp_path))


async def test_finish_raises_finish(tmp_path: Path, context: Context) -> None:
    with pytest.raises(Finish) as info:
        await TOOLS["finish"].run({"summary": "fixed add()"}, context(root=tmp_path))
    assert info.value.summary == "fixed add()"


async def test_no_process_outlives_its_command(tmp_path: Path, context: Context) -> None:
    """A child that leaves the command's session with setsid is killed with it."""
    ctx = context(root=tmp_path, sandbox=NoSandbox())
    script = (
        "setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' & "
        "while [ ! -s escaped.pid ]; do sleep 0.01; done"
    )
    result = await run_command(script, ctx, timeout_s=30)
    assert result.exit_code == 0, result.output
    pid = int((tmp_path / "escaped.pid").read_text())
    await _wait_gone(pid)
