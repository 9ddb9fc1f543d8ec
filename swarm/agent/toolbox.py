"""The tool kit: loading the built-in coding tools (and users' own), and the helpers tools
are built from — confining paths to the workspace and running commands safely.

The built-in tools live in the top-level `tools/` directory of the source tree and ship
inside the wheel as `swarm/_builtin_tools/`. They are loaded by file path under module
names `swarm._builtin_tools.<file>`, so no top-level `tools` package is ever importable.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import anyio
from anyio.abc import ByteReceiveStream, Process
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from swarm.agent.tool import Tool, ToolContext, scrub_env, truncate
from swarm.errors import ConfigError, ToolError

_PACKAGE = Path(__file__).resolve().parents[1]
"""The installed `swarm` package (built-in tools ship inside it as `_builtin_tools`)."""

__all__ = [
    "CommandResult",
    "coding_tools",
    "kill_processes_in",
    "load_tools_from",
    "resolve_path",
    "run_command",
    "subprocess_env",
    "tagged_processes",
]

BUILTIN_TOOL_NAMES = (
    "read_file",
    "list_dir",
    "search",
    "edit_file",
    "write_file",
    "run",
    "run_tests",
    "git_diff",
    "finish",
)
_BUILTIN_MODULES = ("files", "search", "shell", "git", "finish")
COMMAND_TAG_VAR = "SWARM_COMMAND_TAG"
"""Set to a fresh token in each command's environment; its descendants inherit it."""
_KILL_GRACE_S = 1.0
"""After SIGTERM to a command's process group, how long before SIGKILL."""
_EOF_GRACE_S = 0.5
"""After a command exits, how long its leftover children may hold the output pipe open."""

_builtin: list[Tool] | None = None


def _tools_dir() -> Path:
    packaged = _PACKAGE / "_builtin_tools"
    return packaged if packaged.is_dir() else _PACKAGE.parent / "tools"


