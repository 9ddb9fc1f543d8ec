"""Node 2 of a real 2-node loopback Ray cluster killed during a run, again and again: the
`--kills N` mode of `bench_cluster`.

One cluster for the whole benchmark: a head (2 CPUs) and node 2 (8 CPUs: the most free,
so the run's workspaces go there first), started again after each kill. A run without
kills comes first (the baseline tree); then one run per kill, its moment drawn with the
seed from `MOMENTS`. Each node 2 has a `TMPDIR` naming the moment it is to die at, so the
repository's scripts (the same in every run: the same tree) hold at that moment on that
node only, and a subtask started again on the head never holds. The moment is found by
polling, never by sleeping: the hold running in a process of node 2 while Ray sees the
node alive, or (`placing`) a workspace actor of the run alive on node 2 in Ray's actor
table, or (`patch`) the file a workspace actor on node 2 writes as it holds while
returning its patch (`PatchHeld`: what every run's actors run). Then node 2 is killed as
a machine is lost (SIGKILL to all its processes).

Per run: done, every subtask merged once (one commit adding its file on the run's
branch), the same tree as the baseline, the report's `nodes_lost` (and how many of them
blame the head, which is never lost here), and the sockets of the driver and the cluster
off 127.0.0.1 (snapshots at the kill and at the run's end).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from swarm._cluster import RayCluster, WorkspaceNode
from swarm._cluster.local import LocalCluster, NodeSpec, add_node, kill_node, stop_node
from swarm._cluster.loopback import descendants, off_loopback
from swarm.messages import ChatRequest
from swarm.model import Model
from swarm.run._report import RunReport
from swarm.run._solve import SolveRequest, solve
from swarm.testing import FunctionModel, Scripted, call

__all__ = ["MOMENTS", "PatchHeld", "kill_runs"]

DOOMED = "swarm-kill"
HOLDS = {"tool": "sleep 441", "check": "sleep 442", "cloning": "sleep 444"}
"""What holds each moment on node 2 (commands nothing else runs)."""
PATCH_HELD = "patch-held"
MOMENTS = ("placing", *HOLDS, "patch")
SUBTASKS = {"s0": [], "s1": [], "s2": [], "s3": ["s0"]}
"""s1's coder runs hold.sh (a tool call); s2's check holds; s3's setup holds (its base
has s0.txt): each at its moment only, and on node 2 only."""
SCRIPTS = {
    "hold.sh": f'case "$PWD" in *{DOOMED}-tool-*) exec {HOLDS["tool"]};; esac\n',
    "check.sh": f'case "$PWD" in *{DOOMED}-check-*) [ -e s2.txt ] && exec {HOLDS["check"]};; '
    "esac\nexit 0\n",
    "setup.sh": f'case "$PWD" in *{DOOMED}-cloning-*) [ -e s0.txt ] && '
    f"exec {HOLDS['cloning']};; esac\nexit 0\n",
}
RUN_TIMEOUT_S = 300.0
NODE_CPUS = 8


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout


def _repo(where: Path) -> Path:
    repo = where / "repo"
    repo.mkdir(parents=True)
    for name, text in SCRIPTS.items():
        (repo / name).write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        _git(repo, *args)
    return repo


def _request(where: Path, repo: Path, address: str) -> SolveRequest:
    task = where / "task.md"
    task.write_text("---\ncheck: sh check.sh\nsetup: sh setup.sh\n---\n# Files\n\nAdd them.\n")
    plan = where / "plan.json"
    subtasks = [
        {"id": s, "title": f"do {s}", "instructions": f"do {s}", "files": [f"{s}.txt"]}
        | {"depends_on": deps}
        for s, deps in SUBTASKS.items()
    ]
    plan.write_text(json.dumps({"subtasks": subtasks}))
    return SolveRequest(
        task_path=str(task),
        repo=str(repo),
        plan_path=str(plan),
        state_dir=str(where / "state"),
        traces_dir=str(where / "traces"),
        quiet=True,
        max_agents=4,
        cluster=address,
    )


class _Coders:
    """Each subtask's coder writes `<id>.txt` (the same text on every attempt) and
    finishes; s1's runs `sh hold.sh` first."""

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        sub = agent_id.split(":")[1]

        def reply(request: ChatRequest) -> Scripted:
            turns = sum(m.role == "tool" for m in request.messages)
            steps = [call("write_file", path=f"{sub}.txt", content=f"{sub}\n")]
            if sub == "s1":
                steps.insert(0, call("run", command="sh hold.sh"))
            return steps[turns] if turns < len(steps) else call("finish", summary="ok")

        return FunctionModel(reply, name=agent_id)


