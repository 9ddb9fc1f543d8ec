"""`@tool`: turn a typed, documented Python function into something a model can call.

A `Tool` carries the JSON schema models see (built with pydantic from the signature and
the docstring's `Args:` section) and `run`s the function on the model's JSON arguments.
Everything that goes wrong in a call — bad JSON, invalid arguments, an exception in the
tool's body — becomes a `ToolError` whose message is written for the model to read;
`Finish` (raised by the `finish` tool) passes through so the agent loop can end, and so
does a `WorkspaceError` saying the workspace's cluster node was lost (`node_lost`).

Tools that touch the filesystem or run commands take a `ToolContext` as their first
parameter: the workspace they are confined to, the environment their subprocesses get, and
the `WriteLog` the file tools note the files they write in (a workspace's patch takes the
untracked files it names, and no others).
"""

from __future__ import annotations

import errno
import inspect
import json
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any, get_type_hints, overload

import anyio.to_thread
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from swarm._sandbox import Sandbox, _volume, default_sandbox
from swarm._sandbox._interpreter import interpreters_in, on_path, prefixes
from swarm._sandbox.process import CommandResult, truncate
from swarm.agent._env import command_env, environ, scrub_env
from swarm.errors import ToolError, WorkspaceError
from swarm.messages import ToolSpec

__all__ = [
    "Finish",
    "Tool",
    "ToolContext",
    "WriteLog",
    "command_env",
    "environ",
    "scrub_env",
    "tool",
    "truncate",
]


class WriteLog:
    """The files tools wrote in one directory: workspace-relative posix paths; thread-safe.

    A `Workspace` owns one (`Workspace.written`, new with each checkout) and hands it to
    every `ToolContext` it makes; whoever builds a context for a workspace's directory
    passes the workspace's log (`ToolContext(..., written=ws.written)`), so its patch
    takes the new files the agent wrote there. A context given none keeps a log of its own.
    """

    def __init__(self) -> None:
        self._paths: set[str] = set()
        self._refused: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def note(self, path: str) -> None:
        """Record that a tool created or changed `path` (relative to the root, posix)."""
        with self._lock:
            self._paths.add(path)

    def paths(self) -> frozenset[str]:
        """Every path noted so far."""
        with self._lock:
            return frozenset(self._paths)

    def asked_again(self, path: str, content: str) -> bool:
        """Whether this write of `content` to `path` was refused before (asked for again,
        it is meant); else it is noted as refused now."""
        key = (path, hash(content))
        with self._lock:
            if key in self._refused:
                return True
            self._refused.add(key)
            return False

    def __repr__(self) -> str:
        return f"WriteLog({sorted(self.paths())!r})"


@dataclass(frozen=True)
class ToolContext:
    """Where a tool call may act and how its subprocesses run."""

    root: Path
    """The workspace directory tools are confined to."""
    check: str | None = None
    """The task's check command; `run_tests` runs it."""
    env: Mapping[str, str] = field(default_factory=lambda: command_env(environ()))
    """Environment for subprocesses: by default what `command_env` lets through of
    swarm's own (`PATH`, `HOME`, `LANG`, `LC_*`, `TERM`, `TZ`, ...), no secrets."""
    timeout_s: float = 120.0
    """Default timeout of a command."""
    max_output_chars: int = 20_000
    """Longer outputs are cut in the middle."""
    base: str | None = None
    """The commit `git_diff` compares against (`HEAD` when None)."""
    written: WriteLog = field(default_factory=WriteLog, compare=False)
    """Where the file tools note what they write: the workspace's log when the context is
    for a workspace (`Workspace.context()` passes it), else one of this context's own."""
    check_slot: Callable[[], AbstractAsyncContextManager[None]] | None = field(
        default=None, compare=False
    )
    """A place among the machine's checks, held while `run_tests` runs (a run's checks
    share the cores); None: no limit."""
    checked: Callable[[str, CommandResult], Awaitable[None]] | None = field(
        default=None, compare=False
    )
    """Told of each run of the whole `check` by `run_tests` (no extra arguments): a
    coordinator counts it as the tree's check instead of running the suite again."""
    sandbox: Sandbox = field(default_factory=default_sandbox, compare=False)
    """Where `run`, `run_tests` and checks run their commands (`swarm.sandbox`). Default:
    the best the machine offers (`default_sandbox()`: bubblewrap where it works); a solve
    passes the configured one; `NoSandbox()` opts out (warned once)."""

    def __post_init__(self) -> None:
        if self.sandbox is default_sandbox():  # it must show this context's interpreters
            python = on_path(self.env.get("PATH", ""))
            shown = [*(prefixes(python) if python else []), *interpreters_in(self.check)]
            shown = [p for p in shown if not p.is_relative_to("/usr")]
            if shown:
                object.__setattr__(self, "sandbox", self.sandbox.with_read_only(shown))

    @cached_property
    def real_root(self) -> Path:
        """`root` with its symlinks resolved, once (the tools resolve every path under it:
        a worktree's root is eight directories deep, and each resolve walked them all)."""
        return self.root.resolve()


