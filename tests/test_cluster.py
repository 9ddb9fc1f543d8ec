"""Workspaces on a real local Ray cluster: a head and a second node on 127.0.0.1, started
once for the session (`ray_cluster`: `ray start --block`, each in its own process group,
stopped at the end), with distinct custom resources. Skipped when ray is not installed."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._analysis import summarize
from swarm._analysis.loader import load_trace
from swarm._sandbox import bwrap_problem, make_sandbox
from swarm._tracing import semconv as sc
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.config import ClusterConfig
from swarm.errors import NodeLost, ToolError, WorkspaceError
from swarm.messages import ChatRequest
from swarm.run._check import Checker
from swarm.run._environment import CheckEnvironment
from swarm.run._merge import MergeQueue, MergeResult, QueueSettings
from swarm.run._seams import Seams
from swarm.run._solve import solve
from swarm.run._workspace import Workspace
from swarm.testing import FunctionModel, Scripted, ScriptedSource, call
from tests.test_merge_queue import BATCHES, CHECK, make_repo, merge_all, patch_setting
from tests.test_solve import edit, request, subtask, write_plan
from tests.trace_spans import attr
from tests.trace_spans import spans as trace_spans

ray = pytest.importorskip("ray")

from swarm._cluster import (  # noqa: E402
    RayCluster,
    RayWorkspaces,
    RemoteWorkspace,
    WorkspaceNode,
    remote_tools,
)
from swarm._cluster._bundle import make_bundle  # noqa: E402
from swarm._cluster.local import (  # noqa: E402
    LocalCluster,
    NodeSpec,
    add_node,
    stop_node,
    wait_for_nodes,
)
from swarm._cluster.loopback import LOOPBACK_ENV, off_loopback, off_loopback_entry  # noqa: E402


@pytest.fixture
def running(ray_cluster: LocalCluster) -> LocalCluster:
    return ray_cluster


@pytest.fixture
def cluster(running: LocalCluster) -> str:
    """The running cluster's address, once no earlier test's actor holds a CPU on it (Ray's
    view of free CPUs follows the nodes' periodic reports: placement reads that view)."""
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources().get("CPU", 0):
        if time.monotonic() > deadline:
            raise TimeoutError("an earlier test's actors still hold CPUs after 30 s")
        time.sleep(0.1)
    return running.address


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "a.py").write_text("def one():\n    return 1\n")
    (repo / "b.py").write_text("def two():\n    return 2\n")
    (repo / "pkg" / "c.py").write_text("VALUE = 3\n")
    (repo / "check.py").write_text(
        "import a, b\nassert a.one() == 1, 'one is wrong'\nassert b.two() == 2\nprint('ok')\n"
    )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    return repo


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "a.py"}),
    ("list_dir", {"path": "."}),
    ("write_file", {"path": "new/d.py", "content": "D = 4\n"}),
    ("edit_file", {"path": "a.py", "old": "return 1", "new": "return 11"}),
    ("edit_file", {"path": "a.py", "old": "missing", "new": "x"}),
    ("read_file", {"path": "../outside.txt"}),
    ("search", {"pattern": "VALUE"}),
    ("run", {"command": "python -c 'import a; print(a.one())'; ls new"}),
    ("run_tests", {}),
    ("git_diff", {}),
]


async def _results(tools: dict[str, Any], ctx: ToolContext) -> list[str]:
    out = []
    for name, args in CALLS:
        try:
            out.append(await tools[name].run(args, ctx))
        except ToolError as exc:
            out.append(f"ToolError: {exc}")
    return out


async def test_tool_results_on_a_node_equal_local_ones(cluster: str, repo: Path) -> None:
    environment = CheckEnvironment.resolve(repo)
    local_tools = {t.name: t for t in coding_tools()}
    base = git(repo, "rev-parse", "HEAD")
    async with RayCluster.open(ClusterConfig(kind="ray", address=cluster)) as rc:
        remote = {t.name: t for t in remote_tools(coding_tools(), rc.remotes)}
        workspaces = RayWorkspaces(rc, repo, "t1", environment)
        async with (
            workspaces.open(base, "w1") as ws,
            Workspace.open(repo, base=base, name="w1", run_id="t1") as local,
        ):
            assert not ws.path.exists()  # a name here; the clone is on the node
            here = environment.context(
                local.path, check="python check.py", timeout_s=30, written=local.written
            )
            there = environment.context(ws.path, check="python check.py", timeout_s=30)
            assert isinstance(ws, RemoteWorkspace)
            remotely = [r.replace(ws.info.path, "<ws>") for r in await _results(remote, there)]
            locally = await _results(local_tools, here)
            assert remotely == [r.replace(str(local.path), "<ws>") for r in locally]
            assert await ws.patch() == await local.patch()
    assert "new" not in os.listdir(repo)


