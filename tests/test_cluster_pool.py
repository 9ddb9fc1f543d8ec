"""The cluster's actor pool's rules (hand-over, reuse, bounds, ending) on an in-memory
cluster: its `Lifecycle` is the seam (a Ray cluster gives Ray's; these tests give a cluster
of `capacity` actors whose starts the test can hold back). The real thing on a local Ray
cluster is in test_cluster.py."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from swarm._cluster._bundle import make_bundle
from swarm._cluster.actor_pool import ActorPool, Held, Lifecycle
from swarm._cluster.node import NodeInfo
from swarm._cluster.remote import note_lost


class Cluster:
    """`capacity` actors at most; a start waits for `opened`, and for ever when full."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.live: list[str] = []
        self.made = 0
        self.ended: list[str] = []
        self.abandoned: list[str] = []
        """Ended at once, their node thought lost."""
        self.withdrawn = 0
        self.opened = anyio.Event()
        """Set: starts no longer wait (the slow start of an actor that has room)."""

    async def start(self, name: str) -> tuple[str, None]:
        try:
            if len(self.live) >= self.capacity:  # the pool never frees room: full for good
                await anyio.sleep_forever()
            await self.opened.wait()
        except anyio.get_cancelled_exc_class():
            self.withdrawn += 1
            raise
        self.made += 1
        actor = f"a{self.made}"
        self.live.append(actor)
        return actor, None

    async def room(self) -> bool:
        return len(self.live) < self.capacity

    async def ready(self, held: Held, sha: str) -> None:
        held.info = NodeInfo("host", "node", f"/clone/{held.actor}")
        held.have = sha

    async def end(self, actor: str) -> None:
        self.live.remove(actor)
        self.ended.append(actor)

    def pool(self) -> ActorPool:
        return ActorPool(Lifecycle(self.start, self.room, self.ready, self.end, self.abandon))

    def abandon(self, actor: str) -> None:
        self.live.remove(actor)
        self.abandoned.append(actor)


async def _subtask(
    pool: ActorPool, got: dict[str, str], name: str, hold: anyio.Event | None
) -> None:
    """A subtask holding its actor until `hold` is set; `got` says which actor it had."""
    async with pool.lease("c1", name) as held:
        got[name] = held.actor
        if hold is not None:
            await hold.wait()


Subtask = Callable[[str, anyio.Event | None], Coroutine[Any, Any, None]]


def _running(capacity: int) -> tuple[Cluster, ActorPool, dict[str, str], Subtask]:
    """A cluster with room for `capacity` actors, its pool, and subtasks on it."""
    cluster = Cluster(capacity=capacity)
    cluster.opened.set()
    pool = cluster.pool()
    got: dict[str, str] = {}
    return cluster, pool, got, partial(_subtask, pool, got)


async def test_on_a_full_cluster_a_finished_actor_goes_to_the_waiting_subtask() -> None:
    cluster, pool, got, subtask = _running(1)

    first_done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(subtask, "s1", first_done)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(subtask, "s2", None)  # no room: waits
        await anyio.wait_all_tasks_blocked()
        assert "s2" not in got
        first_done.set()
    assert got == {"s1": "a1", "s2": "a1"}
    assert cluster.withdrawn == 1 and (pool.started, pool.reused) == (1, 1)
    await pool.aclose()
    assert cluster.ended == ["a1"] and not cluster.live


async def test_with_room_the_waiter_gets_its_own_actor_and_the_finished_one_waits() -> None:
    """Handing the finished actor over would keep the run at one actor: the waiter's own
    comes up, and the next subtask takes the idle one."""
    cluster, pool, got, subtask = _running(4)

    first_done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(subtask, "s1", first_done)
        await anyio.wait_all_tasks_blocked()
        cluster.opened = anyio.Event()  # the next start is slow
        tg.start_soon(subtask, "s2", None)
        await anyio.wait_all_tasks_blocked()
        first_done.set()
        await anyio.wait_all_tasks_blocked()
        async with pool.lease("c2", "s3") as held:  # takes s1's idle actor at once
            got["s3"] = held.actor
        assert "s2" not in got  # and s2 still waits for its own
        cluster.opened.set()
    assert got == {"s1": "a1", "s3": "a1", "s2": "a2"} and cluster.withdrawn == 0
    await pool.aclose()
    assert sorted(cluster.ended) == ["a1", "a2"]


