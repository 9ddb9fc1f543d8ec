"""A run's connection to a Ray cluster, and its workspaces there (`RayWorkspaces`).

`RayCluster.open` connects the driver (`ray.init`) for the run and disconnects at its end
(the run's actors end with it). Each workspace is one actor (`WorkspaceNode`) asking for
`cpus_per_workspace` CPUs (its checks run on them), `memory_mb` and any custom resources,
placed with Ray's SPREAD strategy so agents spread over the nodes. When no node has room,
Ray holds the actor until one has: the driver's wait for it is a `swarm.wait cluster` span
(it includes the actor's start, seconds for a fresh worker process on a busy node).

Actors are handed on: a subtask that finishes leaves its actor, reset, to the next one
(`actor_pool`), so a run starts about as many actors as it has agents. A new actor's base
commit travels as a git bundle put once in the object store per base commit (the last few
are kept), a reused one's as a bundle of only what it lacks; never through a shared
filesystem.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import anyio
import anyio.from_thread
import anyio.lowlevel

from swarm._cluster._bundle import make_bundle, missing_since
from swarm._cluster.actor_pool import CLOSE_TIMEOUT_S, ROOM_TIMEOUT_S, ActorPool, Held, Lifecycle
from swarm._cluster.merge_checks import NodeChecks
from swarm._cluster.node import NodeInfo, WorkspaceNode
from swarm._cluster.remote import (
    Remotes,
    RemoteWorkspace,
    _await,
    lost_lately,
    note_lost,
    remote_tools,
)
from swarm._tracing import semconv as sc
from swarm._tracing.waits import waiting
from swarm.agent._toolbox import coding_tools
from swarm.config import ClusterConfig
from swarm.errors import ConfigError, NodeLost, WorkspaceError
from swarm.run._environment import CheckEnvironment
from swarm.run._git import git
from swarm.run._seams import Seams, WorkspaceLike

__all__ = ["RayCluster", "RayWorkspaces", "ray_module"]

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


_actor_classes: dict[type[WorkspaceNode], Any] = {}


def _actor(node_class: type[WorkspaceNode]) -> Any:
    """`node_class` as a Ray actor class (made once)."""
    if (made := _actor_classes.get(node_class)) is None:
        made = _actor_classes[node_class] = ray_module().remote(node_class)
    return made


def ray_address(address: str) -> str:
    """What `ray.init` takes for `[cluster] address` / `--cluster` (`ray://` kept)."""
    return address.strip() or "auto"


_T = TypeVar("_T")
_REACH_TIMEOUT_S = 10.0
HEAD_POLL_S = 1.0
HEAD_LOST_AFTER_S = 10.0
"""A head that takes no TCP connection for this long is lost: well within the 60 s after
which Ray ends a driver whose GCS is gone (`gcs_rpc_server_reconnect_timeout_s`), and
long past a busy machine's slow accept."""


def _gcs_address(ray: Any) -> tuple[str, int] | None:
    """The connected cluster's GCS `(host, port)`; None where there is none to watch (Ray
    Client: `ray://`)."""
    try:
        address = str(ray.get_runtime_context().gcs_address)
    except Exception:  # Ray Client's context has no GCS address
        return None
    host, _, port = address.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


