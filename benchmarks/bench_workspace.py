"""How long workspaces take: N git worktrees opened at once on one repository.

    python -m benchmarks.bench_workspace [--json] [--workspaces 10,100] [--files 10,1000]

For each (files, workspaces) pair: a fresh repository with that many small files; N tasks
each open a workspace at the same base, write one file, compute the patch and close it.
Reports the makespan, per-workspace means of open / patch / close, and git processes/s.
The numbers depend heavily on the filesystem (checkouts and deletions are file creation
and removal) and on how busy the machine is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from statistics import mean

import anyio

from swarm.run._workspace import Workspace, git


def _make_repo(root: Path, files: int) -> Path:
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    for i in range(files):
        (repo / "src" / f"mod{i}.py").write_text(f"VALUE = {i}\n")
    env = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    for args in (["init", "-q"], ["add", "-A"], [*env, "commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


async def _one_size(files: int, workspaces: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as tmp:
        repo = _make_repo(Path(tmp), files)
        base = await git("rev-parse", "HEAD", cwd=repo)
        opened: list[float] = []
        patched: list[float] = []
        closed: list[float] = []

        async def agent(i: int) -> None:
            t0 = time.perf_counter()
            async with Workspace.open(repo, base=base, name=f"w{i}", run_id="bench") as ws:
                t1 = time.perf_counter()
                (ws.path / f"new{i}.txt").write_text("x\n")
                assert await ws.patch()
                t2 = time.perf_counter()
            opened.append(t1 - t0)
            patched.append(t2 - t1)
            closed.append(time.perf_counter() - t2)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(workspaces):
                tg.start_soon(agent, i)
        makespan = time.perf_counter() - started
    return {
        "files": files,
        "workspaces": workspaces,
        "makespan_s": round(makespan, 3),
        "open_mean_s": round(mean(opened), 4),
        "patch_mean_s": round(mean(patched), 4),
        "close_mean_s": round(mean(closed), 4),
        "workspaces_per_s": round(workspaces / makespan, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspaces", default="10,100")
    parser.add_argument("--files", default="10,1000")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [
        anyio.run(_one_size, int(f), int(n))
        for f in args.files.split(",")
        for n in args.workspaces.split(",")
    ]
    if args.json:
        print(json.dumps({"benchmark": "workspace", "results": rows}, indent=2))
        return
    print(
        f"{'files':>6} {'wss':>5} {'makespan':>9} {'open':>8} {'patch':>8} {'close':>8} {'ws/s':>6}"
    )
    for r in rows:
        print(
            f"{r['files']:>6} {r['workspaces']:>5} {r['makespan_s']:>8.2f}s "
            f"{r['open_mean_s']:>7.3f}s {r['patch_mean_s']:>7.3f}s {r['close_mean_s']:>7.3f}s "
            f"{r['workspaces_per_s']:>6}"
        )


if __name__ == "__main__":
    main()
