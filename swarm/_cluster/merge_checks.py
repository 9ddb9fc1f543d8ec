"""The merge queue's batch checks on cluster nodes (`[cluster] merge_checks = true`).

The queue still builds each batch here, as a chain of commits in a check tree of its own
(the integration branch only moves here); the check of the chain's tip goes to a node: a
`WorkspaceNode` actor holding a clone, sent the commits it lacks as a git bundle through
the object store (only what is new since the commit it checked last), which checks the tip
out clean and runs the check in its sandbox; the result comes back. A check actor is busy
for each check the queue runs at once (its line's, and its probes' and splits' beside it),
made on first use, reused while idle (a reused one is sent only the new commits; one whose
check was cancelled is not used again) and ended with the run's cluster connection.

Check actors reserve no CPUs: one idle between checks would hold its cores for the whole
run and could starve the workspaces (on a one-CPU cluster, deadlock them). The queue's
`max_parallel_checks` (its line's, and its probes' and splits' in proportion) bounds what
they use instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from swarm._cluster._bundle import make_bundle, missing_since
from swarm._cluster.node import NodeInfo
from swarm._cluster.remote import RemoteWorkspace, _await
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.errors import NodeLost
from swarm.run._check import CheckResult

__all__ = ["CHECK_RESTARTS", "NodeChecks", "Place"]

log = logging.getLogger(__name__)

CHECK_RESTARTS = 2
"""Times a batch check whose node was lost runs again on another."""


@dataclass
class _CheckNode:
    """One check actor and the commit its clone is at."""

    ws: RemoteWorkspace
    have: str
    shipped: list[int] = field(default_factory=list)
    """Bytes of each bundle sent to it (0: it had the commit already)."""


Place = Callable[[str], AbstractAsyncContextManager[Any]]
"""A `WorkspaceNode` actor named so, placed on a node for the block (`RayCluster.actor`)."""


class NodeChecks:
    """Checks of commits of `repo` on cluster nodes; see the module's docstring."""

    def __init__(self, place: Place, stack: AsyncExitStack, repo: Path, run_id: str) -> None:
        self.place, self.repo, self.run_id = place, repo, run_id
        self.nodes: list[_CheckNode] = []
        """Every check actor made (the tests read where checks ran)."""
        self._idle: list[_CheckNode] = []
        self._stack = stack

    def runner(self, commit: str) -> Callable[[str, float], Awaitable[CheckResult]]:
        """The check of `commit` on a node (command, timeout): `Remotes.commits`."""
        return partial(self.check, commit)

    async def check(self, commit: str, command: str, timeout_s: float) -> CheckResult:
        """`command` on `commit`, on an idle check actor or a new one; an actor whose check
        failed to come back (its node lost, the check cancelled) is not used again; a check
        whose node was lost runs again on another (`CHECK_RESTARTS` times)."""
        for again in range(CHECK_RESTARTS + 1):
            try:
                return await self._check_once(commit, command, timeout_s)
            except NodeLost as exc:
                if again == CHECK_RESTARTS:
                    raise
                log.warning("a merge check's cluster node was lost; checking again: %s", exc)
        raise AssertionError("unreachable")

    async def _check_once(self, commit: str, command: str, timeout_s: float) -> CheckResult:
        node = self._idle.pop() if self._idle else await self._start(commit)
        bundle = await missing_since(self.repo, commit, self.run_id, node.have)
        node.shipped.append(len(bundle or b""))
        result = await node.ws.check_with("check_commit", command, timeout_s, bundle, commit)
        node.have = commit
        self._idle.append(node)
        return result

    async def _start(self, commit: str) -> _CheckNode:
        """A new check actor, placed (waiting for room) and holding a clone of `commit`;
        it ends with the cluster connection (`stack`)."""
        name = f"_check-{len(self.nodes)}"
        actor = await self._stack.enter_async_context(self.place(name))
        bundle = await make_bundle(self.repo, commit, self.run_id)
        attrs = {sc.WORKSPACE_NAME: name}
        with tracer().start_as_current_span(f"{sc.WORKSPACE_SPAN} open", attributes=attrs):
            info: NodeInfo = await _await(actor.open.remote(bundle, commit), during="cloning")
        node = _CheckNode(RemoteWorkspace(actor, Path(info.path), info), commit, [len(bundle)])
        self.nodes.append(node)
        return node
