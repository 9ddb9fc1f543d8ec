"""`swarm solve` on a real PyPI project at several agent counts: check runs, wall, its bound.

    python -m benchmarks.bench_solve_real [--project boltons==25.0.0] [--subtasks 24]
        [--agents 1,8] [--profile cerebras/llama-3.3-70b] [--repo-dir DIR] [--venv DIR]
        [--before] [--json]

The repository is the project's sdist made a git repository with a venv of its own
(`../shared/tools/real-repo`, run once when either is missing; boltons' conftest needs
pytest < 9). The task: make the package ruff-clean, in `--subtasks` subtasks of one or more
of its modules each (modules balanced by the size of their change); `check` is the
project's pytest suite, `accept` is ruff over the package, both with the venv's
interpreter. The changes are ruff's own: its safe fixes, then `--add-noqa` for the rest,
made once on a scratch copy and checked there (ruff clean, the suite green) before any run.

The coding policy is scripted and served over HTTP: swarm's simulator server
(`serve_sim`, on 127.0.0.1, an OpenAI-compatible endpoint with the latency of the catalog
profile `--profile`) plays every model. A coder is shown its files; it writes each one's
new text (`write_file`), then finishes. Every other agent finishes at once.

Each agent count runs on a fresh clone of the baseline, one after the other in one
process. Reported per run: status, subtasks merged, check runs (every check that ran, from
the trace's `run_tests` spans, by where: the baseline, the worktrees, the merge queue, the
final verification; a reused result runs nothing), how the worktree checks were scoped
(test impact: test files run of the suite's), whether ruff and the suite are green on the
branch (run again here, outside swarm), wall seconds, and the physical bound:

    bound = model time on the critical path + one check per tree on the cores + the final check

with the check's seconds (the whole suite) and the accept's (ruff) measured here, alone,
before the runs; the final check is the whole suite on the last tree and then the accept,
which every run must do after its last patch comes; and the model time from the run's own
report (the critical path of N independent subtasks at A agents holds ceil(N / A) of
them: that share of the model time). Then wall / bound and the
speedup over the first agent count. The machine's 1-minute load average is printed with
every run: the checks share its cores with whatever else runs on it. `--before` runs the
same work without test impact and without the queue's gathering, to compare.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from swarm._analysis.loader import load_trace
from swarm._tracing import semconv as sc
from swarm.messages import ChatRequest, ToolCall
from swarm.providers.sim._engine import SimEngine
from swarm.providers.sim._reply import Reply
from swarm.providers.sim._server import serve_sim
from swarm.run._report import RunReport
from swarm.run._solve import SolveRequest, solve

REAL_REPO = Path(__file__).resolve().parents[2] / "shared" / "tools" / "real-repo"
_SCOPE = re.compile(r"^Files in scope: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Bench:
    project: str = "boltons==25.0.0"
    package: str = "boltons"
    tests: str = "tests"
    subtasks: int = 24
    agents: tuple[int, ...] = (1, 8)
    profile: str = "cerebras/llama-3.3-70b"
    before: bool = False
    """Without test impact and without gathering (`impact: false`, `merge: {gather:
    false}`): every worktree runs the whole suite, the queue starts a batch whenever it can."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sh(
    command: list[str] | str, cwd: Path, *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, cwd=cwd, shell=isinstance(command, str), capture_output=True, text=True
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{command} in {cwd} exited {done.returncode}:\n{done.stdout[-2000:]}")
    return done


def git(repo: Path, *args: str) -> str:
    return sh(["git", "-c", "user.name=bench", "-c", "user.email=b@localhost", *args], repo).stdout


# -- the repository and the work ---------------------------------------------------------


def ensure_repo(bench: Bench, repo: Path, venv: Path) -> Path:
    """The venv's interpreter, after making the repository and venv if either is missing."""
    python = venv / "bin" / "python"
    if not (repo / ".git").is_dir() or not python.exists():
        log(f"making {repo} and {venv} from {bench.project}")
        subprocess.run(
            [str(REAL_REPO), bench.project, str(repo), str(venv), "pytest<9"],
            check=True,
            stdout=sys.stderr,
        )
    return python


