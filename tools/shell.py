"""Shell tools: run a command in the workspace, and run the task's check (its tests).

Commands run in their own process group with a scrubbed environment and the current
TRACEPARENT; on timeout or cancellation the whole group is killed. Loaded by
`swarm.toolbox.coding_tools()` as `swarm._builtin_tools.shell`.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from typing import Annotated

from opentelemetry import trace
from pydantic import Field

from swarm._tracing.semconv import TESTS_FAILED, TESTS_PASSED, TOOL_EXIT_CODE
from swarm.agent._tool import ToolContext, tool
from swarm.agent._toolbox import CommandResult, run_command
from swarm.errors import ToolError

MAX_TIMEOUT_S = 3600.0
_HEADER_ROOM = 200
"""Characters kept free for the status line when cutting the output."""
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|error|errors)\b")


def _report(result: CommandResult, what: str, limit_s: float) -> str:
    # no wall times: what the model reads must be the same when a resumed run replays it
    if result.timed_out:
        status = f"{what} hit its {limit_s:g}s time limit; killed it and its children"
    else:
        status = f"{what} exited with code {result.exit_code}"
    trace.get_current_span().set_attribute(
        TOOL_EXIT_CODE, -1 if result.exit_code is None else result.exit_code
    )
    return f"{status}\n{result.output}" if result.output else status


@tool
async def run(
    ctx: ToolContext,
    command: str,
    timeout: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] | None = None,  # noqa: ASYNC109
) -> str:
    """Run a shell command (bash) in the workspace root; returns its exit code and output.

    Args:
        command: The command line, e.g. `python -m pytest -x tests/test_calc.py`.
        timeout: Seconds before the command and its children are killed.
    """
    result = await run_command(
        command,
        ctx,
        timeout_s=timeout,
        max_output_chars=max(ctx.max_output_chars - _HEADER_ROOM, 100),
    )
    return _report(result, "command", ctx.timeout_s if timeout is None else timeout)


@tool
async def run_tests(ctx: ToolContext, args: str | None = None) -> str:
    """Run the task's check command (its tests), optionally with extra arguments.

    Args:
        args: Extra arguments appended to the check command, e.g. `tests/test_calc.py -x`.
    """
    if not ctx.check:
        raise ToolError("this task has no check command; use run to run tests yourself")
    command = f"{ctx.check} {args}" if args else ctx.check
    async with ctx.check_slot() if ctx.check_slot else nullcontext():
        result = await run_command(
            command, ctx, max_output_chars=max(ctx.max_output_chars - _HEADER_ROOM, 100)
        )
    if not args and ctx.checked is not None:  # the whole check: the tree's, if unchanged
        await ctx.checked(command, result)
    counts = {kind: int(n) for n, kind in _PYTEST_COUNT.findall(result.output)}
    span = trace.get_current_span()
    if "passed" in counts:
        span.set_attribute(TESTS_PASSED, counts["passed"])
    if counts.keys() & {"failed", "error", "errors"}:
        failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
        span.set_attribute(TESTS_FAILED, failed)
    verdict = "PASSED" if result.exit_code == 0 else "FAILED"
    return f"{verdict}: {_report(result, f'`{command}`', ctx.timeout_s)}"
