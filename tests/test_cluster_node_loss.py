"""A cluster node lost under running subtasks, on a real local Ray cluster (the session's
`ray_cluster`, plus a node of the test's own that it kills as a machine is lost): each
subtask starts again from its base on a live node, the run goes on and ends done, and the
report and the trace say which node was lost doing what.

The doomed node has a `TMPDIR` of its own, so its workspaces' clones are told apart by
their paths: the repository's scripts hold there (a tool call, a check, a `setup:`) and
nowhere else, so a subtask started again on a live node never holds, whatever node Ray
picks. The moment to kill is found by polling, never by sleeping: every hold running in a
process of the doomed node while Ray still sees the node alive."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from swarm._tracing import semconv as sc
from swarm.messages import ChatRequest
from swarm.model import Model
from swarm.run._solve import solve
from swarm.testing import FunctionModel, Scripted, call
from tests.mounts import mounted_under
from tests.test_cluster import git
from tests.test_solve import request, subtask, write_plan, write_task
from tests.trace_spans import spans as trace_spans

ray = pytest.importorskip("ray")

from swarm._cluster import RayCluster, WorkspaceNode  # noqa: E402
from swarm._cluster.local import (  # noqa: E402
    LocalCluster,
    NodeSpec,
    add_node,
    kill_node,
    stop_node,
    wait_for_nodes,
)
from swarm._cluster.loopback import descendants, off_loopback  # noqa: E402
from swarm._cluster.node import sweep_dead_clones  # noqa: E402

DOOMED = "swarm-doomed"
"""In the doomed node's TMPDIR: where its clones are."""
HOLDS = {"tool": "sleep 431", "check": "sleep 432", "cloning": "sleep 434"}
"""What holds each moment on the doomed node (commands no other test runs)."""
SCRIPTS = {
    # s1's coder runs it first: a tool call held on the doomed node
    "hold.sh": f'case "$PWD" in *{DOOMED}*) exec {HOLDS["tool"]};; esac\n',
    # the check: held where s2's coder left s2.txt
    "check.sh": f'case "$PWD" in *{DOOMED}*) [ -e s2.txt ] && exec {HOLDS["check"]};; esac\n'
    "exit 0\n",
    # setup: held in a clone at a base where s0 merged (s3's)
    "setup.sh": f'case "$PWD" in *{DOOMED}*) [ -e s0.txt ] && exec {HOLDS["cloning"]};; esac\n'
    "exit 0\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name, text in SCRIPTS.items():
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    return repo


class _Coders:
    """The run's model source: each subtask's coder writes `<id>.txt` and finishes; s1's
    first runs `hold.sh`. Keeps every agent id it was asked for."""

    def __init__(self) -> None:
        self.agents: list[str] = []

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        self.agents.append(agent_id)
        sub = agent_id.split(":")[1]

        def reply(request: ChatRequest) -> Scripted:
            turns = sum(m.role == "tool" for m in request.messages)
            steps = [call("write_file", path=f"{sub}.txt", content=f"{agent_id}\n")]
            if sub == "s1":
                steps.insert(0, call("run", command="sh hold.sh"))
            return steps[turns] if turns < len(steps) else call("finish", summary="ok")

        return FunctionModel(reply, name=agent_id)


def _holding(node: subprocess.Popen[bytes], node_id: str) -> set[str]:
    """The holds running in a process of `node`, while Ray sees it alive (else none)."""
    if not any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
        return set()
    found = set()
    for pid in descendants([node.pid]):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        except OSError:
            continue
        found |= {moment for moment, hold in HOLDS.items() if cmdline == hold.encode()}
    return found


def _placeable(node_id: str) -> None:
    """Wait until Ray's per-node view, which placement reads, shows room for the run's four
    workspaces on the node."""
    from ray._private import state

    deadline = time.monotonic() + 60
    while (view := state.available_resources_per_node()).get(node_id, {}).get("CPU", 0) < 4:  # type: ignore[no-untyped-call]
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ray's view never showed the new node's CPUs free: {view}")
        time.sleep(0.05)  # polling


def _kill_when_all_hold(node: subprocess.Popen[bytes], node_id: str, seen: set[str]) -> None:
    deadline = time.monotonic() + 120
    while (found := _holding(node, node_id)) != set(HOLDS):
        seen |= found
        if time.monotonic() > deadline or node.poll() is not None:
            raise TimeoutError(f"only {sorted(seen)} held on the doomed node")
        time.sleep(0.05)  # polling
    seen |= found
    kill_node(node)


async def test_a_node_lost_mid_subtask_restarts_each_of_its_subtasks_on_a_live_node(
    ray_cluster: LocalCluster, repo: Path, tmp_path: Path
) -> None:
    tmp = Path(f"/tmp/{DOOMED}-{tmp_path.name}")  # short: Ray's socket paths live here too
    tmp.mkdir(exist_ok=True)
    try:
        # the most free CPUs of any node: the run's workspaces go there first
        doomed = add_node(ray_cluster, NodeSpec(8, {"doomed": 1}, env={"TMPDIR": str(tmp)}))
        await anyio.to_thread.run_sync(wait_for_nodes, ray, 3)
        doomed_id = next(
            n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("doomed")
        )
        await anyio.to_thread.run_sync(_placeable, doomed_id)
        plan = write_plan(
            tmp_path,
            [
                subtask("s0", ["s0.txt"]),
                subtask("s1", ["s1.txt"]),
                subtask("s2", ["s2.txt"]),
                subtask("s3", ["s3.txt"], deps=["s0"]),
            ],
        )
        task = write_task(tmp_path, check="sh check.sh", extra="setup: sh setup.sh\n")
        req = request(tmp_path, repo, plan, task=task, max_agents=4, cluster=ray_cluster.address)
        coders, seen = _Coders(), set[str]()
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _kill_when_all_hold, doomed, doomed_id, seen)
            report = await solve(req, source=coders, cluster=RayCluster.open)
    finally:  # the node's TMPDIR goes with the test, its clones first (see below)
        await anyio.to_thread.run_sync(sweep_dead_clones, tmp)
        left = mounted_under(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    assert left == []
    assert report.status == "done", report
    lost = {s.id: s.nodes_lost for s in report.subtasks}
    assert all(s.status == "merged" for s in report.subtasks), report.subtasks
    assert seen == set(HOLDS)
    # s1's `run` and s2's check may come back killed (exit -9) before Ray reports the node
    # dead: the loss is then seen at the next tool call, `write_file` (its own, or a
    # fixer's after the killed check failed); the subtask restarts all the same
    ways = {
        "s1": ("a tool call (",),
        "s2": ("a check at ", "a tool call ("),
        "s3": ("cloning at ",),
    }
    for sub, during in ways.items():
        assert len(lost[sub]) == 1, lost
        said = f"node {doomed_id[:12]} lost during "
        assert lost[sub][0].startswith(tuple(said + way for way in during)), lost
        assert f"coder:{sub}:node1" in coders.agents  # asked anew, not replayed
    assert lost["s0"] == []
    tree = git(repo, "ls-tree", "--name-only", str(report.branch)).split()
    assert sorted(tree) == sorted([*SCRIPTS, "s0.txt", "s1.txt", "s2.txt", "s3.txt"])
    events = [e for s in trace_spans(Path(str(report.trace))) for e in s.get("events", [])]
    assert [e["name"] for e in events].count(sc.NODE_LOST_EVENT) == 3


LOST_AT_PATCH = "swarm-lost-at-patch"
"""In the TMPDIR of the node lost while returning a patch (no script holds there)."""
PATCH_HELD = "patch-held"


class _PatchHeldThere(WorkspaceNode):
    """A workspace actor that, on the node whose TMPDIR names `LOST_AT_PATCH`, says in a
    file there that it is returning a patch, and holds: the test kills the node then."""

    async def patch(self) -> str:
        here = Path(tempfile.gettempdir())
        if LOST_AT_PATCH in here.name:
            (here / PATCH_HELD).write_text(self.name)
            await anyio.sleep_forever()
        return await super().patch()


# the actors unpickle it by value: the workers cannot import this test module by name
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _kill_when_a_patch_holds(
    cluster: LocalCluster, node: subprocess.Popen[bytes], node_id: str, held: Path
) -> list[str]:
    """Kill `node` once a patch holds there; the sockets off 127.0.0.1 of this driver and
    every node's processes just before (none, on a loopback cluster)."""
    deadline = time.monotonic() + 120
    while not (held.exists() and any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())):
        if time.monotonic() > deadline or node.poll() is not None:
            raise TimeoutError("no patch held on the doomed node")
        time.sleep(0.05)  # polling
    off = off_loopback([os.getpid(), *(p.pid for p in cluster.processes)])
    kill_node(node)
    return off


