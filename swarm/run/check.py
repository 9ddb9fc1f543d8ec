"""Running a repository's check command (its tests) in a worktree.

The check must test the worktree's own code: an editable install or a `src/` layout can
silently point `python -m pytest` at the user's original checkout, so the worktree (and its
`src/`) go first on PYTHONPATH, and the interpreter running swarm goes first on PATH.
The command runs through the tools' own runner: its own process group, killed on timeout
or cancellation, secrets scrubbed, `TRACEPARENT` set so a test run can join the trace.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from swarm.agent.tool import ToolContext, scrub_env
from swarm.agent.toolbox import run_command
from swarm.tracing import semconv as sc
from swarm.tracing.setup import tracer

__all__ = ["CheckResult", "check_env", "run_check"]


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    exit_code: int | None
    """None when the check was killed on timeout."""
    output: str
    """Combined stdout and stderr, cut in the middle when long."""
    duration_s: float
    timed_out: bool = False


def check_env(cwd: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for running a check (or an agent's tests) in `cwd` against its own code."""
    env = scrub_env(os.environ if base is None else base)
    paths = [str(cwd)]
    if (cwd / "src").is_dir():
        paths.insert(0, str(cwd / "src"))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("VIRTUAL_ENV", None)
    return env


async def run_check(
    command: str, cwd: Path, *, timeout_s: float = 600.0, max_output: int = 12_000
) -> CheckResult:
    """Run `command` in a shell in `cwd`; a span records its exit code."""
    attrs = {sc.OPERATION: sc.OP_TOOL, sc.TOOL_NAME: "run_tests", sc.CHECK_COMMAND: command}
    with tracer().start_as_current_span(f"{sc.OP_TOOL} run_tests", attributes=attrs) as span:
        ctx = ToolContext(root=cwd, env=check_env(cwd), timeout_s=timeout_s)
        result = await run_command(command, ctx, max_output_chars=max_output)
        passed = result.exit_code == 0 and not result.timed_out
        output = result.output
        if result.timed_out:
            output += f"\n[check timed out after {timeout_s:g} s]"
        span.set_attribute(sc.TOOL_EXIT_CODE, -1 if result.exit_code is None else result.exit_code)
        span.set_attribute(sc.CHECK_PASSED, passed)
        return CheckResult(passed, result.exit_code, output, result.duration_s, result.timed_out)
