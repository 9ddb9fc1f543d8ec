"""Running a repository's check command (its tests) in a worktree.

The check must test the worktree's own code: an editable install or a `src/` layout can
silently point `python -m pytest` at the user's original checkout, so the worktree (and its
`src/`) go first on PYTHONPATH, and the interpreter running swarm goes first on PATH.
Secrets are scrubbed from the environment; `TRACEPARENT` lets a test run join the trace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
from opentelemetry import propagate

from swarm import _semconv as sc
from swarm.tool import scrub_env
from swarm.tracing import tracer

__all__ = ["CheckResult", "check_env", "run_check"]

@dataclass(frozen=True)
class CheckResult:
    passed: bool
    exit_code: int
    output: str
    """Combined stdout and stderr, tail-truncated."""
    duration_s: float
    timed_out: bool = False


def check_env(cwd: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for running a check in `cwd` against `cwd`'s own code."""
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
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if "traceparent" in carrier:
        env["TRACEPARENT"] = carrier["traceparent"]
    return env


async def run_check(
    command: str, cwd: Path, *, timeout_s: float = 600.0, max_output: int = 12_000
) -> CheckResult:
    """Run `command` in a shell in `cwd`, in its own process group, killed on timeout."""
    attrs = {sc.OPERATION: sc.OP_TOOL, sc.TOOL_NAME: "run_tests", "swarm.check.command": command}
    with tracer().start_as_current_span(f"{sc.OP_TOOL} run_tests", attributes=attrs) as span:
        started = time.perf_counter()
        chunks: list[bytes] = []
        timed_out = False
        process = await anyio.open_process(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=check_env(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            with anyio.move_on_after(timeout_s) as scope:
                assert process.stdout is not None
                async for chunk in process.stdout:
                    chunks.append(chunk)
                await process.wait()
            timed_out = scope.cancelled_caught
        finally:
            if process.returncode is None:
                _kill_group(process.pid)
                with anyio.move_on_after(5, shield=True):
                    await process.wait()
            await process.aclose()
        code = process.returncode if process.returncode is not None else -9
        text = b"".join(chunks).decode(errors="replace")
        if len(text) > max_output:
            text = f"[… {len(text) - max_output} characters cut …]\n" + text[-max_output:]
        if timed_out:
            text += f"\n[check timed out after {timeout_s:g} s]"
        passed = code == 0 and not timed_out
        span.set_attribute(sc.TOOL_EXIT_CODE, code)
        span.set_attribute("swarm.check.passed", passed)
        return CheckResult(passed, code, text, time.perf_counter() - started, timed_out)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
