"""A 300-subtask `swarm solve` on the simulator: the merge queue and the coordinator's CPU.

Builds a repository of N small modules and a plan of N subtasks (each edits one module,
every tenth depends on the one before it), then runs the real `solve()` — worktrees,
checks, merge queue, journal, tracing, router — with a simulated speed-tier model that
edits the module and finishes. The check takes `--check-s` seconds (a sleep: the cores
are not the limit, so the check slots are set to the number of agents).

With `--red-pct P`, P % of the subtasks add an assertion about the next module's value:
green on their own base, red once the next subtask has landed (or that one red once they
have): the merge queue must find the culprit, whose rebase fixer removes the assertion.
Such a run also reports `bound_with_fixes_s`: the bound with what each culprit's fix
costs whatever the queue (see `lower_bound`).

With `--compare` the same workload runs twice in one process: the batched, speculative
queue (`[merge]` defaults, `--max-parallel-checks`) and the one-at-a-time queue
(`batch_size = {max = 1}`, `max_parallel_checks = 1`). Each reports makespan, the
critical-path lower bound (see `lower_bound`: coding and its own check in the agents'
waves, one merge check per link of a dependency chain, the baseline and the final
accept), their ratio, merge checks run and the coordinator's CPU per model call. The bound
assumes the cores never run out; `cpu_floor_s` is the other floor: the CPU the machine
used during the run (`machine_cpu_s`, read from /proc/stat: run it on a quiet machine)
spread over every core. The coordinator's children (`children_cpu_s`) miss the sandboxed
checks: bubblewrap's process namespace keeps their CPU time from reaching us.

With `--cluster-nodes 1,2` the workload runs on local Ray clusters (this machine, loopback)
of each node count, `--cpus-per-node` CPUs each: every workspace reserves one CPU, so one
node holds one agent at a time per CPU; `--cpu-check` makes the check spin `--check-s`
seconds of CPU time (CPU-bound) instead of sleeping. Each cluster run also reports its own
costs from its trace (`bench_cluster.run_figures`: waits for room, workspace actors new and
reused, the remote calls' overhead).

    python -m benchmarks.bench_solve [--subtasks 300] [--max-agents 100] [--check-s 1]
        [--red-pct 5] [--compare] [--cpu-check] [--first-failure] [--cluster-nodes 1,2]
        [--traces DIR] [--json]
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

from swarm import Router, load_config
from swarm.messages import ChatRequest
from swarm.model import Model
from swarm.providers.sim import Reply, SimProvider
from swarm.run._solve import SolveRequest, solve
from swarm.testing import call

CHECK = """\
import os, sys, time
FIRST = "first" in sys.argv[2:]
if "cpu" in sys.argv[2:]:  # CPU-bound: spin for that much of this process's CPU time
    end = time.process_time() + float(sys.argv[1])
    while time.process_time() < end:
        pass
else:
    time.sleep(float(sys.argv[1]))
# run every module that holds more than its `VALUE = n` line (a red one's assertion); the
# stdlib's cheapest calls, since this runs 300 times on two cores (pathlib and compiling
# all 300 modules made it 43 ms of CPU, 15 ms now). Like pytest, it runs them all and
# prints each failure's traceback (`--first` stops at the first, like `pytest -x`).
failed = 0
for name in sorted(os.listdir(".")):
    if name.startswith("m") and name.endswith(".py"):
        with open(name, "rb") as module:
            text = module.read()
        if text.count(b"\\n") > 1:
            try:
                exec(compile(text, name, "exec"), {"__name__": "m"})
            except Exception:
                if FIRST:
                    raise
                import traceback
                traceback.print_exc()
                failed += 1
sys.exit(1 if failed else 0)
"""


@dataclass(frozen=True)
class Workload:
    subtasks: int = 300
    max_agents: int = 100
    check_s: float = 0.0
    red_every: int = 0
    """Every `red_every`-th subtask (0: none) makes a patch red once its neighbour lands."""
    profile: str = "cerebras/llama-3.3-70b"
    merge: str = ""
    """The `[merge]` section's body."""
    cpu_check: bool = False
    """The check spins `check_s` of CPU time instead of sleeping."""
    first_failure: bool = False
    """The check stops at its first failure (like `pytest -x`): its output names one."""
    cluster: str | None = None
    """A Ray cluster's address: workspaces, tools and checks there (`--cluster-nodes`)."""
    traces: str = ""
    """Where to keep the run's trace ('': thrown away with the repository)."""