async def test_a_node_lost_while_returning_a_patch_restarts_the_subtask_merged_once(
    ray_cluster: LocalCluster, repo: Path, tmp_path: Path
) -> None:
    # fresh (a marker left by an earlier session would kill at once), short (Ray's sockets)
    tmp = Path(tempfile.mkdtemp(prefix=f"{LOST_AT_PATCH}-", dir="/tmp"))
    doomed = add_node(ray_cluster, NodeSpec(8, {"doomed": 1}, env={"TMPDIR": str(tmp)}))
    try:
        await anyio.to_thread.run_sync(wait_for_nodes, ray, 3)
        doomed_id = next(
            n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("doomed")
        )
        await anyio.to_thread.run_sync(_placeable, doomed_id)
        plan = write_plan(tmp_path, [subtask("s0", ["s0.txt"]), subtask("s2", ["s2.txt"])])
        task = write_task(tmp_path, check="sh check.sh")
        req = request(tmp_path, repo, plan, task=task, max_agents=2, cluster=ray_cluster.address)
        coders = _Coders()
        opener = partial(RayCluster.open, node_class=_PatchHeldThere)
        off: list[str] = []

        async def kill() -> None:
            held = tmp / PATCH_HELD
            args = (ray_cluster, doomed, doomed_id, held)
            off.extend(await anyio.to_thread.run_sync(_kill_when_a_patch_holds, *args))

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill)
            report = await solve(req, source=coders, cluster=opener)
        off += off_loopback([os.getpid(), *(p.pid for p in ray_cluster.processes)])
    finally:
        await anyio.to_thread.run_sync(stop_node, doomed)
        # the node's TMPDIR goes with the test: first its clones, as a cluster's end sweeps
        # them (removing the directory took the owner files a sweep reads, and the mounted
        # clone's files, but left it mounted)
        await anyio.to_thread.run_sync(sweep_dead_clones, tmp)
        left = mounted_under(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    assert left == []
    assert off == []  # every socket of the driver and the nodes on 127.0.0.1
    assert report.status == "done", report
    assert all(s.status == "merged" for s in report.subtasks), report.subtasks
    lost = [said for s in report.subtasks for said in s.nodes_lost]
    assert any(
        said.startswith(f"node {doomed_id[:12]} lost during returning the patch at ")
        for said in lost
    ), lost
    for sub in ("s0", "s2"):  # merged once: one commit adds its file
        assert (
            len(
                git(
                    repo, "log", "--format=%H", f"main..{report.branch}", "--", f"{sub}.txt"
                ).split()
            )
            == 1
        )
    tree = git(repo, "ls-tree", "--name-only", str(report.branch)).split()
    assert sorted(tree) == sorted([*SCRIPTS, "s0.txt", "s2.txt"])