def commands(bench: Bench, python: Path) -> tuple[str, str]:
    """The task's `check` (the suite) and `accept` (ruff over the package)."""
    py = shlex.quote(str(python))
    check = f"{py} -m pytest -q -p no:cacheprovider {bench.tests}"
    return check, f"{py} -m ruff check --no-cache {bench.package}"


def clone(repo: Path, dest: Path) -> Path:
    sh(["git", "clone", "-q", str(repo), str(dest)], repo.parent)
    shutil.copy(repo / ".git" / "info" / "exclude", dest / ".git" / "info" / "exclude")
    return dest


def ruff_changes(bench: Bench, repo: Path, python: Path, scratch: Path) -> dict[str, str]:
    """Each package file's ruff-clean text (safe fixes, then noqa for the rest), checked on
    a scratch copy: ruff clean and the suite green, or only noqa marks if the fixes broke it."""
    check, accept = commands(bench, python)
    ruff = [str(python), "-m", "ruff", "check", "--no-cache", bench.package]
    for fixes in (True, False):
        tree = clone(repo, scratch / ("fixed" if fixes else "marked"))
        if fixes:
            sh([*ruff, "--fix", "--exit-zero"], tree)
        sh([*ruff, "--add-noqa"], tree, check=False)
        sh([*ruff, "--add-noqa"], tree, check=False)  # a fix can move a finding
        changed = git(tree, "diff", "--name-only").split()
        if sh(accept, tree, check=False).returncode != 0:
            raise RuntimeError(f"ruff still finds problems after --add-noqa in {tree}")
        if sh(check, tree, check=False).returncode == 0:
            return {name: (tree / name).read_text() for name in changed}
        log("ruff's fixes broke the suite: marking every finding noqa instead")
    raise RuntimeError("the suite fails even with only noqa marks")


def groups(changes: dict[str, str], n: int) -> list[list[str]]:
    """`changes`' files in `n` groups balanced by their size (largest first into the
    lightest group)."""
    heap = [(0, i, list[str]()) for i in range(min(n, len(changes)))]
    for f in sorted(changes, key=lambda f: -len(changes[f])):
        weight, i, files = heapq.heappop(heap)
        heapq.heappush(heap, (weight + len(changes[f]), i, [*files, f]))
    return [sorted(files) for _, _, files in sorted(heap, key=lambda g: g[1])]


def plan(parts: list[list[str]]) -> dict[str, Any]:
    return {
        "subtasks": [
            {
                "id": f"r{i:02d}",
                "title": f"ruff-clean {', '.join(files)}",
                "instructions": f"Fix or mark (noqa) every ruff finding in {', '.join(files)}.",
                "files": files,
                "depends_on": [],
            }
            for i, files in enumerate(parts)
        ]
    }


# -- the scripted policy, served over HTTP -----------------------------------------------


class Policy:
    """Coders write their files' ruff-clean text, then finish; every other agent finishes."""

    def __init__(self, changes: dict[str, str]) -> None:
        self.changes = changes

    def __call__(self, request: ChatRequest) -> Reply:
        system = next((m.content or "" for m in request.messages if m.role == "system"), "")
        text = "\n".join(m.content or "" for m in request.messages if m.role == "user")
        found = _SCOPE.search(text)
        wrote = any(
            c.name == "write_file"
            for m in request.messages
            if m.role == "assistant"
            for c in m.tool_calls
        )
        scope = found.group(1).split(", ") if found else []
        files = [f for f in scope if f in self.changes]
        if not files or wrote or not system.startswith("You are a coder"):
            return Reply(tool_calls=[_call("finish", summary="done")])
        return Reply(
            tool_calls=[_call("write_file", path=f, content=self.changes[f]) for f in files]
        )


def _call(name: str, **arguments: str) -> ToolCall:
    return ToolCall(
        id=f"call_{name}_{time.monotonic_ns()}", name=name, arguments=json.dumps(arguments)
    )


# -- one run -----------------------------------------------------------------------------