async def test_a_full_cluster_makes_workspaces_wait(cluster: str, repo: Path) -> None:
    """Each asks for 3 of the second node's 4 `second` units: one fits at a time, so the
    other waits for room, and is given the first one's actor when it finishes (its own
    request to Ray withdrawn: the idle actor would hold the room forever)."""
    base = git(repo, "rev-parse", "HEAD")
    config = ClusterConfig(kind="ray", address=cluster, cpus_per_workspace=0.1)
    events: list[tuple[str, str]] = []
    async with RayCluster.open(config.model_copy(update={"resources": {"second": 3}})) as rc:
        workspaces = RayWorkspaces(rc, repo, "t2", CheckEnvironment.resolve(repo))

        async def use(name: str) -> None:
            async with workspaces.open(base, name) as ws:
                assert isinstance(ws, RemoteWorkspace)
                events.append(("open", ws.info.node))
                await anyio.sleep(0.3)
                events.append(("close", ws.info.node))

        async with anyio.create_task_group() as tg:
            tg.start_soon(use, "x1")
            tg.start_soon(use, "x2")
        await workspaces.aclose()
    second = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("second"))
    assert [kind for kind, _ in events] == ["open", "close", "open", "close"]
    assert {node for _, node in events} == {second}
    assert (workspaces.pool.started, workspaces.pool.reused) == (1, 1)


RED_PATCH = """--- a/a.py
+++ b/a.py
@@ -1,2 +1,2 @@
 def one():
-    return 1
+    return 5
"""