class PatchHeld(WorkspaceNode):
    """A workspace actor that, on a node 2 doomed at `patch`, writes `PATCH_HELD` in its
    TMPDIR as it returns a patch, and holds there (the kill comes)."""

    async def patch(self) -> str:
        here = Path(tempfile.gettempdir())
        if here.name.startswith(f"{DOOMED}-patch-"):
            (here / PATCH_HELD).write_text(self.name)
            await anyio.sleep_forever()
        return await super().patch()


@dataclass
class _Node2:
    proc: subprocess.Popen[bytes]
    node_id: str
    tmp: Path


def _alive(ray: Any, node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


def _start_node2(ray: Any, cluster: LocalCluster, tmp: Path) -> _Node2:
    """A fresh node 2 whose clones are under `tmp`, once Ray's per-node view (what
    placement reads) shows its CPUs free."""
    from ray._private import state

    tmp.mkdir(parents=True, exist_ok=True)
    known = {n["NodeID"] for n in ray.nodes()}
    proc = add_node(cluster, NodeSpec(NODE_CPUS, env={"TMPDIR": str(tmp)}))
    deadline = time.monotonic() + 120
    while True:
        fresh = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in known]
        view = state.available_resources_per_node()  # type: ignore[no-untyped-call]
        if fresh and view.get(fresh[0], {}).get("CPU", 0) >= NODE_CPUS:
            return _Node2(proc, fresh[0], tmp)
        if time.monotonic() > deadline or proc.poll() is not None:
            raise TimeoutError(f"node 2 never came up free: {view}")
        time.sleep(0.1)  # polling Ray's view


def _at_moment(ray: Any, node: _Node2, moment: str) -> bool:
    """Whether node 2, alive in Ray's view, is at `moment` now."""
    if not _alive(ray, node.node_id):
        return False
    if moment == "patch":
        return (node.tmp / PATCH_HELD).exists()
    if moment == "placing":
        from ray._private import state

        return any(
            a["State"] == "ALIVE"
            and a["Address"]["NodeID"] == node.node_id
            and a["ActorClassName"].endswith(("WorkspaceNode", PatchHeld.__name__))
            for a in state.actors().values()
        )
    hold = HOLDS[moment].encode()
    for pid in descendants([node.proc.pid]):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        except OSError:
            continue
        if cmdline == hold:
            return True
    return False


def _pids(cluster: LocalCluster) -> list[int]:
    """This driver's and every node's process (their descendants are searched too)."""
    return [os.getpid(), *(p.pid for p in cluster.processes if p.poll() is None)]


def _tree_figures(repo: Path, report: RunReport) -> dict[str, Any]:
    if report.branch is None:
        return {"tree": None, "merged_once": False, "commits_per_subtask": {}}
    commits = {
        s: len(_git(repo, "log", "--format=%H", f"main..{report.branch}", "--", f"{s}.txt").split())
        for s in SUBTASKS
    }
    merged = all(s.status == "merged" for s in report.subtasks)
    return {
        "tree": _git(repo, "rev-parse", f"{report.branch}^{{tree}}").strip(),
        "merged_once": merged and all(n == 1 for n in commits.values()),
        "commits_per_subtask": commits,
    }