async def run_once(
    bench: Bench,
    url: str,
    repo: Path,
    python: Path,
    work: Path,
    agents: int,
    parts: list[list[str]],
) -> dict[str, Any]:
    work.mkdir(parents=True)
    (work / "plan.json").write_text(json.dumps(plan(parts)))
    target = clone(repo, work / "repo")
    check, accept = commands(bench, python)
    before = "impact: false\nmerge: {gather: false}\n" if bench.before else ""
    (work / "task.md").write_text(
        f"---\ncheck: {check}\naccept: {accept}\npython: {python}\n{before}---\n"
        f"# Make {bench.package} ruff-clean\n\nFix or mark every ruff finding in the package.\n"
    )
    model = json.dumps([f"local/{bench.profile}"])
    (work / "swarm.toml").write_text(
        f'[providers.local]\nkind = "openai"\nbase_url = "{url}"\napi_key_env = ""\n'
        f"[tiers.speed]\nmodels = {model}\n[tiers.reasoning]\nmodels = {model}\n"
    )
    request = SolveRequest(
        task_path=str(work / "task.md"),
        repo=str(target),
        plan_path=str(work / "plan.json"),
        config_path=str(work / "swarm.toml"),
        max_agents=agents,
        state_dir=str(work / "state"),
        traces_dir=str(work / "traces"),
        quiet=True,
    )
    load = os.getloadavg()[0]
    report = await solve(request)
    return {
        "agents": agents,
        "status": report.status,
        "merged": report.count("merged"),
        "subtasks": len(parts),
        "wall_s": round(report.wall_s, 1),
        "model_s": round(report.overhead.model_s, 2),
        "checks": check_runs(report, check, accept),
        "worktree_checks": scopes(report),
        "branch_green": branch_green(target, report, check, accept),
        "merge": report.merge.model_dump() if report.merge else None,
        "calls": report.calls,
        "load_avg_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


def check_runs(report: RunReport, check: str, accept: str) -> dict[str, int]:
    """Every check that ran, by where (a reused result runs nothing, so has no span): the
    first run of `check` and of `accept` are the baseline's, later runs of `accept` the
    final verification's, `check`'s the merge queue's (`MergeStats.checks_run`) or a
    worktree's whole check, any other command a worktree's selection of the tests."""
    trace = load_trace(Path(str(report.trace)))
    ran: list[str] = []
    agents = 0
    for i in range(len(trace)):
        if trace.name[i] == f"{sc.OP_TOOL} run_tests":
            command = str(trace.attributes(i).get(sc.CHECK_COMMAND, ""))
            if command:
                ran.append(command)
            else:
                agents += 1  # an agent's own run_tests
    merge = report.merge.checks_run if report.merge else 0
    whole, accepts = ran.count(check), ran.count(accept)
    baseline = min(whole, 1) + min(accepts, 1)
    return {
        "total": len(ran) + agents,
        "baseline": baseline,
        "worktree": len(ran) - whole - accepts + max(whole - 1 - merge, 0),
        "merge": merge,
        "final": max(accepts - 1, 0),
        "agents": agents,
    }


def scopes(report: RunReport) -> dict[str, Any]:
    chosen = [s.check for s in report.subtasks if s.check]
    run = [int(m.group(1)) for s in chosen if (m := re.match(r"impact: (\d+) of (\d+)", s))]
    total = next(
        (int(m.group(1)) for s in chosen if (m := re.match(r"impact: \d+ of (\d+)", s))), None
    )
    return {
        "impact": len(run),
        "full": len(chosen) - len(run),
        "test_files_run": run,
        "suite_test_files": total,
        "full_reasons": sorted({s for s in chosen if s.startswith("full")}),
    }


def branch_green(repo: Path, report: RunReport, check: str, accept: str) -> dict[str, Any]:
    """ruff and the suite on the run's branch, run here in a clean worktree of it."""
    if not report.branch:
        return {"ruff": False, "tests": False, "why": "no branch"}
    tree = repo.parent / "branch"
    git(repo, "worktree", "add", "-q", str(tree), report.branch)
    ruff = sh(accept, tree, check=False).returncode == 0
    tests = sh(check, tree, check=False).returncode == 0
    return {"ruff": ruff, "tests": tests}


def timed(command: str, cwd: Path, times: int = 2) -> float:
    """The median wall seconds of `command` in `cwd` (alone, before the runs)."""
    spent = []
    for _ in range(times):
        t0 = time.perf_counter()
        sh(command, cwd, check=False)
        spent.append(time.perf_counter() - t0)
    return round(statistics.median(spent), 3)


def bound(run: dict[str, Any], check_s: float, final_s: float, cores: int) -> dict[str, float]:
    """Model time on the critical path + one check per tree on the cores + the final check."""
    n, agents = run["subtasks"], run["agents"]
    model_path = run["model_s"] * math.ceil(n / agents) / n
    checks = n * check_s / cores
    total = model_path + checks + final_s
    return {
        "model_path_s": round(model_path, 2),
        "tree_checks_s": round(checks, 2),
        "final_check_s": round(final_s, 3),
        "bound_s": round(total, 1),
        "wall_over_bound": round(run["wall_s"] / total, 2),
    }


async def run(bench: Bench, repo: Path, venv: Path, root: Path) -> dict[str, Any]:
    python = ensure_repo(bench, repo, venv)
    changes = ruff_changes(bench, repo, python, root)
    parts = groups(changes, bench.subtasks)
    check, accept = commands(bench, python)
    check_s, final_s = timed(check, repo), timed(accept, repo)
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    engine = SimEngine(profile=bench.profile, script=Policy(changes), seed=1)
    runs: dict[str, dict[str, Any]] = {}
    async with serve_sim(engine) as url:
        for agents in bench.agents:
            log(f"{agents} agents ...")
            where = root / f"agents-{agents}"
            one = await run_once(bench, url, repo, python, where, agents, parts)
            one.update(bound(one, check_s, check_s + final_s, cores))
            runs[str(agents)] = one
            log(f"{agents} agents: {one['wall_s']} s, {one['status']}, checks {one['checks']}")
    first = runs[str(bench.agents[0])]
    for r in runs.values():
        r["speedup"] = round(first["wall_s"] / r["wall_s"], 2)
    return {
        "benchmark": "solve_real",
        "project": bench.project,
        "subtasks": len(parts),
        "files_changed": len(changes),
        "check": check,
        "accept": accept,
        "check_s": check_s,
        "accept_s": final_s,
        "cores": cores,
        "profile": bench.profile,
        "before": bench.before,
        "runs": runs,
    }


def _agents(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--project", default=Bench.project)
    parser.add_argument("--package", default=Bench.package, help="what ruff checks")
    parser.add_argument("--tests", default=Bench.tests, help="what pytest runs")
    parser.add_argument("--subtasks", type=int, default=Bench.subtasks)
    parser.add_argument("--agents", type=_agents, default=Bench.agents, help="e.g. 1,8")
    parser.add_argument("--profile", default=Bench.profile, help="the models' catalog profile")
    parser.add_argument("--repo-dir", type=Path, help="the repository (made if missing)")
    parser.add_argument("--venv", type=Path, help="its venv (made if missing)")
    parser.add_argument("--keep", type=Path, help="keep the runs' clones and traces here")
    parser.add_argument(
        "--before", action="store_true", help="without test impact and gathering, to compare"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    bench = Bench(
        project=args.project,
        package=args.package,
        tests=args.tests,
        subtasks=args.subtasks,
        agents=args.agents,
        profile=args.profile,
        before=args.before,
    )
    name = bench.project.split("==")[0]
    cache = Path(tempfile.gettempdir()) / "swarm-bench-real"
    repo = (args.repo_dir or cache / name).resolve()
    venv = (args.venv or cache / f"{name}-venv").resolve()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = anyio.run(run, bench, repo, venv, args.keep.resolve())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = anyio.run(run, bench, repo, venv, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['project']}: {result['subtasks']} subtasks over {result['files_changed']} "
        f"files; check {result['check_s']} s, accept {result['accept_s']} s, "
        f"{result['cores']} cores"
    )
    for agents, r in result["runs"].items():
        print(
            f"{agents:>3} agents: {r['status']}, merged {r['merged']}/{r['subtasks']}, "
            f"check runs {r['checks']['total']} {r['checks']}, "
            f"branch {r['branch_green']}, wall {r['wall_s']} s, bound {r['bound_s']} s "
            f"({r['wall_over_bound']}x: model {r['model_path_s']} + checks "
            f"{r['tree_checks_s']} + final {r['final_check_s']}), speedup x{r['speedup']}, "
            f"worktree checks {r['worktree_checks']}, load {r['load_avg_1m']}"
        )


if __name__ == "__main__":
    main()