def make_repo(root: Path, n: int) -> None:
    root.mkdir()
    for i in range(n):
        (root / f"m{i:04d}.py").write_text("VALUE = 0\n")
    (root / "check.py").write_text(CHECK)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(
            ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=root, check=True
        )


def plan(n: int) -> dict[str, Any]:
    subtasks = []
    for i in range(n):
        deps = [f"s{i - 1:04d}"] if i % 10 == 9 else []
        subtasks.append(
            {
                "id": f"s{i:04d}",
                "title": f"module {i}",
                "instructions": "bump",
                "files": [f"m{i:04d}.py"],
                "depends_on": deps,
            }
        )
    return {"subtasks": subtasks}


def _assertion(i: int) -> str:
    """The line a red subtask adds: true on its base, false once module i+1 is bumped."""
    return f"import importlib; assert importlib.import_module('m{i + 1:04d}').VALUE == 0\n"


class Player:
    """The simulated model: a coder bumps its module; a fixer removes a stale assertion."""

    def __init__(self, red_every: int) -> None:
        self.red_every = red_every

    def red(self, i: int) -> bool:
        return bool(self.red_every) and i % self.red_every == self.red_every // 2

    def __call__(self, request: ChatRequest) -> Reply:
        subtask = str(request.metadata.get("subtask", "s0000"))
        tools = [m for m in request.messages if m.role == "tool"]
        if not subtask[1:].isdigit():  # the final verification's fixer: nothing to do
            return Reply(tool_calls=[call("finish", summary="nothing to fix")])
        i = int(subtask[1:])
        if request.metadata.get("role") == "fixer":
            # the stale assertion is in this module, or in the one before (landed first)
            stale = [j for j in (i, i - 1) if j >= 0 and self.red(j)]
            if len(tools) < len(stale):
                j = stale[len(tools)]
                fix = call("edit_file", path=_m(j), old=_assertion(j), new="")
                return Reply(tool_calls=[fix])
            return Reply(tool_calls=[call("finish", summary="fixed")])
        if not tools:
            new = "VALUE = 1\n" + (_assertion(i) if self.red(i) else "")
            edit = call("edit_file", path=_m(i), old="VALUE = 0\n", new=new)
            return Reply(text="Bumping.", tool_calls=[edit])
        return Reply(text="Done.", tool_calls=[call("finish", summary="bumped")])


def _m(i: int) -> str:
    return f"m{i:04d}.py"


class Source:
    def __init__(self, router: Router) -> None:
        self.router = router

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        return self.router.model("speed", role=role)