class Finish(Exception):
    """Raised by the `finish` tool: the agent is done; `summary` is its report."""

    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary
        """What the agent says it did."""


@dataclass(frozen=True)
class Tool:
    """A function a model can call, with the JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""
    fn: Callable[..., Any]
    takes_context: bool
    """True when `fn`'s first parameter is a `ToolContext`."""
    requires_approval: bool = False
    """Pause the run before each call until someone approves it (`Agent.resume`)."""
    read_only: bool = False
    """The tool changes nothing (reads a file, lists a directory): calls of read-only tools
    in one reply run at once; a reply with any other call runs its calls in order."""
    span_attributes: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Extra attributes of this tool's `execute_tool` spans (an MCP tool's server)."""
    _args: type[BaseModel] | None = field(default=None, repr=False, compare=False)
    _spec: ToolSpec = field(init=False, repr=False, compare=False)
    _is_async: bool = field(init=False, repr=False, compare=False)
    _names: dict[str, str] = field(init=False, repr=False, compare=False)
    """Internal field name → parameter name."""

    def __post_init__(self) -> None:
        args = self._args or _signature_model(self.fn, self.name)[0]
        spec = ToolSpec(name=self.name, description=self.description, parameters=self.parameters)
        object.__setattr__(self, "_args", args)
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_is_async", inspect.iscoroutinefunction(self.fn))
        names = {key: f.alias or key for key, f in args.model_fields.items()}
        object.__setattr__(self, "_names", names)

    @property
    def spec(self) -> ToolSpec:
        """The tool as offered to a model."""
        return self._spec

    async def run(self, arguments: str | Mapping[str, Any], ctx: ToolContext | None = None) -> str:
        """Validate `arguments`, call the tool and return its result as text.

        Raises `ToolError` (for the model to read) and `Finish`; nothing else.
        """
        kwargs = self._validate(arguments)
        if self.takes_context:
            if ctx is None:
                raise TypeError(f"tool {self.name} needs a ToolContext")
            call = partial(self.fn, ctx, **kwargs)
        else:
            call = partial(self.fn, **kwargs)
        try:
            if self._is_async:
                result = await call()
            else:
                result = await anyio.to_thread.run_sync(call)
        except (ToolError, Finish):
            raise
        except WorkspaceError as exc:
            if exc.node_lost:  # not the model's to fix: the subtask starts again elsewhere
                raise
            raise ToolError(f"{self.name} failed: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            if (full := _disk_full(exc, ctx)) is not None:
                raise ToolError(f"{self.name} failed: {full}") from exc
            raise ToolError(f"{self.name} failed: {type(exc).__name__}: {exc}") from exc
        text = (
            result
            if isinstance(result, str)
            else pydantic_core.to_json(result, fallback=str).decode()
        )
        return truncate(text, ctx.max_output_chars if ctx else ToolContext.max_output_chars)

    def _validate(self, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
        model = self._args
        assert model is not None
        try:
            if isinstance(arguments, str):
                parsed = model.model_validate_json(arguments if arguments.strip() else "{}")
            else:
                parsed = model.model_validate(dict(arguments))
        except ValidationError as exc:
            if _is_schema(arguments):
                raise ToolError(
                    f"invalid arguments for {self.name}: you sent the JSON schema of its "
                    f"arguments, not their values. Expected: {_shape(self.parameters)}",
                    rejected=True,
                ) from None
            raise ToolError(_explain(self, exc), rejected=True) from None
        names = self._names
        return {names[k]: v for k, v in parsed.__dict__.items()} | (parsed.__pydantic_extra__ or {})


def _explain(t: Tool, exc: ValidationError) -> str:
    problems: list[str] = []
    shape = _shape(t.parameters)
    for err in exc.errors(include_url=False):
        if err["type"] == "json_invalid":
            return f"arguments for {t.name} are not valid JSON: {err['msg']}. Expected: {shape}"
        where = ".".join(str(part) for part in err["loc"]) or "arguments"
        if err["type"] == "extra_forbidden":
            problems.append(f"{where}: unexpected argument")
        elif err["type"] == "missing":
            problems.append(f"{where}: required argument missing")
        else:
            got = json.dumps(err.get("input"), default=str)[:80]
            problems.append(f"{where}: {err['msg']} (got {got})")
    return f"invalid arguments for {t.name}: " + "; ".join(problems) + f". Expected: {shape}"


def _is_schema(arguments: str | Mapping[str, Any]) -> bool:
    """Arguments that are the tool's schema echoed back (a small model copies it)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return False
    return isinstance(arguments, Mapping) and "properties" in arguments and "type" in arguments