async def test_an_actor_whose_call_failed_is_ended_and_never_reused() -> None:
    cluster = Cluster(capacity=2)
    cluster.opened.set()
    pool = cluster.pool()
    async with pool.lease("c1", "s1") as held:
        held.reusable = False  # what RayWorkspaces copies from a call cut short
    async with pool.lease("c1", "s2") as again:
        assert again.actor == "a2"
    assert cluster.ended == ["a1"] and pool.dropped == 1


async def test_the_pool_keeps_no_more_actors_than_agents_and_ends_them_all() -> None:
    cluster = Cluster(capacity=4)
    cluster.opened.set()
    pool = cluster.pool()
    await pool.warm("c1", 2)  # the run's agents: 2
    assert cluster.live == ["a1", "a2"]
    release = anyio.Event()

    async def subtask(name: str) -> None:
        async with pool.lease("c2", name):
            await release.wait()

    async with anyio.create_task_group() as tg:
        for name in ("s1", "s2", "s3"):  # one more than the agents (a planner, say)
            tg.start_soon(subtask, name)
        await anyio.wait_all_tasks_blocked()
        assert len(cluster.live) == 3
        release.set()
    assert len(cluster.live) == 2 and pool.reused == 0
    async with pool.lease("c3", "s4"):
        await pool.aclose()  # ends the idle one now, this one when given back
        assert len(cluster.live) == 1
    assert not cluster.live


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout


async def test_bundles_of_one_commit_made_at_once_are_all_whole(tmp_path: Path) -> None:
    """Actors reset to the same base at once each get their bundle (a run of 300 subtasks
    on two nodes lost 4 subtasks when they shared one temporary ref)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for n in range(2):
        (repo / "a.py").write_text(f"A = {n}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"c{n}")
    first, head = _git(repo, "rev-list", "--reverse", "HEAD").split()
    bundles: list[bytes] = []

    async def one() -> None:
        bundles.append(await make_bundle(repo, head, "r1", since=first))

    async with anyio.create_task_group() as tg:
        for _ in range(40):
            tg.start_soon(one)
    assert len(bundles) == 40 and all(b.startswith(b"# v2 git bundle") for b in bundles)
    assert not _git(repo, "for-each-ref", "refs/swarm-bundle")  # none left behind


async def test_an_idle_actor_on_a_node_seen_lost_is_not_handed_out_and_is_abandoned() -> None:
    cluster, pool, _, _ = _running(capacity=3)
    async with pool.lease("c1", "s1") as held:
        held.info = NodeInfo("host", "node-lost-in-this-test", "/clone/a1")
    note_lost("node-lost-in-this-test")
    async with pool.lease("c1", "s1") as again:  # started again after losing that node
        assert again.actor == "a2"
        assert cluster.abandoned == ["a1"]  # at once, not at the run's end
    await pool.aclose()
    assert cluster.ended == ["a2"] and not cluster.live


async def test_idle_actors_on_a_node_seen_lost_that_is_alive_free_its_room() -> None:
    """The hang of `bench_cluster --kills 8`: the head, alive, was taken for lost (blamed
    for an actor spilled to the dying node); its idle actors were kept aside until the
    run's end, holding all its room, and the next subtask waited for room for ever."""
    cluster, pool, _, _ = _running(capacity=2)
    hold = anyio.Event()

    async def subtask(name: str) -> None:
        async with pool.lease("c1", name) as held:
            held.info = NodeInfo("host", "alive-but-seen-lost-in-this-test", "/clone")
            await hold.wait()

    async with anyio.create_task_group() as tg:
        for name in ("s1", "s2"):
            tg.start_soon(subtask, name)
        await anyio.wait_all_tasks_blocked()
        hold.set()
    assert len(cluster.live) == 2 and pool.dropped == 0  # both idle: the cluster is full
    note_lost("alive-but-seen-lost-in-this-test")
    with anyio.fail_after(5):  # the cluster's starts wait for ever when full
        async with pool.lease("c2", "s3") as held:
            assert held.actor == "a3"
    assert sorted(cluster.abandoned) == ["a1", "a2"]
    await pool.aclose()