async def test_checks_run_on_the_node_and_are_judged_here(cluster: str, repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    async with RayCluster.open(ClusterConfig(kind="ray", address=cluster)) as rc:
        environment = CheckEnvironment.resolve(repo)
        checker = Checker(environment, timeout_s=30, place=rc.place)
        workspaces = RayWorkspaces(rc, repo, "t3", environment)
        async with workspaces.open(base, "c1") as ws:
            green = await checker(ws.path, "python check.py", key="k1")
            await ws.apply(RED_PATCH)
            red = await checker(ws.path, "python check.py")
            again = await checker(ws.path, "python check.py", key="k1")
            await ws.apply(RED_PATCH, reverse=True)
            back = await checker(ws.path, "python check.py")
    assert green.passed and "ok" in green.output
    assert not red.passed and "one is wrong" in red.output
    assert again.reused and again.passed
    assert back.passed and not back.reused


NET = "python -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)'"


@pytest.mark.skipif(bwrap_problem() is not None, reason="bubblewrap cannot run here")
async def test_the_nodes_sandbox_confines_commands(
    cluster: str, repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    environment = CheckEnvironment.resolve(repo, sandbox=make_sandbox(kind="bwrap"))
    base = git(repo, "rev-parse", "HEAD")
    async with RayCluster.open(ClusterConfig(kind="ray", address=cluster)) as rc:
        tools = {t.name: t for t in remote_tools(coding_tools(), rc.remotes)}
        async with RayWorkspaces(rc, repo, "t4", environment).open(base, "s1") as ws:
            ctx = environment.context(ws.path, timeout_s=30)
            out = await tools["run"].run({"command": f"echo x > {outside}; echo done"}, ctx)
            net = await tools["run"].run({"command": NET}, ctx)
    assert "done" in out and not outside.exists()
    assert "exit code" in net.lower() or "error" in net.lower()


FINISH = call("finish", summary="ok")


class _Together:
    """Coders that edit only once every one has started (so each holds a workspace at
    the same time: two actors, spread over the nodes), then finish."""

    def __init__(self, edits: dict[str, Scripted]) -> None:
        self.edits = edits
        self.started: set[str] = set()
        self.all_started = anyio.Event()

    async def __call__(self, request: ChatRequest) -> Scripted:
        subtask = str(request.metadata.get("subtask"))
        if any(m.role == "tool" for m in request.messages):
            return call("finish", summary="ok")
        self.started.add(subtask)
        if self.started >= set(self.edits):
            self.all_started.set()
        with anyio.fail_after(300):
            await self.all_started.wait()
        return self.edits[subtask]


async def test_a_plan_runs_on_both_nodes_and_merges_green(
    cluster: str, repo: Path, tmp_path: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    coders = _Together(
        {
            "s1": edit("a.py", "def one():", "def one() -> int:"),
            "s2": edit("b.py", "def two():", "def two() -> int:"),
        }
    )
    scripts = ScriptedSource({}, default=FunctionModel(coders))
    req = request(tmp_path, repo, plan, max_agents=2, cluster=cluster)
    report = await solve(req, source=scripts, cluster=RayCluster.open)
    assert report.status == "done", report
    assert {s.id: s.status for s in report.subtasks} == {"s1": "merged", "s2": "merged"}
    assert "def one() -> int:" in git(repo, "show", f"{report.branch}:a.py")
    assert "def two() -> int:" in git(repo, "show", f"{report.branch}:b.py")
    found = trace_spans(Path(str(report.trace)))
    tools = [s for s in found if s["name"] == "execute_tool edit_file"]
    assert len(tools) == 2 and all(attr(s, "host.name") for s in tools)
    assert len({attr(s, "swarm.node.id") for s in tools}) == 2  # SPREAD: one per node
    remote = [s for s in found if s["name"].startswith("swarm.remote ")]
    assert {"swarm.remote edit_file", "swarm.remote check", "swarm.remote patch"} <= {
        s["name"] for s in remote
    }
    assert all(
        attr(s, "swarm.remote.duration_s") is not None for s in remote if "check" in s["name"]
    )
    assert any(s["name"] == "swarm.wait cluster" for s in found)
    split = summarize(load_trace(Path(str(report.trace))))["remote"]  # trace summary's
    assert split["by_call"]["edit_file"]["timed"] == 2
    assert 0 < split["total"]["command_s"] <= split["total"]["round_trip_s"]


async def test_a_lost_node_is_a_workspace_error_saying_so(
    running: LocalCluster, repo: Path
) -> None:
    """An idle actor whose node died fails the next lease as a `NodeLost` naming the node
    (the coordinator notes it and starts the subtask again) and is not kept; the next lease
    starts a new one on a node with room; one lost in use is a `NodeLost` too."""
    doomed = add_node(running, NodeSpec(1, {"doomed": 1}))
    await anyio.to_thread.run_sync(wait_for_nodes, ray, 3)
    base = git(repo, "rev-parse", "HEAD")
    config = ClusterConfig(kind="ray", address=running.address, resources={"doomed": 1})
    environment = CheckEnvironment.resolve(repo)
    async with RayCluster.open(config) as rc:
        tools = {t.name: t for t in remote_tools(coding_tools(), rc.remotes)}
        workspaces = RayWorkspaces(rc, repo, "t6", environment)
        async with workspaces.open(base, "d0") as ws:
            assert isinstance(ws, RemoteWorkspace)
            first = ws.info.node
        await anyio.to_thread.run_sync(stop_node, doomed)  # its actor idle in the pool
        doomed = add_node(running, NodeSpec(1, {"doomed": 1}))
        with pytest.raises(NodeLost) as idle:  # the subtask's to note and start again
            async with workspaces.open(base, "d1"):
                pass
        assert idle.value.node == first and idle.value.during == "cloning"
        async with workspaces.open(base, "d1") as ws:
            assert isinstance(ws, RemoteWorkspace) and ws.info.node != first
            ctx = environment.context(ws.path, timeout_s=30)
            assert "def one" in await tools["read_file"].run({"path": "a.py"}, ctx)
            await anyio.to_thread.run_sync(stop_node, doomed)
            with pytest.raises(WorkspaceError) as lost:
                await tools["read_file"].run({"path": "a.py"}, ctx)
        pool = workspaces.pool
        assert (pool.started, pool.reused, pool.dropped) == (2, 0, 2)
        await workspaces.aclose()
    assert lost.value.node_lost


def _ended(actor: Any) -> bool:
    """Whether `actor` ends (`ray.kill` takes effect a little after it returns)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.2)
    return False


async def test_a_finished_workspace_is_reset_for_the_next(cluster: str, repo: Path) -> None:
    """The next subtask gets the finished one's actor, its clone reset to the new base:
    sent only the commit it lacks, nothing of the last subtask's work left; `aclose` ends
    the actor."""
    base = git(repo, "rev-parse", "HEAD")
    environment = CheckEnvironment.resolve(repo)
    async with RayCluster.open(ClusterConfig(kind="ray", address=cluster)) as rc:
        tools = {t.name: t for t in remote_tools(coding_tools(), rc.remotes)}
        workspaces = RayWorkspaces(rc, repo, "t7", environment)
        async with workspaces.open(base, "r1") as ws:
            ctx = environment.context(ws.path, timeout_s=30)
            await tools["write_file"].run({"path": "junk/x.py", "content": "X = 1\n"}, ctx)
            edit = {"path": "a.py", "old": "return 1", "new": "return 7"}
            await tools["edit_file"].run(edit, ctx)
            assert isinstance(ws, RemoteWorkspace)
            actor = ws.actor
        (repo / "b.py").write_text("def two():\n    return 22\n")
        git(repo, "commit", "-qam", "next")
        async with workspaces.open("HEAD", "r2") as ws:
            assert isinstance(ws, RemoteWorkspace) and ws.actor is actor
            ctx = environment.context(ws.path, timeout_s=30)
            listing = await tools["list_dir"].run({"path": "."}, ctx)
            a_py = await tools["read_file"].run({"path": "a.py"}, ctx)
            b_py = await tools["read_file"].run({"path": "b.py"}, ctx)
            assert await ws.patch() == ""
        await workspaces.aclose()
        assert await anyio.to_thread.run_sync(_ended, actor)  # by aclose
    assert "junk" not in listing and "return 1" in a_py and "return 22" in b_py
    assert (workspaces.pool.started, workspaces.pool.reused) == (1, 1)
    whole = len(
        subprocess.run(
            ["git", "bundle", "create", "-", "--all"], cwd=repo, capture_output=True, check=True
        ).stdout
    )
    assert len(workspaces.shipped) == 1 and 0 < workspaces.shipped[0] < whole


async def test_the_merge_queues_batch_checks_run_on_the_nodes(
    cluster: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    """A wave of patches (one of them red) through the real merge queue, its checks on
    the nodes: the same verdicts and the same final tree as the local queue's."""
    local, remote = make_repo(tmp_path / "local"), make_repo(tmp_path / "remote")
    values = {"a": 2, "b": 2, "c": 13, "d": 2, "e": 2}
    here = await merge_all(local, values)
    spans.clear()  # the local queue's
    patches = {n: await patch_setting(remote, n, v) for n, v in values.items()}
    environment = CheckEnvironment.resolve(remote, python=sys.executable)
    async with RayCluster.open(ClusterConfig(kind="ray", address=cluster)) as rc:
        rc.seams(Seams(environment=environment), repo=remote, run_id="r1")
        assert rc.remotes.commits is not None
        node_checks = rc.remotes.commits.__self__  # type: ignore[attr-defined]
        checker = Checker(environment, timeout_s=60, max_concurrent=2, place=rc.place)
        settings = QueueSettings(checker, batch_check=CHECK, config=BATCHES)
        results: dict[str, MergeResult] = {}
        async with MergeQueue.open(remote, run_id="r1", base="main", settings=settings) as q:

            async def merge(order: int, name: str) -> None:
                results[name] = await q.merge(name, name, patches[name], check=CHECK, order=order)

            async with anyio.create_task_group() as tg:
                for order, name in enumerate(patches):
                    tg.start_soon(merge, order, name)
            rebuilds = q.stats.rebuilds
    assert {n: r.kind for n, r in results.items()} == here.kinds()
    assert results["c"].kind == "red" and "unlucky modules: ['c']" in results["c"].output
    assert git(remote, "rev-parse", "swarm/r1^{tree}") == here.tree
    finished = spans.get_finished_spans()
    checks = [s for s in finished if s.name == "execute_tool run_tests"]
    assert checks and all((s.attributes or {}).get(sc.HOST_NAME) for s in checks)
    assert [s for s in finished if s.name == "swarm.remote check"]
    # a check actor per check at once: the line's two, and the red batch's split beside
    # it, which checks `a` and [a b] at once (twice the line's width: one more), then
    # one more for each check a rebuild cancelled (never used again); a reused one is
    # sent only what it lacks
    nodes = node_checks.nodes
    assert 1 <= len(nodes) <= 2 + 1 + rebuilds
    shipped = [n for node in nodes for n in node.shipped[1:]]
    whole = await make_bundle(remote, git(remote, "rev-parse", "swarm/r1"), "r1")
    assert shipped and max(shipped) < len(whole)  # never the whole history again
    with pytest.raises(ray.exceptions.RayActorError):  # ended with the connection
        ray.get(nodes[0].ws.actor.pid.remote(), timeout=30)


def _journal(cwd: Path, query: str) -> list[tuple[Any, ...]]:
    path = cwd / ".swarm" / "journal.db"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute(query).fetchall()
    except sqlite3.OperationalError:  # its tables not made yet
        return []
    finally:
        db.close()


def _wait_for_a_merge(cwd: Path, proc: subprocess.Popen[bytes]) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if merged := _journal(cwd, "SELECT subtask_id FROM subtasks WHERE status = 'merged'"):
            return merged
        time.sleep(0.1)
    return []


def test_a_killed_driver_resumes_and_merges_every_subtask_once(
    running: LocalCluster, tmp_path: Path
) -> None:
    """kill -9 a real `swarm solve --cluster` once some subtasks merged and others not (its
    actors end with it), then `swarm resume --cluster`: the remote work restarts, and every
    subtask of the plan lands exactly once."""
    from benchmarks.bench_resume import SIM, TASK
    from benchmarks.bench_resume import _env as bench_env

    def _env() -> dict[str, str]:  # the drivers keep Ray on 127.0.0.1 too
        return {**bench_env(), **LOOPBACK_ENV}

    cwd = tmp_path / "run"
    cwd.mkdir()
    (cwd / "swarm.toml").write_text(SIM.replace("0.02", "0.2"))
    swarm = [sys.executable, "-m", "swarm"]
    where = ["--cluster", running.address, "--max-agents", "2", "--quiet"]
    proc = subprocess.Popen(
        [*swarm, "solve", str(TASK), *where], cwd=cwd, env=_env(), stderr=subprocess.PIPE
    )
    try:
        merged = _wait_for_a_merge(cwd, proc)
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert proc.returncode == -9, err.decode()[-2000:]  # killed mid-run, not finished
    ((run_id, plan_json),) = _journal(cwd, "SELECT run_id, plan_json FROM plans")
    ids = [s["id"] for s in json.loads(plan_json)["subtasks"]]
    assert 1 <= len(merged) < len(ids)
    done = subprocess.run(
        [*swarm, "resume", run_id, *where, "--json"],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = json.loads(done.stdout or "{}")
    assert report.get("status") == "done", done.stderr[-3000:]
    assert {s["id"]: s["status"] for s in report["subtasks"]} == dict.fromkeys(ids, "merged")
    (repo,) = (cwd / ".swarm" / "demo").glob("*")
    subjects = git(repo, "log", "--format=%s", f"swarm/{run_id}").splitlines()
    landed = [s.split(":")[1].strip() for s in subjects if s.startswith("swarm: ")]
    assert sorted(landed) == sorted(ids)  # every subtask once, none twice


def test_every_socket_of_the_cluster_and_its_driver_is_on_loopback(
    running: LocalCluster,
) -> None:
    """Ray puts its nodes on the machine's interface address even when told 127.0.0.1
    (`swarm._cluster.loopback`): none of the nodes' processes (GCS, raylets, agents,
    workers) nor this driver holds a socket anywhere else, after a call on each node."""
    environment = CheckEnvironment.resolve(Path.cwd())
    actors = [
        ray.remote(WorkspaceNode)
        .options(num_cpus=0, resources={which: 0.01})
        .remote(environment, "sockets", which)
        for which in ("head", "second")
    ]
    workers = ray.get([a.pid.remote() for a in actors], timeout=60)
    assert len(set(workers)) == 2
    pids = [os.getpid(), *(p.pid for p in running.processes), *workers]
    try:
        assert off_loopback(pids) == []
    finally:
        for actor in actors:
            ray.kill(actor)


def test_the_socket_check_sees_any_address_but_127_0_0_1() -> None:
    lines = {  # /proc/net/tcp{,6} and udp: sl local remote state ... inode
        "tcp 0100007F:1F90 0100007F:A1B2 01": None,  # 127.0.0.1 both ends
        "tcp 0100007F:1F90 00000000:0000 0A": None,  # listening on 127.0.0.1
        "tcp 00000000:1F90 00000000:0000 0A": "tcp 0.0.0.0:8080 -> 0.0.0.0:0",
        "tcp 020200C0:1F90 020200C0:A1B2 01": "tcp 192.0.2.2:8080 -> 192.0.2.2:41394",
        "tcp6 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:A1B2 01": None,
        "tcp6 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A": (
            "tcp6 :::8080 -> :::0"
        ),
        "udp 0100007F:0035 08080808:0035 01": "udp 127.0.0.1:53 -> 8.8.8.8:53",
        "udp 00000000:0000 00000000:0000 07": None,  # made, never bound
    }
    for entry, expected in lines.items():
        table, fields = entry.split(" ", 1)
        line = f"0: {fields} 0 0 0 0 0 1234"
        assert off_loopback_entry(table, line) == expected, entry
