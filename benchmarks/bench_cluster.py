"""Round-trip overhead of a tool call and of a check through Ray, against local, same run.

One workspace in a local git worktree and one on a local Ray node (a one-node cluster
this script starts on loopback, or `--address` of a running one); the same calls on both:
`read_file` (no subprocess), `run` of `true` (one sandboxed subprocess), and the check
`true`; and a bare call to the actor (Ray's own floor). Reported per call: wall median
and mean (ms), and the driver's CPU per call (ms: the coordinator's own cost, which bounds
how many remote agents one driver serves).
Overhead = remote - local. Goal: <= 5 ms per tool call.

    python -m benchmarks.bench_cluster [--calls 200] [--checks 20] [--address HOST:PORT] [--json]

`--kills N [--seed S]`: instead, node loss on a real 2-node loopback cluster (this script
starts it): a run without kills, then N runs each killing node 2 at a seeded moment
(`benchmarks/_cluster_kills.py`); per run and in total: done, every subtask merged once,
the same tree as without kills, the report's nodes_lost, sockets off 127.0.0.1.
Goal: every run done, merged once, same tree; no loss blamed on the head; no socket off
loopback.

    python -m benchmarks.bench_cluster --kills 20 [--seed 38] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio

from swarm._cluster import RayCluster, RayWorkspaces, remote_tools
from swarm._cluster.local import NodeSpec, local_cluster, wait_for_nodes
from swarm._cluster.loopback import off_loopback
from swarm._cluster.remote import _await
from swarm._sandbox import make_sandbox
from swarm.agent._tool import Tool, ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.config import ClusterConfig
from swarm.run._check import Checker
from swarm.run._environment import CheckEnvironment
from swarm.run._workspace import Workspace


def _repo(where: Path) -> Path:
    repo = where / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("".join(f"x{i} = {i}\n" for i in range(200)))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        cmd = ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args]
        subprocess.run(cmd, cwd=repo, check=True)
    return repo


async def _timed(n: int, call: Callable[[], Awaitable[Any]]) -> dict[str, float]:
    await call()  # warm: imports, the first worker thread
    walls = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        walls.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    return {
        "median_ms": statistics.median(walls) * 1000,
        "mean_ms": statistics.fmean(walls) * 1000,
        "driver_cpu_ms": cpu / n * 1000,
        "n": n,
    }


async def _side(tools: dict[str, Tool], ctx: ToolContext, checker: Checker, a: Args) -> Any:
    read = tools["read_file"]
    run = tools["run"]
    return {
        "read_file": await _timed(a.calls, lambda: read.run({"path": "a.py"}, ctx)),
        "run_true": await _timed(a.calls // 4, lambda: run.run({"command": "true"}, ctx)),
        "check_true": await _timed(a.checks, lambda: checker(ctx.root, "true")),
    }


class Args(argparse.Namespace):
    calls: int
    checks: int
    address: str | None
    json: bool
    kills: int
    seed: int


async def _measure(a: Args, repo: Path, address: str) -> dict[str, Any]:
    environment = CheckEnvironment.resolve(repo, sandbox=make_sandbox())
    base = (await anyio.run_process(["git", "rev-parse", "HEAD"], cwd=repo)).stdout.decode()
    base = base.strip()
    local_tools = {t.name: t for t in coding_tools()}
    async with RayCluster.open(ClusterConfig(kind="ray", address=address)) as rc:
        checker = Checker(environment, timeout_s=60, place=rc.place)
        remote = {t.name: t for t in remote_tools(coding_tools(), rc.remotes)}
        workspaces = RayWorkspaces(rc, repo, "bench", environment)
        async with (
            Workspace.open(repo, base=base, name="bench", run_id="bench") as here,
            workspaces.open(base, "bench") as there,
        ):
            local = await _side(
                local_tools, environment.context(here.path, timeout_s=60), checker, a
            )
            far = await _side(remote, environment.context(there.path, timeout_s=60), checker, a)
            ping = await _timed(a.calls, lambda: _await(there.actor.ready.remote()))  # type: ignore[attr-defined]
        await workspaces.aclose()
    overhead = {k: far[k]["median_ms"] - local[k]["median_ms"] for k in local}
    return {
        "sandbox": environment.sandbox.kind,
        "local": local,
        "ray": far,
        "overhead_median_ms": overhead,
        "bare_actor_call": ping,
        "goal_tool_call_ms": 5.0,
        "meets_goal": max(overhead["read_file"], overhead["run_true"]) <= 5.0,
    }


def run_figures(trace: Path, subtasks: int) -> dict[str, Any]:
    """A cluster run's own costs, from its trace: waits for room on the cluster (actor
    starts included), workspace actors started and reused, and the remote calls' overhead
    (round trip minus the command's time on the node); per subtask where it says so."""
    from swarm._analysis.loader import load_trace
    from swarm._analysis.remote import remote_split
    from swarm._tracing import semconv as sc

    tr = load_trace(trace)
    waits = {"subtasks": 0.0, "warm": 0.0, "checks": 0.0}
    opened = {"new": 0, "reused": 0}
    wait, opening = f"swarm.wait {sc.WAIT_CLUSTER}", f"{sc.WORKSPACE_SPAN} open"
    for i, name in enumerate(tr.name):
        if name not in (wait, opening):
            continue
        attrs = tr.attributes(i)
        who = str(attrs.get(sc.WORKSPACE_NAME, ""))
        kind = "warm" if who == "warm" else "checks" if who.startswith("_check") else "subtasks"
        if name == wait:
            waits[kind] += tr.duration_s(i)
        elif kind == "subtasks":
            opened["reused" if attrs.get(sc.WORKSPACE_REUSED) else "new"] += 1
    remote = (remote_split(tr) or {}).get("total", {})
    return {
        "wait_cluster_s": {k: round(v, 2) for k, v in waits.items()},
        "wait_cluster_s_per_subtask": round(waits["subtasks"] / subtasks, 3),
        "workspace_opens": opened,
        "remote_calls": remote.get("calls", 0),
        "remote_overhead_s": round(remote.get("overhead_s", 0.0), 2),
        "remote_overhead_ms_per_call": remote.get("overhead_ms_per_call", 0.0),
        "remote_overhead_s_per_subtask": round(remote.get("overhead_s", 0.0) / subtasks, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--checks", type=int, default=20)
    p.add_argument("--address", help="a running cluster (default: start a local one-node one)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--kills", type=int, default=0, help="node-loss runs instead (see above)")
    p.add_argument("--seed", type=int, default=38)
    a = p.parse_args(namespace=Args())
    if a.kills < 0:
        p.error(f"--kills must be 0 or more, not {a.kills}")
    import ray

    if a.kills and a.json:  # Ray prints a lost node's raylet dump to stdout: to stderr
        from swarm._commands._json_out import JsonOut

        with JsonOut() as out:
            _kills_main(ray, a)
            out.finish(0, None)
        return
    if a.kills:
        _kills_main(ray, a)
        return

    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        repo = _repo(Path(tmp))
        address = a.address
        if address is None:
            running = stack.enter_context(local_cluster([NodeSpec(1)], Path(tmp)))
            address = running.address
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        stack.callback(ray.shutdown)
        wait_for_nodes(ray, 1)
        result = anyio.run(_measure, a, repo, address)
        if a.address is None:  # the cluster it started: every socket on 127.0.0.1
            pids = [os.getpid(), *(p.pid for p in running.processes)]
            result["sockets_off_loopback"] = off_loopback(pids)
    if a.json:
        print(json.dumps(result, indent=2))
        return
    for what in result["local"]:
        lo, far = result["local"][what], result["ray"][what]
        print(
            f"{what:<11} local {lo['median_ms']:7.2f} ms  ray {far['median_ms']:7.2f} ms  "
            f"overhead {result['overhead_median_ms'][what]:6.2f} ms  "
            f"driver CPU {lo['driver_cpu_ms']:5.2f} / {far['driver_cpu_ms']:5.2f} ms"
        )
    bare = result["bare_actor_call"]
    print(f"bare actor call: {bare['median_ms']:.2f} ms, driver CPU {bare['driver_cpu_ms']:.2f} ms")
    print(f"goal <= 5 ms per tool call: {'met' if result['meets_goal'] else 'NOT met'}")


def _kills_main(ray: Any, a: Args) -> None:
    from benchmarks._cluster_kills import kill_runs

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp, ExitStack() as stack:
        running = stack.enter_context(local_cluster([NodeSpec(2)], Path(tmp)))
        ray.init(address=running.address, logging_level=logging.ERROR, log_to_driver=False)
        stack.callback(ray.shutdown)
        wait_for_nodes(ray, 1)
        result = anyio.run(kill_runs, ray, running, Path(tmp), a.kills, a.seed)
    totals = result["totals"]
    result["meets_goal"] = totals["sockets_off_loopback"] == totals["head_blamed"] == 0 and all(
        totals[k] == totals["runs"] for k in ("killed", "done", "merged_once", "same_tree")
    )
    if a.json:
        print(json.dumps(result, indent=2))
        return
    for i, r in enumerate(result["runs"], 1):
        lost = sum(len(v) for v in r["nodes_lost"].values())
        print(
            f"kill {i:>2} at {r['moment']:<8} killed={r['killed']!s:<5} {r['status']:<11} "
            f"merged once={r['merged_once']!s:<5} same tree={r['same_tree']!s:<5} "
            f"nodes lost={lost} off loopback={len(r['sockets_off_loopback'])} {r['wall_s']} s"
        )
    print(f"totals: {totals}")
    print(
        f"goal (every run killed, done, merged once, same tree; head never blamed; 0 off "
        "loopback): "
        f"{'met' if result['meets_goal'] else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