async def _reachable(address: str) -> None:
    """A WorkspaceError unless the cluster's `HOST:PORT` takes a TCP connection: `ray.init`
    on an address where nothing listens retries for minutes before it gives up."""
    address = ray_address(address)
    if address == "auto":
        return  # Ray reads the address of the cluster on this machine from its files
    try:
        parts = urlsplit(address if "://" in address else f"//{address}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return  # ray.init names what is wrong with it
    if not host or port is None:
        return
    try:
        with anyio.fail_after(_REACH_TIMEOUT_S):
            stream = await anyio.connect_tcp(host, port)
        await stream.aclose()
    except (OSError, TimeoutError) as exc:
        # anyio's "All connection attempts failed" holds the reason (refused) as its cause
        detail = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        why = "no answer within 10 s" if isinstance(exc, TimeoutError) else str(detail)
        raise WorkspaceError(f"cannot reach the Ray cluster at {address!r}: {why}") from None


class RayCluster:
    """One run's use of a Ray cluster; see the module's docstring."""

    def __init__(
        self,
        config: ClusterConfig,
        stack: AsyncExitStack,
        node_class: type[WorkspaceNode] = WorkspaceNode,
    ) -> None:
        self.config = config
        self.node_class = node_class
        """What each workspace actor runs (a test's subclass holds one at a moment)."""
        self.remotes = Remotes()
        self.stack = stack
        """Ends what lives as long as the connection (the merge queue's check actors)."""
        self.head_lost: str | None = None
        """Why the run was cancelled: the head was lost (see `_watching_head`)."""
        self._placements = _Placements()

    @property
    def place(self) -> Remotes:
        return self.remotes

    @classmethod
    @asynccontextmanager
    async def open(
        cls, config: ClusterConfig, *, node_class: type[WorkspaceNode] = WorkspaceNode
    ) -> AsyncIterator[RayCluster]:
        """Connect to the cluster `config` names for the block (already connected: kept);
        each workspace's actor runs `node_class`."""
        ray = ray_module()
        connected = ray.is_initialized()
        # checked even when connected: a driver already on one cluster (a test's, a
        # library user's) asked for another that is down hears so, not "done" elsewhere
        await _reachable(config.address)
        if not connected:
            try:
                ray.init(
                    address=ray_address(config.address),
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                )
            except ValueError as exc:
                raise ConfigError(
                    f"not a Ray cluster address: {config.address!r}: {exc}", key="cluster"
                ) from None
            except (ConnectionError, RuntimeError) as exc:
                raise WorkspaceError(
                    f"cannot reach the Ray cluster at {config.address!r}: {exc}"
                ) from None
        try:
            async with AsyncExitStack() as stack:
                opened = cls(config, stack, node_class)
                async with opened._watching_head(_gcs_address(ray)):
                    yield opened
        finally:
            if not connected:
                ray.shutdown()

    @asynccontextmanager
    async def _watching_head(self, address: tuple[str, int] | None) -> AsyncIterator[None]:
        """Cancel the block when the head at `address` stops taking TCP connections for
        `HEAD_LOST_AFTER_S` (`head_lost` then says so): a lost head is an interrupted run,
        to resume, and Ray itself would end this process once its GCS is gone for
        60 s, before any report. An error of the block passes through as it is (not in a
        task group's ExceptionGroup)."""
        if address is None:
            yield
            return
        raised: BaseException | None = None
        with anyio.CancelScope() as run_scope:
            async with anyio.create_task_group() as watch:
                watch.start_soon(self._watch_head, address, run_scope)
                try:
                    yield
                except anyio.get_cancelled_exc_class():
                    raise
                except BaseException as exc:
                    raised = exc
                finally:
                    watch.cancel_scope.cancel()
        if raised is not None:
            raise raised

    async def _watch_head(self, address: tuple[str, int], run_scope: anyio.CancelScope) -> None:
        host, port = address
        since: float | None = None
        while True:
            try:
                with anyio.fail_after(HEAD_POLL_S):
                    stream = await anyio.connect_tcp(host, port)
                await stream.aclose()
                since = None
            except (OSError, TimeoutError):
                since = since if since is not None else time.monotonic()
                if time.monotonic() - since >= HEAD_LOST_AFTER_S:
                    self.head_lost = (
                        f"the Ray cluster's head at {host}:{port} was lost (no connection "
                        f"for {HEAD_LOST_AFTER_S:.0f} s): the run is interrupted; "
                        "`swarm resume RUN_ID --cluster ADDRESS` continues it"
                    )
                    run_scope.cancel()
                    return
            await anyio.sleep(HEAD_POLL_S)

    def seams(self, local: Seams, *, repo: Path, run_id: str) -> Seams:
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
        with waiting(sc.WAIT_CLUSTER, attributes={sc.WORKSPACE_NAME: name}):
            actor, _ = await self.start(environment, run_id, name, reserve=reserve)
        try:
            yield actor
        finally:
            await end_actor(actor)

    async def start(
        self, environment: CheckEnvironment, run_id: str, name: str, *, reserve: bool = True
    ) -> tuple[Any, NodeInfo]:
        """A new `WorkspaceNode` actor, once Ray has placed it and it runs (ended at once,
        bounded, if this is cancelled or fails first), and where it runs."""
        node, strategy = await self._spread() if reserve else ("", "SPREAD")
        if reserve:
            options = {**self.actor_options(), "scheduling_strategy": strategy}
        else:
            options = {"num_cpus": 0, "scheduling_strategy": "SPREAD", "max_restarts": 0}
        with self._placements.placing(node):
            actor = _actor(self.node_class).options(**options).remote(environment, run_id, name)
            try:
                where: NodeInfo = await _await(actor.ready.remote(), during="placing")
            except NodeLost as exc:
                ray_module().kill(actor, no_restart=True)  # never ran: nothing to remove
                raise await _lost_where_placed(actor, exc) from None
            except BaseException:
                ray_module().kill(actor, no_restart=True)
                raise
        return actor, where

    async def room(self) -> bool:
        """Whether some node has room for one more workspace actor now."""
        return bool(await self._roomy())

    async def _roomy(self) -> dict[str, float]:
        """The nodes with room for one more workspace actor now: their free CPUs by id."""
        options = self.actor_options()
        need = {"CPU": options["num_cpus"], "memory": options.get("memory", 0)}
        need.update(options.get("resources", {}))
        nodes = await _off_loop(_available_per_node)
        lost = lost_lately()
        return {
            node: free.get("CPU", 0.0)
            for node, free in nodes.items()
            if node not in lost and all(free.get(k, 0.0) >= v for k, v in need.items() if v)
        }

    async def _spread(self) -> tuple[str, Any]:
        """Where a new workspace actor goes, and its node's id: the node with room and the
        most free CPUs, less those of actors placed there that Ray's view does not show yet
        (Ray's SPREAD alone placed actors started one after another on one node, and two
        started at once both saw the same node freest), else SPREAD, waiting for room."""
        roomy = await self._roomy()
        if not roomy or "" in roomy:  # full, or no per-node view
            return "", "SPREAD"
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cpus, placed = self.config.cpus_per_workspace, self._placements.count
        # On a tie, the node this run placed fewer actors on lately (its view may lag).
        best = max(roomy, key=lambda node: (roomy[node] - cpus * placed(node), -placed(node)))
        return best, NodeAffinitySchedulingStrategy(best, soft=True, _spill_on_unavailable=True)

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


class _Placements:
    """Nodes chosen for workspace actors that Ray's per-node view may not show yet: those
    still starting, and those started in the last `SETTLE_S` (the view follows the nodes'
    periodic resource reports)."""

    SETTLE_S = 2.0

    def __init__(self) -> None:
        self._until: dict[object, tuple[str, float]] = {}

    def count(self, node: str) -> int:
        now = time.monotonic()
        return sum(1 for n, until in self._until.values() if n == node and until > now)

    @contextlib.contextmanager
    def placing(self, node: str) -> Iterator[None]:
        key, now = object(), time.monotonic()
        self._until = {k: v for k, v in self._until.items() if v[1] > now}
        self._until[key] = (node, math.inf)
        try:
            yield
        finally:
            self._until[key] = (node, time.monotonic() + self.SETTLE_S)


class RayWorkspaces:
    """`Workspaces` on a Ray cluster: an actor holding a clone per workspace, handed on to
    the next subtask when one finishes (`actor_pool`); `aclose`, or the end of the
    cluster's block, ends them all."""

    def __init__(
        self, cluster: RayCluster, repo: Path, run_id: str, environment: CheckEnvironment
    ) -> None:
        self.cluster, self.repo, self.run_id = cluster, repo, run_id
        self.environment = environment
        start = partial(cluster.start, environment, run_id)
        self.pool = ActorPool(Lifecycle(start, cluster.room, self._ready, end_actor, kill_actor))
        cluster.stack.push_async_callback(self.aclose)  # a connection kept open ends them too
        self.shipped: list[int] = []
        """Bytes of each incremental bundle a reused actor was sent (0: it had the base)."""
        self._bundles: OrderedDict[str, Any] = OrderedDict()
        self._bundling = anyio.Lock()

    def open(self, base: str, name: str) -> AbstractAsyncContextManager[WorkspaceLike]:
        return self._open(base, name)

    @asynccontextmanager
    async def _open(self, base: str, name: str) -> AsyncIterator[WorkspaceLike]:
        sha = await git("rev-parse", "--verify", f"{base}^{{commit}}", cwd=self.repo)
        async with self.pool.lease(sha, name) as held:
            assert held.info is not None
            where = Path(tempfile.gettempdir(), "swarm-remote", self.run_id)
            ws = RemoteWorkspace(held.actor, where / f"{name}-{secrets.token_hex(3)}", held.info)
            self.cluster.remotes.add(ws)
            try:
                yield ws
            finally:
                self.cluster.remotes.remove(ws)
                held.reusable = ws.reusable

    async def _ready(self, held: Held, sha: str) -> None:
        """Clone `sha` in a new actor, or reset a used one's clone to it."""
        node = held.info.node if held.info is not None else ""
        if not held.have:
            bundle = await self._bundle(sha)
            ref = held.actor.open.remote(bundle, sha)
        else:
            data = await missing_since(self.repo, sha, self.run_id, held.have)
            self.shipped.append(len(data or b""))
            ref = held.actor.reset.remote(data, sha)
        try:
            held.info = await _await(ref, node=node, during="cloning")
        except WorkspaceError as exc:
            if exc.sigkilled and not exc.node_lost:
                raise await _lost_under(held.actor, node, exc) from None
            raise
        held.have = sha

    async def warm(self, base: str, count: int) -> None:
        """Start `count` actors with clones of `base` ahead of need (the pool's bound too)."""
        sha = await git("rev-parse", "--verify", f"{base}^{{commit}}", cwd=self.repo)
        await self.pool.warm(sha, count)

    async def aclose(self) -> None:
        """End every actor kept for reuse now, and those in use as they are given back."""
        await self.pool.aclose()

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


async def _lost_under(actor: Any, node: str, killed: WorkspaceError) -> WorkspaceError:
    """What a `setup:` killed by SIGKILL on `node` is: a `NodeLost` when its actor is gone
    too, or does not answer (the node was lost under the setup: its processes die in some
    order, and the setup's reply can come back before the actor's death), else `killed`
    as it is (the OOM killer, say). `bench_cluster --kills 20` failed a run so, its
    subtask's setup on the dying node 'failed (exit -9)'."""
    try:
        with anyio.fail_after(ROOM_TIMEOUT_S):
            await _await(actor.ready.remote(), node=node, during="cloning")
    except NodeLost as lost:
        return lost
    except TimeoutError:
        if node:
            note_lost(node)
        where = f"cluster node {node[:12]}" if node else "the workspace's cluster node"
        return NodeLost(
            f"{where} was lost during cloning (its setup killed, then no answer)",
            node=node,
            during="cloning",
        )
    return killed


async def _lost_where_placed(actor: Any, lost: NodeLost) -> NodeLost:
    """`lost` (an actor lost while being placed) naming the node Ray had placed it on, as
    its actor table says, and that node noted lost (`note_lost`); as it is when Ray had
    placed it nowhere yet. Never the node asked for: a soft affinity spills elsewhere when
    that one looks full, and a head blamed so for its actor's spill to a dying node was
    passed over for `LOST_FOR_S` with its idle actors set aside holding its CPUs
    (`bench_cluster --kills 8`: the run after one that blamed the head waited for room for
    ever)."""
    from ray._private import state

    actor_id = actor._actor_id.hex()
    info: dict[str, Any] = {}
    with anyio.move_on_after(ROOM_TIMEOUT_S), contextlib.suppress(Exception):
        info = await _off_loop(lambda: dict(state.actors(actor_id)))
    node = str(info.get("Address", {}).get("NodeID", ""))
    if set(node) <= {"f"} or set(node) <= {"0"}:  # '' or Ray's nil id: placed nowhere
        return lost
    note_lost(node)
    message = str(lost).replace("the workspace's cluster node", f"cluster node {node[:12]}", 1)
    return NodeLost(message, node=node, during=lost.during)


async def _off_loop(call: Callable[[], _T]) -> _T:
    """`call()` in a daemon thread of its own, abandoned when cancelled. For Ray's calls to
    its GCS, which take no timeout: one in flight when the head is lost waits 60 s, and in
    an anyio worker thread (not a daemon) it would hold this process's exit as long, after
    the run had ended `interrupted`."""
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []

    def work() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:
            outcome.append((False, exc))
        with contextlib.suppress(Exception):  # the caller's loop has ended: nobody waits
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=work, name="swarm-ray-gcs", daemon=True).start()
    await done.wait()
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(_T, value)


def _available_per_node() -> dict[str, dict[str, float]]:
    """Each live node's free resources by node id (Ray's own per-node view; else the
    cluster's sum, as if one node)."""
    ray = ray_module()
    try:
        from ray._private import state

        per_node: Any = state.available_resources_per_node
    except (ImportError, AttributeError):
        return {"": ray.available_resources()}
    return dict(per_node())


def kill_actor(actor: Any) -> None:
    """End the actor at once; its node (thought lost) is asked nothing."""
    ray_module().kill(actor, no_restart=True)


async def end_actor(actor: Any) -> None:
    """Remove the actor's clone, then end it; bounded, and done when cancelled too (an
    actor whose node was lost has nothing to remove)."""
    with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
        with contextlib.suppress(Exception):
            await _await(actor.close.remote())
    ray_module().kill(actor, no_restart=True)