async def run(w: Workload, on_trace: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """One solve of the workload (`on_trace`: `solve`'s, to follow the run's trace)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root / "repo", w.subtasks)
        (root / "plan.json").write_text(json.dumps(plan(w.subtasks)))
        # the repository has no venv of its own: name the interpreter
        (root / "task.md").write_text(
            f"---\ncheck: python check.py {w.check_s}{' cpu' if w.cpu_check else ''}"
            f"{' first' if w.first_failure else ''}\n"
            f"python: {sys.executable}\n"
            "---\n# Bump\n\nBump all.\n"
        )
        (root / "swarm.toml").write_text(
            f'[providers.sim]\nkind = "sim"\n[tiers.speed]\nmodels = ["sim/{w.profile}"]\n'
            f"[merge]\n{w.merge}\n"
        )
        sim = SimProvider(script=Player(w.red_every))
        async with Router(load_config(root / "swarm.toml", env={}), providers={"sim": sim}) as r:
            request = SolveRequest(
                task_path=str(root / "task.md"),
                repo=str(root / "repo"),
                plan_path=str(root / "plan.json"),
                config_path=str(root / "swarm.toml"),
                max_agents=w.max_agents,
                state_dir=str(root / "state"),
                traces_dir=w.traces or str(root / "traces"),
                quiet=True,
                cluster=w.cluster,
            )
            children, machine = _children_cpu_s(), _machine_busy_s()
            report = await solve(
                request, source=Source(r), cluster=_open_cluster, on_trace=on_trace
            )
            children, machine = _children_cpu_s() - children, _machine_busy_s() - machine
        on_cluster = _cluster_figures(report.trace, w) if w.cluster and report.trace else {}
    o, m = report.overhead, report.merge
    coding_s = report.time_by_phase.get("coder", 0.0) / max(1, w.subtasks)
    bound = lower_bound(w, coding_s)
    rebases = sum(s.rebases for s in report.subtasks)
    fixing = report.time_by_phase.get("fixer", 0.0) / rebases if rebases else None
    red_bound = lower_bound(w, coding_s, fixing) if w.red_every else None
    return {
        "subtasks": w.subtasks,
        "merged": report.count("merged"),
        "status": report.status,
        "max_agents": w.max_agents,
        "check_s": w.check_s,
        "merge": w.merge.replace("\n", "; "),
        "wall_s": report.wall_s,
        "bound_s": round(bound, 2),
        "wall_over_bound": round(report.wall_s / bound, 2) if bound else None,
        **(
            {
                "bound_with_fixes_s": round(red_bound, 2),
                "wall_over_bound_with_fixes": round(report.wall_s / red_bound, 2),
            }
            if red_bound
            else {}
        ),
        "coding_s_per_subtask": round(coding_s, 3),
        "merge_checks_run": m.checks_run if m else None,
        "merge_checks_per_subtask": round(m.checks_run / w.subtasks, 3) if m else None,
        "batches": m.batches if m else None,
        "splits": m.splits if m else None,
        "rebuilds": m.rebuilds if m else None,
        "rebases": rebases,
        "calls": report.calls,
        "coordinator_cpu_s": o.cpu_s,
        "cpu_ms_per_call": o.cpu_ms_per_call,
        "children_cpu_s": round(children, 2),
        "machine_cpu_s": round(machine, 2),
        "cpu_floor_s": round(machine / (os.cpu_count() or 1), 2),
        "time_by_phase": report.time_by_phase,
        "spans_dropped": report.spans_dropped,
        "gc_threshold": list(gc.get_threshold()),
        **on_cluster,
    }


def _cluster_figures(trace: object, w: Workload) -> dict[str, Any]:
    from benchmarks.bench_cluster import run_figures

    return run_figures(Path(str(trace)), w.subtasks)


def _machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent busy (not idle, not waiting on I/O)
    since boot, from /proc/stat (0 where there is none)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    """CPU time of this process's finished children (git, sandboxed checks)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _open_cluster(config: Any) -> Any:
    from swarm._cluster import RayCluster

    return RayCluster.open(config)


def lower_bound(w: Workload, coding_s: float, fix_s: float | None = None) -> float:
    """The makespan if merging never made anyone wait: each subtask holds an agent for its
    coding and its own check, then lands after one merge check (holding no agent); a
    dependent starts once its dependency has landed; agents take the longest chain first.
    Plus the two checks every run makes alone: the baseline and the final accept.

    With `fix_s` (a red run's fixer time per rebase) each red pair's second patch also
    pays what no queue can skip: one check to find it red (its pair checked with and
    without it at once), its fixer, its own check again, and its merge check."""
    deps = {i: i - 1 for i in range(w.subtasks) if i % 10 == 9}
    chain = {i: 2 if (i + 1) in deps else 1 for i in range(w.subtasks)}
    ready = [(-chain[i], i) for i in range(w.subtasks) if i not in deps]
    heapq.heapify(ready)
    later: list[tuple[float, int]] = []  # (when it becomes ready, subtask)
    free = [0.0] * w.max_agents  # when each agent is free
    landed = 0.0
    ends: dict[int, float] = {}
    while ready or later:
        start = heapq.heappop(free)
        while later and (not ready or later[0][0] <= start):
            when, i = heapq.heappop(later)
            heapq.heappush(ready, (-chain[i], i))
            start = max(start, when) if len(ready) == 1 else start
        _, i = heapq.heappop(ready)
        end = ends[i] = start + coding_s + w.check_s
        heapq.heappush(free, end)
        landed = max(landed, end + w.check_s)
        if (i + 1) in deps:
            heapq.heappush(later, (end + w.check_s, i + 1))
    if fix_s is not None:
        player = Player(w.red_every)
        for i in range(w.subtasks - 1):
            if player.red(i):
                pair = max(ends[i], ends[i + 1])
                landed = max(landed, pair + 3 * w.check_s + fix_s)
    return landed + 2 * w.check_s


def on_clusters(w: Workload, counts: list[int], cpus: int) -> dict[str, Any]:
    """`w` on a local Ray cluster of each node count (`cpus` each, one workspace per CPU),
    one after the other in this run; the speedup of each over the first."""
    import logging

    import ray

    from swarm._cluster.local import NodeSpec, local_cluster, wait_for_nodes

    out: dict[str, Any] = {}
    for k in counts:
        with (
            tempfile.TemporaryDirectory() as logs,
            local_cluster([NodeSpec(cpus)] * k, Path(logs)) as c,
        ):
            ray.init(address=c.address, logging_level=logging.ERROR, log_to_driver=False)
            try:
                wait_for_nodes(ray, k)
                out[f"{k}_nodes"] = {
                    "nodes": k,
                    "cpus_per_node": cpus,
                    **anyio.run(run, replace(w, cluster=c.address)),
                }
            finally:
                ray.shutdown()
    first = out[f"{counts[0]}_nodes"]["wall_s"]
    for k in counts[1:]:
        out[f"speedup_{k}_over_{counts[0]}"] = round(first / out[f"{k}_nodes"]["wall_s"], 2)
    return out


def collector_as_in_swarm() -> AbstractContextManager[None]:
    """The garbage collector's thresholds `swarm solve` runs with (`swarm.cli`): this
    benchmark calls `solve` itself, and measured with Python's defaults the collector took
    0.18 s of a 4.1 s run's CPU (4 %), which the command does not pay."""
    from swarm.cli import _collector_for_swarms

    return _collector_for_swarms()


def _run_all(
    args: argparse.Namespace, queues: dict[str, str], red_every: int, results: dict[str, Any]
) -> None:
    for name, merge in queues.items():
        w = Workload(args.subtasks, args.max_agents, args.check_s, red_every, args.profile, merge)
        w = replace(
            w, cpu_check=args.cpu_check, first_failure=args.first_failure, traces=args.traces
        )
        if args.cluster_nodes:
            counts = [int(n) for n in args.cluster_nodes.split(",")]
            results.update(on_clusters(w, counts, args.cpus_per_node))
            return
        results[name] = anyio.run(run, w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subtasks", type=int, default=300)
    parser.add_argument("--max-agents", type=int, default=64)
    parser.add_argument("--profile", default="cerebras/llama-3.3-70b")
    parser.add_argument("--check-s", type=float, default=0.0, help="seconds a check takes")
    parser.add_argument("--red-pct", type=float, default=0.0, help="%% of patches red at merge")
    parser.add_argument("--max-parallel-checks", type=int, default=4)
    parser.add_argument("--compare", action="store_true", help="also the one-at-a-time queue")
    parser.add_argument("--traces", default="", help="keep the runs' traces in this folder")
    parser.add_argument("--cpu-check", action="store_true", help="the check spins its CPU time")
    parser.add_argument(
        "--first-failure", action="store_true", help="the check stops at its first failure"
    )
    parser.add_argument(
        "--cluster-nodes",
        help="run on local Ray clusters of these node counts (1,2), --cpus-per-node each",
    )
    parser.add_argument("--cpus-per-node", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    red_every = round(100 / args.red_pct) if args.red_pct else 0
    slots = f"check_slots = {args.max_agents}"
    queues = {"batched": f"{slots}\nmax_parallel_checks = {args.max_parallel_checks}"}
    if args.compare:
        queues["one_at_a_time"] = f"{slots}\nbatch_size = {{max = 1}}\nmax_parallel_checks = 1"
    results: dict[str, Any] = {}
    with collector_as_in_swarm():
        _run_all(args, queues, red_every, results)
    if "one_at_a_time" in results:
        results["speedup"] = round(
            results["one_at_a_time"]["wall_s"] / results["batched"]["wall_s"], 2
        )
    if args.json:
        print(json.dumps({"benchmark": "solve", **results}, indent=2))
        return
    for name, result in results.items():
        print(f"{name}: {result}" if not isinstance(result, dict) else f"== {name}")
        if isinstance(result, dict):
            for key, value in result.items():
                print(f"{key:>26}: {value}")


if __name__ == "__main__":
    main()
