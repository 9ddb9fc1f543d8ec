"""The driver's side of remote workspaces: each a Ray actor, found by its placeholder path.

The coordinator knows a workspace by its `path` and hands that path to the tools (in a
`ToolContext`) and to the checks; a remote workspace's path is a placeholder that exists
nowhere, registered in `Remotes`. The tools `remote_tools` makes, and a `Checker` given
`Remotes` as its `place`, look the path up and send the call to the workspace's actor;
a path not registered (the merge queue's integration worktree) stays local.

Every call is a `swarm.remote {what}` span, its round trip, with the node's own time
(`swarm.remote.duration_s`) and the node (`host.name`, `swarm.node.id`) on it and on the
span of the tool or check it serves.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread
from opentelemetry import trace

from swarm._cluster.node import CallLimits, NodeInfo, Reply
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._tool import Finish, Tool, ToolContext
from swarm.agent._toolbox import BUILTIN_TOOL_NAMES
from swarm.errors import ConfigError, ToolError, WorkspaceError
from swarm.run._check import CheckResult

__all__ = ["RemoteWorkspace", "Remotes", "remote_tools"]


class RemoteWorkspace:
    """A workspace held by an actor on a cluster node; `path` is only its name here."""

    def __init__(self, actor: Any, path: Path, info: NodeInfo) -> None:
        self.actor, self.info = actor, info
        self._path = path
        self.reusable = True
        """False once a call failed to come back: its node lost, or the call cancelled (it
        may still run there); the actor is not given to another subtask."""

    @property
    def path(self) -> Path:
        return self._path

    async def call(self, what: str, method: str, *args: Any) -> Any:
        """`method(*args)` on the actor, as a `swarm.remote {what}` span; a lost node is a
        `WorkspaceError` (the subtask fails alone)."""
        outer = trace.get_current_span()
        attrs = {sc.HOST_NAME: self.info.host, sc.NODE_ID: self.info.node}
        outer.set_attributes(attrs)
        with tracer().start_as_current_span(f"{sc.REMOTE_SPAN} {what}", attributes=attrs) as span:
            try:
                reply = await _await(getattr(self.actor, method).remote(*args))
            except BaseException:
                self.reusable = False
                raise
            if isinstance(reply, Reply):
                span.set_attribute(sc.REMOTE_DURATION, reply.node_s)
            return reply

    async def patch(self) -> str:
        patch: str = await self.call("patch", "patch")
        return patch

    async def apply(self, patch: str) -> None:
        await self.call("apply", "apply", patch)

    async def check(self, command: str, timeout_s: float) -> CheckResult:
        """The check on the node, as the `execute_tool run_tests` span a local one makes."""
        return await self.check_with("check", command, timeout_s)

    async def check_with(
        self, method: str, command: str, timeout_s: float, *extra: Any
    ) -> CheckResult:
        """The actor's check `method(*extra, command, timeout_s)`, as the `execute_tool
        run_tests` span a local check makes."""
        attrs = {sc.OPERATION: sc.OP_TOOL, sc.TOOL_NAME: "run_tests", sc.CHECK_COMMAND: command}
        with tracer().start_as_current_span(f"{sc.OP_TOOL} run_tests", attributes=attrs) as span:
            reply: Reply = await self.call("check", method, *extra, command, timeout_s)
            result = reply.check
            assert result is not None
            code = -1 if result.exit_code is None else result.exit_code
            span.set_attributes({sc.TOOL_EXIT_CODE: code, sc.CHECK_PASSED: result.passed})
            return result


async def _await(ref: Any) -> Any:
    """The value of a Ray object ref, awaited on the event loop; cancelled with the caller."""
    import ray
    import sniffio

    try:
        if sniffio.current_async_library() != "asyncio":  # refs are asyncio futures
            return await anyio.to_thread.run_sync(ray.get, ref, abandon_on_cancel=True)
        return await ref
    except ray.exceptions.RayActorError as exc:
        raise WorkspaceError(
            f"the workspace's cluster node was lost: {exc}", node_lost=True
        ) from None
    except BaseException:
        with contextlib.suppress(Exception):  # finished already, or its node is gone
            ray.cancel(ref)
        raise


class Remotes:
    """The remote workspaces open now, by placeholder path; the checks' `place`."""

    def __init__(self) -> None:
        self._open: dict[Path, RemoteWorkspace] = {}
        self._lock = threading.Lock()
        self.commits: Callable[[str], Callable[[str, float], Awaitable[CheckResult]]] | None = None
        """How a check of a commit runs on a node (`merge_checks.NodeChecks.runner`); None:
        the merge queue's checks stay here."""

    def add(self, ws: RemoteWorkspace) -> None:
        with self._lock:
            self._open[ws.path] = ws

    def remove(self, ws: RemoteWorkspace) -> None:
        with self._lock:
            self._open.pop(ws.path, None)

    def get(self, path: Path) -> RemoteWorkspace | None:
        return self._open.get(path)

    def runner(self, path: Path) -> Callable[[str, float], Awaitable[CheckResult]] | None:
        """How a check in `path` runs on its node, or None when `path` is local."""
        ws = self._open.get(path)
        return ws.check if ws is not None else None

    def commit_runner(self, commit: str) -> Callable[[str, float], Awaitable[CheckResult]] | None:
        """How a check of the repository's `commit` runs on a node, or None: here."""
        return self.commits(commit) if self.commits is not None else None


def _proxy(local: Tool, remotes: Remotes) -> Callable[..., Awaitable[str]]:
    """A built-in tool's body on the driver: the call goes to the workspace's actor."""

    async def call(ctx: ToolContext, **kwargs: Any) -> str:
        ws = remotes.get(ctx.root)
        if ws is None:  # a local workspace: the tool as it is
            return await local.run(kwargs, ctx)
        limits = CallLimits(ctx.check, ctx.timeout_s, ctx.max_output_chars)
        reply: Reply = await ws.call(local.name, "tool", local.name, kwargs, limits)
        if reply.error is not None:
            raise ToolError(reply.error)
        if reply.finish is not None:
            raise Finish(reply.finish)
        return reply.text

    return call


def remote_tools(tools: Sequence[Tool], remotes: Remotes) -> list[Tool]:
    """`tools` with every one that acts on the workspace sent to its node; a tool of the
    user's own that takes a `ToolContext` cannot run there yet: a `ConfigError`."""
    out: list[Tool] = []
    for t in tools:
        if not t.takes_context:
            out.append(t)
            continue
        if t.name not in BUILTIN_TOOL_NAMES:
            raise ConfigError(f"tool {t.name!r} acts on the workspace and cannot run on a cluster")
        proxy = _proxy(t, remotes)
        out.append(Tool(t.name, t.description, t.parameters, proxy, True, _args=t._args))
    return out
