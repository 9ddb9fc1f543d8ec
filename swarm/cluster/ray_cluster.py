"""A run's connection to a Ray cluster, and its workspaces there (`RayWorkspaces`).

`RayCluster.open` connects the driver (`ray.init`) for the run and disconnects at its end
(the run's actors end with it). Each workspace is one actor (`WorkspaceNode`) asking for
`cpus_per_workspace` CPUs (its checks run on them), `memory_mb` and any custom resources,
placed with Ray's SPREAD strategy so agents spread over the nodes. When no node has room,
Ray holds the actor until one has: the driver's wait for it is a `swarm.wait cluster` span
(it includes the actor's start, about a second for a fresh worker process).

The base commit travels as a git bundle put once in the object store per base commit
(the last few are kept), never through a shared filesystem.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from swarm.agent.toolbox import coding_tools
from swarm.cluster._bundle import make_bundle
from swarm.cluster.merge_checks import NodeChecks
from swarm.cluster.node import NodeInfo, WorkspaceNode
from swarm.cluster.remote import Remotes, RemoteWorkspace, _await, remote_tools
from swarm.config import ClusterConfig
from swarm.errors import ConfigError
from swarm.run._git import git
from swarm.run.environment import CheckEnvironment
from swarm.run.parts import CoordinatorParts, WorkspaceLike
from swarm.tracing import semconv as sc
from swarm.tracing.setup import tracer
from swarm.tracing.waits import waiting

__all__ = ["RayCluster", "RayWorkspaces", "ray_module"]

CLOSE_TIMEOUT_S = 30.0
"""The longest removing a remote workspace may take, even when cancelled."""
_BUNDLES_KEPT = 4


def ray_module() -> Any:
    """The `ray` package, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "a Ray cluster was asked for, but ray is not installed: pip install 'swarm[ray]'",
            key="cluster",
        ) from None
    return ray


_actor_class: Any = None


def _actor() -> Any:
    global _actor_class
    if _actor_class is None:
        _actor_class = ray_module().remote(WorkspaceNode)
    return _actor_class


def ray_address(address: str) -> str:
    """What `ray.init` takes for `[cluster] address` / `--cluster` (`ray://` kept)."""
    return address.strip() or "auto"


class RayCluster:
    """One run's use of a Ray cluster; see the module's docstring."""

    def __init__(self, config: ClusterConfig, stack: AsyncExitStack) -> None:
        self.config = config
        self.remotes = Remotes()
        self.stack = stack
        """Ends what lives as long as the connection (the merge queue's check actors)."""

    @property
    def place(self) -> Remotes:
        return self.remotes

    @classmethod
    @asynccontextmanager
    async def open(cls, config: ClusterConfig) -> AsyncIterator[RayCluster]:
        """Connect to the cluster `config` names for the block (already connected: kept)."""
        ray = ray_module()
        connected = ray.is_initialized()
        if not connected:
            try:
                ray.init(
                    address=ray_address(config.address),
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(
                    f"cannot reach the Ray cluster at {config.address!r}: {exc}", key="cluster"
                ) from None
        try:
            async with AsyncExitStack() as stack:
                yield cls(config, stack)
        finally:
            if not connected:
                ray.shutdown()

    def parts(self, local: CoordinatorParts, *, repo: Path, run_id: str) -> CoordinatorParts:
        """`local` with its workspaces on the cluster and the tools acting there."""
        environment = local.environment or CheckEnvironment.resolve(repo)
        tools = local.tools if local.tools is not None else coding_tools()
        if self.config.merge_checks:
            place = partial(self.actor, environment, run_id, reserve=False)
            checks = NodeChecks(place, self.stack, repo, run_id)
            self.remotes.commits = checks.runner
        return replace(
            local,
            workspaces=RayWorkspaces(self, repo, run_id, environment),
            tools=remote_tools(tools, self.remotes),
        )

    @asynccontextmanager
    async def actor(
        self, environment: CheckEnvironment, run_id: str, name: str, *, reserve: bool = True
    ) -> AsyncIterator[Any]:
        """A `WorkspaceNode` actor placed on some node for the block (waiting for room as a
        `swarm.wait cluster` span), ended after it, in bounded time even when cancelled;
        `reserve=False`: it reserves nothing (see `merge_checks`)."""
        options = self.actor_options()
        if not reserve:
            options = {"num_cpus": 0, "scheduling_strategy": "SPREAD", "max_restarts": 0}
        actor = _actor().options(**options).remote(environment, run_id, name)
        placed = False
        try:
            with waiting(sc.WAIT_CLUSTER, attributes={sc.WORKSPACE_NAME: name}):
                await _await(actor.ready.remote())
            placed = True
            yield actor
        finally:
            with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
                await _close(actor, placed)

    def actor_options(self) -> dict[str, Any]:
        c = self.config
        options: dict[str, Any] = {
            "num_cpus": c.cpus_per_workspace,
            "scheduling_strategy": "SPREAD",
            "max_restarts": 0,
        }
        if c.memory_mb is not None:
            options["memory"] = c.memory_mb * 2**20
        if c.resources:
            options["resources"] = dict(c.resources)
        return options


class RayWorkspaces:
    """`Workspaces` on a Ray cluster: an actor holding a clone of `base` per workspace."""

    def __init__(
        self, cluster: RayCluster, repo: Path, run_id: str, environment: CheckEnvironment
    ) -> None:
        self.cluster, self.repo, self.run_id = cluster, repo, run_id
        self.environment = environment
        self._bundles: OrderedDict[str, Any] = OrderedDict()
        self._bundling = anyio.Lock()

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]:
        return self._open(base, name)

    @asynccontextmanager
    async def _open(self, base: str, name: str) -> AsyncIterator[WorkspaceLike]:
        sha = await git("rev-parse", "--verify", f"{base}^{{commit}}", cwd=self.repo)
        bundle = await self._bundle(sha)
        async with self.cluster.actor(self.environment, self.run_id, name) as actor:
            attrs = {sc.WORKSPACE_NAME: name}
            with tracer().start_as_current_span(f"{sc.WORKSPACE_SPAN} open", attributes=attrs):
                info: NodeInfo = await _await(actor.open.remote(bundle, sha))
            where = Path(tempfile.gettempdir(), "swarm-remote", self.run_id)
            ws = RemoteWorkspace(actor, where / f"{name}-{secrets.token_hex(3)}", info)
            self.cluster.remotes.add(ws)
            try:
                yield ws
            finally:
                self.cluster.remotes.remove(ws)

    async def _bundle(self, sha: str) -> Any:
        """The object-store ref of a bundle holding `sha` (made once per commit)."""
        async with self._bundling:
            if (ref := self._bundles.get(sha)) is not None:
                self._bundles.move_to_end(sha)
                return ref
            data = await make_bundle(self.repo, sha, self.run_id)
            ref = ray_module().put(data)
            self._bundles[sha] = ref
            while len(self._bundles) > _BUNDLES_KEPT:
                self._bundles.popitem(last=False)
            return ref


async def _close(actor: Any, placed: bool) -> None:
    """Remove the clone, then end the actor; one never placed (cancelled while the cluster
    was full) or whose node was lost has nothing to remove."""
    if placed:
        with contextlib.suppress(Exception):
            await _await(actor.close.remote())
    ray_module().kill(actor, no_restart=True)
