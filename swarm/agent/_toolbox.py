"""The tool kit: loading the built-in coding tools (and users' own), and the helpers tools
are built from — confining paths to the workspace and running commands through the
context's sandbox (`swarm.sandbox`).

The built-in tools live in the top-level `tools/` directory of the source tree and ship
inside the wheel as `swarm/_builtin_tools/`. They are loaded by file path under module
names `swarm._builtin_tools.<file>`, so no top-level `tools` package is ever importable.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from swarm._sandbox.process import CommandResult, run_confined
from swarm._tracing import semconv as sc
from swarm.agent._tool import Tool, ToolContext, scrub_env
from swarm.errors import ConfigError, ToolError

_PACKAGE = Path(__file__).resolve().parents[1]
"""The installed `swarm` package (built-in tools ship inside it as `_builtin_tools`)."""

__all__ = [
    "CommandResult",
    "coding_tools",
    "load_tools_from",
    "resolve_path",
    "run_command",
    "subprocess_env",
    "workspace_files",
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
    "rename",
    "finish",
)
_BUILTIN_MODULES = ("files", "search", "shell", "git", "rename", "finish")

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


_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "venv", "target", "dist", "build"})
"""Directories a walk of the workspace leaves out, with every hidden one (`.git`, `.venv`)."""


def workspace_files(root: Path, rel: str = ".") -> list[Path]:
    """The files under `root / rel` (or that file), in a stable order: not hidden, not in
    a hidden or build directory, no symlinks (ripgrep does not follow them either)."""
    start = root / rel
    if start.is_file():
        return [start]
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        files = (Path(dirpath, f) for f in sorted(filenames) if not f.startswith("."))
        out.extend(f for f in files if not f.is_symlink())
    return out


def resolve_path(ctx: ToolContext, path: str, *, writing: bool = False) -> Path:
    """`path` (relative to the workspace, or absolute inside it) resolved, or a ToolError.

    Refuses `..` escapes, absolute paths elsewhere and symlinks pointing out; when
    `writing`, also refuses anything under `.git`.
    """
    root = ctx.real_root
    given = _past_the_root(root, Path(path))
    candidate = given if given.is_absolute() else root / given
    resolved = _under(root, given) or candidate.resolve()
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


def _past_the_root(root: Path, given: Path) -> Path:
    """`given`, or the part of it after the workspace's own directory name when `given` is
    not there and that part is: a small model copied
    `swarm-worktrees/<run>/_integration/mathutil/__init__.py` from a check's traceback."""
    if given.is_absolute() or root.name not in given.parts[:-1]:
        return given
    if os.path.lexists(root / given):
        return given
    at = len(given.parts) - 1 - given.parts[::-1].index(root.name)
    tail = Path(*given.parts[at + 1 :])
    return tail if ".." not in tail.parts and os.path.lexists(root / tail) else given


def _under(root: Path, given: Path) -> Path | None:
    """`root / given` resolved, for a relative `given` with neither `..` nor a symlink in
    it: `root` is resolved already, so only `given`'s own parts are looked at. None
    otherwise (the whole path is resolved then)."""
    if given.is_absolute() or ".." in given.parts:
        return None
    at = root
    for part in given.parts:
        at = at / part
        try:
            if stat.S_ISLNK(os.lstat(at).st_mode):
                return None
        except OSError:  # the rest is new (or unreadable): nothing in it to follow
            return root / given
    return at


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


async def run_command(
    command: str | Sequence[str],
    ctx: ToolContext,
    *,
    timeout_s: float | None = None,
    max_output_chars: int | None = None,
) -> CommandResult:
    """Run `command` (a shell string or argv) in the workspace, through `ctx.sandbox`.

    On timeout or cancellation the whole process tree is killed; background processes the
    command leaves behind are killed when it exits (see `swarm._sandbox.process`). What the
    sandbox refused is noted after the output and on the current span.
    """
    result = await run_confined(
        ctx.sandbox,
        command,
        cwd=ctx.root,
        env=subprocess_env(ctx),
        timeout_s=ctx.timeout_s if timeout_s is None else timeout_s,
        max_output_chars=ctx.max_output_chars if max_output_chars is None else max_output_chars,
    )
    span = trace.get_current_span()
    span.set_attribute(sc.SANDBOX_KIND, ctx.sandbox.kind)
    if result.denials:
        span.set_attribute(sc.SANDBOX_DENIED, list(result.denials))
    return result