async def _one_run(
    ray: Any, cluster: LocalCluster, where: Path, node: _Node2, moment: str | None
) -> dict[str, Any]:
    repo = _repo(where)
    found: dict[str, Any] = {"moment": moment, "killed": False, "sockets_off_loopback": []}
    t0 = time.monotonic()

    async def kill_at_moment() -> None:
        assert moment is not None
        while not await anyio.to_thread.run_sync(_at_moment, ray, node, moment):
            if node.proc.poll() is not None:
                return
            await anyio.sleep(0.05)  # polling
        found["sockets_off_loopback"] += off_loopback(_pids(cluster))
        await anyio.to_thread.run_sync(kill_node, node.proc)
        found["killed"] = True
        found["killed_at_s"] = round(time.monotonic() - t0, 1)

    report: RunReport | None = None
    with anyio.move_on_after(RUN_TIMEOUT_S):
        async with anyio.create_task_group() as tg:
            if moment is not None:
                tg.start_soon(kill_at_moment)
            report = await solve(
                _request(where, repo, cluster.address),
                source=_Coders(),
                cluster=partial(RayCluster.open, node_class=PatchHeld),
            )
            tg.cancel_scope.cancel()
    found["sockets_off_loopback"] += off_loopback(_pids(cluster))
    if report is None:  # a hang: said, its trace kept, and the next run goes on
        return {
            **found,
            "status": "hung",
            "done": False,
            "error": f"not over in {RUN_TIMEOUT_S:.0f} s",
            "wall_s": round(time.monotonic() - t0, 1),
            "nodes_lost": {},
            "not_merged": {},
            "tree": None,
            "merged_once": False,
            "commits_per_subtask": {},
            "kept": _keep(where),
        }
    return {
        **found,
        "status": report.status,
        "done": report.status == "done",
        "error": report.error,
        "wall_s": round(time.monotonic() - t0, 1),
        "nodes_lost": {s.id: s.nodes_lost for s in report.subtasks if s.nodes_lost},
        "not_merged": {
            s.id: f"{s.status}: {s.error}" for s in report.subtasks if s.status != "merged"
        },
        **_tree_figures(repo, report),
        **({} if report.status == "done" else {"kept": _keep(where)}),
    }


def _keep(where: Path) -> str:
    """A run's traces and state copied where they outlive the benchmark (to see why)."""
    kept = Path(tempfile.mkdtemp(prefix="bench-cluster-kills-"))
    for part in ("traces", "state"):
        if (where / part).exists():
            shutil.copytree(where / part, kept / part)
    return str(kept)


async def kill_runs(
    ray: Any, cluster: LocalCluster, tmp: Path, kills: int, seed: int
) -> dict[str, Any]:
    """The baseline run, then `kills` runs each killing node 2 at a seeded moment."""
    rng = random.Random(seed)
    moments = [MOMENTS[i % len(MOMENTS)] for i in range(kills)]
    rng.shuffle(moments)
    head = next(n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"])
    node = await anyio.to_thread.run_sync(_start_node2, ray, cluster, tmp / f"{DOOMED}-none-0")
    baseline = await _one_run(ray, cluster, tmp / "run0", node, None)
    runs = []
    for i, moment in enumerate(moments, 1):
        if node.proc.poll() is None:  # the last run's moment never came (or the baseline)
            await anyio.to_thread.run_sync(stop_node, node.proc)
        fresh = tmp / f"{DOOMED}-{moment}-{i}"
        node = await anyio.to_thread.run_sync(_start_node2, ray, cluster, fresh)
        run = await _one_run(ray, cluster, tmp / f"run{i}", node, moment)
        run["same_tree"] = run["tree"] is not None and run["tree"] == baseline["tree"]
        run["head_blamed"] = sum(  # the head is never lost here: a loss naming it is wrong
            f"node {head[:12]} " in said for losses in run["nodes_lost"].values() for said in losses
        )
        runs.append(run)
        print(f"kill run {i}: {json.dumps(run)}", file=sys.stderr, flush=True)  # progress
    return {"seed": seed, "baseline": baseline, "runs": runs, "totals": _totals(runs)}


def _totals(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "killed": sum(r["killed"] for r in runs),
        "done": sum(r["done"] for r in runs),
        "merged_once": sum(r["merged_once"] for r in runs),
        "same_tree": sum(r["same_tree"] for r in runs),
        "nodes_lost": sum(len(v) for r in runs for v in r["nodes_lost"].values()),
        "head_blamed": sum(r["head_blamed"] for r in runs),
        "sockets_off_loopback": sum(len(r["sockets_off_loopback"]) for r in runs),
        "by_moment": {m: sum(r["killed"] for r in runs if r["moment"] == m) for m in MOMENTS},
    }