def _load_module(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError("not a Python file", path=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _module_tools(module: ModuleType) -> list[Tool]:
    return [value for value in vars(module).values() if isinstance(value, Tool)]


def coding_tools(*, include: Iterable[str] | None = None) -> list[Tool]:
    """The built-in coding tools, in a stable order; `include` picks some by name."""
    global _builtin
    if _builtin is None:
        found: list[Tool] = []
        for stem in _BUILTIN_MODULES:
            name = f"swarm._builtin_tools.{stem}"
            module = sys.modules.get(name) or _load_module(_tools_dir() / f"{stem}.py", name)
            found.extend(_module_tools(module))
        _builtin = sorted(found, key=lambda t: BUILTIN_TOOL_NAMES.index(t.name))
    if include is None:
        return list(_builtin)
    wanted = list(include)
    unknown = sorted(set(wanted) - set(BUILTIN_TOOL_NAMES))
    if unknown:
        raise ConfigError(f"unknown built-in tools {unknown}; known: {list(BUILTIN_TOOL_NAMES)}")
    return [t for t in _builtin if t.name in wanted]


def load_tools_from(path: Path) -> list[Tool]:
    """Every module-level `Tool` defined in a `.py` file (or in each `.py` of a directory)."""
    path = Path(path)
    files = sorted(path.glob("*.py")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise ConfigError("no such tool file", path=str(path))
    tools: list[Tool] = []
    for file in files:
        key = f"swarm._user_tools.{file.stem}_{abs(hash(str(file.resolve()))):x}"
        try:
            module = _load_module(file, key)
        except ConfigError:
            raise
        except Exception as exc:
            message = f"could not load tools: {type(exc).__name__}: {exc}"
            raise ConfigError(message, path=str(file)) from exc
        tools.extend(_module_tools(module))
    return tools


def resolve_path(ctx: ToolContext, path: str, *, writing: bool = False) -> Path:
    """`path` (relative to the workspace, or absolute inside it) resolved, or a ToolError.

    Refuses `..` escapes, absolute paths elsewhere and symlinks pointing out; when
    `writing`, also refuses anything under `.git`.
    """
    root = ctx.root.resolve()
    given = Path(path)
    candidate = given if given.is_absolute() else root / given
    resolved = candidate.resolve()
    if not resolved.is_relative_to(root):
        lexical = Path(os.path.normpath(candidate))
        if lexical.is_relative_to(root):
            raise ToolError(f"{path!r} is a symlink pointing outside the workspace; refused")
        raise ToolError(
            f"{path!r} is outside the workspace; use paths relative to the workspace root"
        )
    if writing and ".git" in resolved.relative_to(root).parts:
        raise ToolError(f"{path!r} is inside .git; git metadata is not editable")
    return resolved


def subprocess_env(ctx: ToolContext) -> dict[str, str]:
    """The environment for a tool's subprocess: scrubbed, with the current TRACEPARENT."""
    env = scrub_env(ctx.env)
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    if "traceparent" in carrier:
        env["TRACEPARENT"] = carrier["traceparent"]
        if carrier.get("tracestate"):
            env["TRACESTATE"] = carrier["tracestate"]
    return env


@dataclass(frozen=True)
class CommandResult:
    """How a command ended and what it printed (stdout and stderr interleaved)."""

    exit_code: int | None
    """None when the command was killed on timeout."""
    output: str
    """Combined output, cut in the middle when longer than the limit asked for."""
    timed_out: bool
    duration_s: float


class _Capture:
    """Keeps the first and last `limit // 2` bytes of a stream and counts what falls between."""

    def __init__(self, limit: int) -> None:
        self.keep = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > 4 * self.keep:
            del self.tail[: -self.keep]

    def text(self, limit_chars: int) -> str:
        if self.total == len(self.head) + len(self.tail):  # nothing dropped: cut exactly
            return truncate((self.head + self.tail).decode(errors="replace"), limit_chars)
        tail = self.tail[-self.keep :]
        cut = self.total - len(self.head) - len(tail)
        head_text, tail_text = self.head.decode(errors="replace"), tail.decode(errors="replace")
        return f"{head_text}\n[… {cut} bytes cut …]\n{tail_text}"


def _shell(command: str) -> list[str]:
    shell = shutil.which("bash") or "/bin/sh"
    return [shell, "-c", command]


def _killpg(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tagged_processes(tag: str) -> list[int]:
    """Pids of the processes whose environment carries `SWARM_COMMAND_TAG=tag` (Linux;
    elsewhere none): a command's descendants, including those that left its process group
    and session with `setsid`."""
    needle = f"{COMMAND_TAG_VAR}={tag}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or not ours
            continue
        if needle in environ.split(b"\0"):
            found.append(int(name))
    return found


def kill_processes_in(directory: Path) -> int:
    """SIGKILL every process whose working directory is `directory` or below it (Linux;
    elsewhere none): what a killed run's commands left running in its worktrees."""
    root = str(directory)
    killed = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for name in entries:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd").removesuffix(" (deleted)")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            try:
                os.kill(int(name), signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _kill_tagged(tag: str) -> None:
    for _ in range(3):  # again, for what forked while we were killing
        pids = tagged_processes(tag)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


async def _stop(process: Process, tag: str) -> None:
    """Kill the command's whole process group: TERM, a grace period, then KILL; then every
    process still carrying the command's tag (those that escaped with `setsid`)."""
    if process.returncode is None:
        _killpg(process.pid, signal.SIGTERM)
        with anyio.move_on_after(_KILL_GRACE_S):
            await process.wait()
    _killpg(process.pid, signal.SIGKILL)  # stragglers, even when the leader has exited
    _kill_tagged(tag)
    if process.returncode is None:
        await process.wait()


async def run_command(
    command: str | Sequence[str],
    ctx: ToolContext,
    *,
    timeout_s: float | None = None,
    max_output_chars: int | None = None,
) -> CommandResult:
    """Run `command` (a shell string or argv) in the workspace, in its own process group.

    On timeout or cancellation the whole group — children and grandchildren — is killed.
    Background processes the command leaves behind are killed when it exits, even those
    in a session of their own (`setsid`): each command's processes carry a tag in their
    environment (`SWARM_COMMAND_TAG`), and whatever carries it is killed.
    """
    timeout = ctx.timeout_s if timeout_s is None else timeout_s
    limit = ctx.max_output_chars if max_output_chars is None else max_output_chars
    argv = _shell(command) if isinstance(command, str) else list(command)
    capture = _Capture(limit)
    started = time.perf_counter()
    tag = secrets.token_hex(8)
    process = await anyio.open_process(
        argv,
        cwd=ctx.root,
        env={**subprocess_env(ctx), COMMAND_TAG_VAR: tag},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        with anyio.move_on_after(timeout) as deadline:
            stdout = process.stdout
            assert stdout is not None
            eof = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(_read, stdout, capture, eof)
                await process.wait()
                # children that outlive the command may keep the pipe open: don't wait on them
                with anyio.move_on_after(_EOF_GRACE_S):
                    await eof.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_KILL_GRACE_S + 5):
            await _stop(process, tag)
            await process.aclose()
    return CommandResult(
        exit_code=None if deadline.cancelled_caught else process.returncode,
        output=capture.text(limit),
        timed_out=deadline.cancelled_caught,
        duration_s=time.perf_counter() - started,
    )


async def _read(stream: ByteReceiveStream, capture: _Capture, eof: anyio.Event) -> None:
    try:
        async for chunk in stream:
            capture.add(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    eof.set()
