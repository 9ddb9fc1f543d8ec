"""A 300-subtask `swarm solve` on the simulator: does the coordinator stay out of the way?

Builds a repository of N small modules and a plan of N subtasks (each edits one module,
every tenth depends on the one before it), then runs the real `solve()` — worktrees,
checks, merge queue, journal, tracing, router — with a simulated speed-tier model that
edits the module and finishes. Reports wall-clock, model time, the coordinator's own CPU
per model call, and where the time went.

    python -m benchmarks.bench_solve [--subtasks 300] [--max-agents 64] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from swarm import Router, load_config
from swarm.messages import ChatRequest
from swarm.model import Model
from swarm.providers.sim import Reply, SimProvider
from swarm.run.solve import SolveRequest, solve
from swarm.testing import call


def make_repo(root: Path, n: int) -> None:
    root.mkdir()
    for i in range(n):
        (root / f"m{i:04d}.py").write_text("VALUE = 0\n")
    (root / "check.py").write_text("import sys\nsys.exit(0)\n")
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


def play(request: ChatRequest) -> Reply:
    sub = request.metadata.get("subtask", "s0000")
    if not any(m.role == "tool" for m in request.messages):
        path = f"m{sub[1:]}.py"
        return Reply(
            text="Bumping.",
            tool_calls=[call("edit_file", path=path, old="VALUE = 0", new="VALUE = 1")],
        )
    return Reply(text="Done.", tool_calls=[call("finish", summary="bumped")])


class Source:
    def __init__(self, router: Router) -> None:
        self.router = router

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        return self.router.model("speed", role=role)


async def run(n: int, max_agents: int, profile: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_repo(root / "repo", n)
        (root / "plan.json").write_text(json.dumps(plan(n)))
        # the repository has no venv of its own: name the interpreter (as before this
        # option existed, when swarm's own was first on PATH) so runs stay comparable
        (root / "task.md").write_text(
            f"---\ncheck: python check.py\npython: {sys.executable}\n---\n# Bump\n\nBump all.\n"
        )
        (root / "swarm.toml").write_text(
            f'[providers.sim]\nkind = "sim"\n[tiers.speed]\nmodels = ["sim/{profile}"]\n'
        )
        sim = SimProvider(script=play)
        async with Router(load_config(root / "swarm.toml", env={}), providers={"sim": sim}) as r:
            request = SolveRequest(
                task_path=str(root / "task.md"),
                repo=str(root / "repo"),
                plan_path=str(root / "plan.json"),
                max_agents=max_agents,
                state_dir=str(root / "state"),
                traces_dir=str(root / "traces"),
                quiet=True,
            )
            report = await solve(request, source=Source(r))
    o = report.overhead
    return {
        "subtasks": n,
        "merged": report.count("merged"),
        "status": report.status,
        "max_agents": max_agents,
        "profile": profile,
        "wall_s": report.wall_s,
        "calls": report.calls,
        "model_s": o.model_s,
        "coordinator_cpu_s": o.cpu_s,
        "cpu_ms_per_call": o.cpu_ms_per_call,
        "cpu_vs_model": o.cpu_vs_model,
        "time_by_phase": report.time_by_phase,
        "spans_dropped": report.spans_dropped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subtasks", type=int, default=300)
    parser.add_argument("--max-agents", type=int, default=64)
    parser.add_argument("--profile", default="cerebras/llama-3.3-70b")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = anyio.run(run, args.subtasks, args.max_agents, args.profile)
    if args.json:
        print(json.dumps({"benchmark": "solve", **result}, indent=2))
        return
    for key, value in result.items():
        print(f"{key:>18}: {value}")


if __name__ == "__main__":
    main()
