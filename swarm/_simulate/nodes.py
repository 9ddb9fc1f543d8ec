"""Simulated cluster nodes for `swarm simulate --nodes N --cores-per-node C`.

They model what `swarm._cluster` asks of Ray: each workspace is an actor reserving
`cpus_per_workspace` cores on one node for its whole life (its tool calls and checks run on
them), placed SPREAD (on the node with the most room); when no node has room, opening a
workspace waits (a `swarm.wait cluster` span, as on a real cluster) until one closes.
Workspaces reserve equal shares, so the nodes hold `slots` workspaces in all and a FIFO
limiter over them is Ray's back-pressure. Everything above the workspaces — dispatch, the
fix loop, the merge queue, the router — is the production code, as in any simulation.

`NodeStats` says how the cores were used: reserved (a workspace held them) against busy
(a check ran on them), per node; the gap is cores a workspace holds while its agent waits
on the model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import anyio

from swarm._simulate.world import SimWorkspaces
from swarm._tracing import semconv as sc
from swarm._tracing.waits import holding
from swarm.errors import ConfigError
from swarm.run._seams import WorkspaceLike

__all__ = ["NodeStats", "Nodes", "SimNodeWorkspaces", "SimNodes", "node_figures"]


@dataclass(frozen=True)
class Nodes:
    """A simulated cluster's shape."""

    nodes: int
    cores_per_node: float = 8.0
    cpus_per_workspace: float = 1.0
    """Cores a workspace reserves on its node (`[cluster] cpus_per_workspace`)."""

    @property
    def per_node(self) -> int:
        """Workspaces one node holds at once."""
        if self.cpus_per_workspace <= 0:
            return 1 << 20  # reserving nothing: the node never fills (as in Ray)
        return int(self.cores_per_node // self.cpus_per_workspace)

    @property
    def slots(self) -> int:
        """Workspaces the cluster holds at once."""
        return self.nodes * self.per_node

    def validate(self) -> Nodes:
        if self.nodes < 1:
            raise ConfigError(f"--nodes {self.nodes}: a cluster has at least one node")
        if self.per_node < 1:
            raise ConfigError(
                f"--cores-per-node {self.cores_per_node:g} holds no workspace of "
                f"{self.cpus_per_workspace:g} cores (--cpus-per-workspace)"
            )
        return self


@dataclass
class NodeStats:
    """Core-seconds per node: reserved by workspaces, busy in checks; waits for room."""

    reserved_s: list[float]
    busy_s: list[float]
    peak: int = 0
    """Most workspaces open at once."""
    waited: int = 0
    """Workspace openings that found the cluster full."""
    placed: list[int] = field(default_factory=list)
    """Workspaces placed on each node."""


class SimNodes:
    """The nodes' room and what each workspace holds; see the module's docstring."""

    def __init__(self, shape: Nodes) -> None:
        self.shape = shape.validate()
        self._limiter = anyio.CapacityLimiter(shape.slots)
        self._held = [0] * shape.nodes
        self._where: dict[str, int] = {}
        n = shape.nodes
        self.stats = NodeStats([0.0] * n, [0.0] * n, placed=[0] * n)

    @asynccontextmanager
    async def reserve(self, name: str) -> AsyncIterator[int]:
        """A place for the workspace `name` on the node with the most room."""
        if self._limiter.available_tokens < 1:
            self.stats.waited += 1
        async with holding(self._limiter, sc.WAIT_CLUSTER):
            node = min(range(len(self._held)), key=self._held.__getitem__)
            self._held[node] += 1
            self.stats.placed[node] += 1
            self.stats.peak = max(self.stats.peak, sum(self._held))
            self._where[name] = node
            started = anyio.current_time()
            try:
                yield node
            finally:
                self._held[node] -= 1
                del self._where[name]
                held_s = anyio.current_time() - started
                self.stats.reserved_s[node] += held_s * self.shape.cpus_per_workspace

    def checked(self, name: str, seconds: float) -> str | None:
        """Note a check of `seconds` on the cores of workspace `name`; its node's name
        (`host.name` of the check), or None for a workspace on no node."""
        node = self._where.get(name)
        if node is None:
            return None
        self.stats.busy_s[node] += seconds * self.shape.cpus_per_workspace
        return f"sim-node-{node}"


class SimNodeWorkspaces:
    """`SimWorkspaces` each holding its cores on a simulated node while open."""

    def __init__(self, nodes: SimNodes, inner: SimWorkspaces | None = None) -> None:
        self.nodes = nodes
        self.inner = inner or SimWorkspaces()

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]:
        return self._open(base, name)

    @asynccontextmanager
    async def _open(self, base: str, name: str) -> AsyncIterator[WorkspaceLike]:
        async with self.nodes.reserve(name), self.inner.open(base, name) as ws:
            yield ws


def node_figures(nodes: SimNodes, makespan_s: float) -> dict[str, object]:
    """The cluster's shape and use over a run of `makespan_s` (shares of its core-seconds)."""
    shape, stats = nodes.shape, nodes.stats
    cores_s = shape.nodes * shape.cores_per_node * makespan_s
    return {
        "nodes": shape.nodes,
        "cores_per_node": shape.cores_per_node,
        "cpus_per_workspace": shape.cpus_per_workspace,
        "slots": shape.slots,
        "peak_workspaces": stats.peak,
        "waited": stats.waited,
        "reserved": round(sum(stats.reserved_s) / cores_s, 4) if cores_s else 0.0,
        "busy": round(sum(stats.busy_s) / cores_s, 4) if cores_s else 0.0,
        "placed": list(stats.placed),
    }
