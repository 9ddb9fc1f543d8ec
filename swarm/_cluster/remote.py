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
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread
from opentelemetry import trace

from swarm._cluster.node import CallLimits, NodeInfo, Reply
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._tool import Finish, Tool, ToolContext, WriteLog
from swarm.agent._toolbox import BUILTIN_TOOL_NAMES
from swarm.errors import ConfigError, NodeLost, SwarmError, ToolError, WorkspaceError
from swarm.run._check import CheckResult

__all__ = ["LOST_FOR_S", "RemoteWorkspace", "Remotes", "lost_lately", "note_lost", "remote_tools"]

LOST_FOR_S = 120.0
"""How long a node this driver saw lost is passed over when placing workspaces."""
_lost_at: dict[str, float] = {}


def note_lost(node: str) -> None:
    """Say that a call of this driver found `node` lost now (see `lost_lately`)."""
    _lost_at[node] = time.monotonic()


def lost_lately() -> frozenset[str]:
    """The nodes a call of this driver found lost in the last `LOST_FOR_S`: new workspaces
    go elsewhere. Ray calls a killed node dead only after its health checks fail (seconds
    later); meanwhile its per-node view still shows the node's CPUs free, and a subtask
    started again would be placed on the very node it lost."""
    now = time.monotonic()
    return frozenset(node for node, at in list(_lost_at.items()) if now - at < LOST_FOR_S)


class RemoteWorkspace:
    """A workspace held by an actor on a cluster node; `path` is only its name here."""

    def __init__(self, actor: Any, path: Path, info: NodeInfo) -> None:
        self.actor, self.info = actor, info
        self.written = WriteLog()
        """Empty: the node notes what the tools wrote there, and its patch reads that."""
        self._path = path
        self.reusable = True
        """False once a call failed to come back: its node lost, or the call cancelled (it
        may still run there); the actor is not given to another subtask."""

    @property
    def path(self) -> Path:
        return self._path

    async def call(self, what: str, method: str, *args: Any) -> Any:
        """`method(*args)` on the actor, as a `swarm.remote {what}` span; a lost node is a
        `NodeLost` (the subtask starts again elsewhere)."""
        outer = trace.get_current_span()
        attrs = {sc.HOST_NAME: self.info.host, sc.NODE_ID: self.info.node}
        outer.set_attributes(attrs)
        with tracer().start_as_current_span(f"{sc.REMOTE_SPAN} {what}", attributes=attrs) as span:
            try:
                ref = getattr(self.actor, method).remote(*args)
                reply = await _await(ref, node=self.info.node, during=_during(what))
            except BaseException:
                self.reusable = False
                raise
            if isinstance(reply, Reply):
                span.set_attribute(sc.REMOTE_DURATION, reply.node_s)
            return reply

    async def patch(self) -> str:
        patch: str = await self.call("patch", "patch")
        return patch

    async def apply(self, patch: str, *, reverse: bool = False) -> None:
        await self.call("apply", "apply", patch, reverse)

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


def _during(what: str) -> str:
    """What a workspace was doing when its call `what` went out, said for a person."""
    said = {"patch": "returning the patch", "check": "a check", "apply": "applying a patch"}
    return said.get(what, f"a tool call ({what})")


_LOST = (
    "RayActorError",  # its actor died (ActorDiedError) or cannot be reached now
    "ActorUnschedulableError",
    "ActorPlacementGroupRemoved",
    "NodeDiedError",
    "LocalRayletDiedError",
    "WorkerCrashedError",
    "ObjectLostError",  # a reply or bundle held on the lost node; its owner died
    "OutOfMemoryError",  # the node killed the worker
    "TaskUnschedulableError",
    "RaySystemError",
    "RpcError",
)
"""Ray's errors that mean the workspace's node (or its worker process) went away."""


def _reason(exc: BaseException) -> str:
    """Ray's own message, in short: its first line (the rest is an actor dump)."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first[:200]}"


def cluster_error(exc: BaseException, *, node: str = "", during: str = "") -> BaseException:
    """What a Ray error raised while the workspace on `node` was `during` something is to
    swarm: a `NodeLost` when the node (or its worker) went away; the workspace's own
    `SwarmError` as the node raised it; any other failure there a `WorkspaceError`."""
    import ray

    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause
        if isinstance(cause, SwarmError):
            return cause
        return WorkspaceError(f"{during or 'a call'} failed on the cluster node: {_reason(cause)}")
    lost = tuple(getattr(ray.exceptions, name) for name in _LOST)
    if isinstance(exc, lost):
        where = f"cluster node {node[:12]}" if node else "the workspace's cluster node"
        message = f"{where} was lost during {during or 'a call'} ({_reason(exc)})"
        if node:
            note_lost(node)
        return NodeLost(message, node=node, during=during)
    return WorkspaceError(f"the cluster failed during {during or 'a call'}: {_reason(exc)}")


async def _await(ref: Any, *, node: str = "", during: str = "") -> Any:
    """The value of a Ray object ref, awaited on the event loop; cancelled with the caller;
    Ray's errors as swarm's (`cluster_error`)."""
    import ray
    import sniffio

    try:
        if sniffio.current_async_library() != "asyncio":  # refs are asyncio futures
            return await anyio.to_thread.run_sync(ray.get, ref, abandon_on_cancel=True)
        return await ref
    except ray.exceptions.RayError as exc:
        raise cluster_error(exc, node=node, during=during) from None
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