def _shape(schema: dict[str, Any]) -> str:
    """The arguments object a tool takes, as a model reads it: `{"path": string, ...}`."""
    required = set(schema.get("required", ()))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type") or "/".join(
            str(p.get("type", "value")) for p in prop.get("anyOf", ()) if p.get("type") != "null"
        )
        optional = "" if name in required else " (optional)"
        parts.append(f'"{name}": {kind or "value"}{optional}')
    return "{" + ", ".join(parts) + "}"


_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Yields|Raises|Examples?|Notes?):\s*$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary (text before the first section) and the `Args:` descriptions."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    indent = 0
    for line in lines:
        match = _SECTION.match(line.strip())
        if match and not line.startswith(" "):
            section, current = match.group(1), None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            this_indent = len(line) - len(line.lstrip())
            arg = _ARG_LINE.match(line.strip())
            if arg and (current is None or this_indent <= indent):
                current, indent = arg.group(1).lstrip("*"), this_indent
                params[current] = arg.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), params


def _signature_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], bool]:
    """A pydantic model of `fn`'s arguments (ToolContext excluded) and whether it takes one."""
    hints = get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())
    takes_context = bool(params) and hints.get(params[0].name) is ToolContext
    if takes_context:
        params = params[1:]
    _, docs = _parse_docstring(fn.__doc__)
    fields: dict[str, Any] = {}
    for i, p in enumerate(params):
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise TypeError(f"tool {name}: parameter {p.name!r} must be a named parameter")
        default = ... if p.default is inspect.Parameter.empty else p.default
        # internal field names avoid clashes with BaseModel attributes (`json`, `copy`, ...)
        fields[f"p{i}"] = (
            hints.get(p.name, Any),
            Field(default, alias=p.name, description=docs.get(p.name)),
        )
    model: type[BaseModel] = create_model(
        f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model, takes_context


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def _make(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    approval: bool = False,
    read_only: bool = False,
) -> Tool:
    tool_name = name or fn.__name__
    model, takes_context = _signature_model(fn, tool_name)
    summary, _ = _parse_docstring(fn.__doc__)
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=_schema(model),
        fn=fn,
        takes_context=takes_context,
        requires_approval=approval,
        read_only=read_only,
        _args=model,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    read_only: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    read_only: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` of a function: `@tool` or `@tool(name=..., description=...)`.

    `requires_approval=True`: each call waits for approval (`swarm.agent.hooks`).
    `read_only=True`: the tool changes nothing, so several calls of it in one reply may
    run at once (calls in a reply with any other tool run one after another).

    The schema comes from the type hints; parameter descriptions from the docstring's
    `Args:` section; parameters with defaults are optional. A first parameter annotated
    `ToolContext` is filled in by the caller, not the model.
    """
    if fn is not None:
        return _make(fn, name, description, requires_approval, read_only)
    return lambda f: _make(f, name, description, requires_approval, read_only)


def _disk_full(exc: Exception, ctx: ToolContext | None) -> str | None:
    """What to tell the model when a tool's write met its worktree's disk quota."""
    if not isinstance(exc, OSError) or exc.errno != errno.ENOSPC or ctx is None:
        return None
    notes = _volume.used_up(ctx.root, "No space left on device")
    return notes[0] if notes else None
