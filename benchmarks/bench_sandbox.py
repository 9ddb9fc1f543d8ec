"""What the sandbox costs: per command, bubblewrap against none, and a whole demo solve.

    python -m benchmarks.bench_sandbox [--json] [--commands 200] [--solves 3]

Per command: `true` and a small `python -c` run through `run_command` in a real git
worktree, alternating bwrap and none in the same run (so both see the same machine), as
`run`, `run_tests` and checks run them. Reported: median and mean wall time per command
for each sandbox, and the CPU time all its processes used; the overheads are the
differences. Goal: <= 15 ms per command. `bwrap-before` is the sandbox as it was before
issue 34's layers (the whole `/etc`, a writable `/proc/sys`, no user namespace of its own,
no sized `/dev/shm`, no read-only root, no memory cgroup: `_Before`), in the same run, so
`layers_ms` is what those layers cost; `bwrap-main` is the sandbox before the host uid
drop and the seccomp filter (`_Main`: a user namespace mapping the command to swarm's own
uid, no filter), so `drop_ms` is what those two cost (the drop step's exec, the `/bin/sh`
that hands bwrap the filter, the filter itself). Where socat is installed, also `allow` (bwrap
with an allow-list network: the proxy lane and socat started before each command). On a
loaded machine the wall figure grows with the load (bwrap's setup is CPU work waiting for
a core); the CPU figure does not. To count the CPU of a sandbox's processes the benchmark
makes itself their subreaper: the sandbox's init outlives bwrap's monitor, and would be
reaped elsewhere otherwise.

`--against DIR` (a checkout of another commit, e.g. `git archive BASE | tar -x -C DIR`):
this checkout's per-command figures and DIR's, each measured by its own copy of this
script in a process of its own, in `--rounds` rounds of `--commands / rounds` commands,
the order of the two swapped each round (so both see the same machine); reported: the
median over the rounds of each figure, for both, and this one's minus DIR's.

Per worktree (`--workspaces`): making and removing one with its disk quota, a filesystem
of its own where swarm can make one (root, loop devices: `swarm._sandbox._volume`), and
without, alternating; the commands above run in such a worktree, as in a solve.

Whole run: `swarm solve` on the shipped demo (simulator, `time_scale` 0.02) with
`--sandbox bwrap` and `--sandbox none`, alternating, `--solves` times each; median wall
time and swarm's own CPU (its process only). Goal: bwrap no more than 10 % slower.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from statistics import mean, median
from typing import Any

import anyio

from swarm._sandbox import BwrapSandbox, NoSandbox, Sandbox, SandboxPolicy, _identity, _pids
from swarm._sandbox._seats import Seats
from swarm._sandbox.bwrap import socat_path
from swarm.agent._toolbox import run_command
from swarm.run._environment import CheckEnvironment
from swarm.run._solve import SolveRequest, solve
from swarm.run._workspace import Workspace

TASK = Path(__file__).resolve().parents[1] / "tasks" / "refactor.md"
COMMANDS = {"true": "true", "python": "python -c 'import sys; sys.exit(0)'"}


_PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _children_cpu() -> float:
    """CPU of every finished descendant, orphans reparented to us reaped first."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("x = 1\n")
    ident = ["-c", "user.name=b", "-c", "user.email=b@b"]
    for args in (["init", "-q"], ["add", "-A"], [*ident, "commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


class _Undropped(BwrapSandbox):
    """bubblewrap without the host uid drop and the seccomp filter (the drop step and
    the `/bin/sh` that hands bwrap the filter)."""

    def __init__(self, policy: SandboxPolicy | None = None, **kwargs: Any) -> None:
        super().__init__(policy, **kwargs)
        self._seccomp = None

    @functools.cached_property
    def _dropper(self) -> _identity.Drop | None:
        return None


class _Before(_Undropped):
    """bubblewrap as swarm set it up before issue 34 (its command line, its pids cgroup
    without a memory twin): the baseline of `layers_ms`."""

    @functools.cached_property
    def _head(self) -> list[str]:
        args = [self.bwrap, "--ro-bind-try", "/usr", "/usr", "--ro-bind-try", "/etc", "/etc"]
        for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(name):
                args += ["--symlink", os.readlink(name), name]
            elif os.path.isdir(name):
                args += ["--ro-bind", name, name]
        tmp = str(self.policy.limits.tmp_mb * 1024 * 1024)
        args += ["--proc", "/proc", "--dev", "/dev", "--size", tmp, "--tmpfs", "/tmp"]
        for path in self.policy.read_only:
            args += ["--ro-bind-try", str(path), str(path)]
        return args

    @functools.cached_property
    def _tail(self) -> list[str]:
        return ["--unshare-all", "--die-with-parent", "--cap-drop", "ALL", "--"]

    def _new_cgroup(self) -> Path | None:
        return _pids.make(self.policy.limits.max_processes)

    def with_read_only(self, paths: Sequence[Path]) -> _Before:
        return _Before(self.policy.with_read_only(paths), bwrap=self.bwrap, seats=self.seats)


class _Main(_Undropped):
    """bubblewrap as main had it before the unprivileged host uid and seccomp (a user
    namespace mapping the command to swarm's uid, root here; no filter): the baseline of
    `drop_ms`."""

    @functools.cached_property
    def _tail(self) -> list[str]:
        uid, gid = os.getuid() or 1000, os.getgid() or 1000
        args = ["--unshare-all", "--unshare-user", "--uid", str(uid), "--gid", str(gid)]
        args += ["--disable-userns", "--cap-drop", "ALL", "--new-session", "--die-with-parent"]
        return [*args, "--remount-ro", "/", "--"]

    def with_read_only(self, paths: Sequence[Path]) -> _Main:
        return _Main(self.policy.with_read_only(paths), bwrap=self.bwrap, seats=self.seats)


def _sandboxes() -> dict[str, Sandbox]:
    before = SandboxPolicy()
    found: dict[str, Sandbox] = {
        "none": NoSandbox(),
        "bwrap": BwrapSandbox(),
        "bwrap-before": _Before(before, seats=Seats(before.limits.max_processes)),
        "bwrap-main": _Main(),
    }
    if socat_path():  # the allow-list network: a proxy lane and socat per command
        found["allow"] = BwrapSandbox(SandboxPolicy(network="allow", allow=("pypi.org:443",)))
    return found


async def per_command(n: int) -> dict[str, Any]:
    sandboxes = _sandboxes()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sbx-") as tmp:
        repo = _repo(Path(tmp))
        quota = SandboxPolicy().limits.disk_mb  # a solve's worktree: a volume where it can be
        async with (
            Workspace.open(repo, name="bench", disk_mb=quota) as ws,
            AsyncExitStack() as stack,
        ):
            out["worktree_volume"] = ws.volume
            for sandbox in sandboxes.values():  # the proxy, once, as a run opens it
                await stack.enter_async_context(sandbox.session())
            for label, command in COMMANDS.items():
                wall: dict[str, list[float]] = {k: [] for k in sandboxes}
                cpu: dict[str, list[float]] = {k: [] for k in sandboxes}
                for _ in range(n):
                    for kind, sandbox in sandboxes.items():
                        env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
                        ctx = env.context(ws.path, timeout_s=30)
                        c0, t0 = _children_cpu(), time.perf_counter()
                        result = await run_command(command, ctx)
                        wall[kind].append(time.perf_counter() - t0)
                        await anyio.sleep(0.05)  # the sandbox's init is reparented, then ends
                        cpu[kind].append(_children_cpu() - c0)
                        assert result.exit_code == 0, result.output
                stats: dict[str, Any] = {
                    kind: {
                        "median_ms": round(median(wall[kind]) * 1000, 2),
                        "mean_ms": round(mean(wall[kind]) * 1000, 2),
                        "cpu_ms": round(mean(cpu[kind]) * 1000, 2),
                    }
                    for kind in sandboxes
                }
                over = stats["bwrap"]["median_ms"] - stats["none"]["median_ms"]
                stats["overhead_ms"] = round(over, 2)
                over = stats["bwrap-before"]["median_ms"] - stats["none"]["median_ms"]
                stats["overhead_before_ms"] = round(over, 2)
                layers = stats["bwrap"]["median_ms"] - stats["bwrap-before"]["median_ms"]
                stats["layers_ms"] = round(layers, 2)
                drop = stats["bwrap"]["median_ms"] - stats["bwrap-main"]["median_ms"]
                stats["drop_ms"] = round(drop, 2)
                drop_cpu = stats["bwrap"]["cpu_ms"] - stats["bwrap-main"]["cpu_ms"]
                stats["drop_cpu_ms"] = round(drop_cpu, 2)
                layers_cpu = stats["bwrap"]["cpu_ms"] - stats["bwrap-before"]["cpu_ms"]
                stats["layers_cpu_ms"] = round(layers_cpu, 2)
                cpu_over = stats["bwrap"]["cpu_ms"] - stats["none"]["cpu_ms"]
                stats["overhead_cpu_ms"] = round(cpu_over, 2)
                if "allow" in stats:
                    allow_over = stats["allow"]["median_ms"] - stats["none"]["median_ms"]
                    stats["allow_overhead_ms"] = round(allow_over, 2)
                out[label] = stats
    return out


async def per_workspace(n: int) -> dict[str, Any]:
    """Making and removing a worktree with its disk quota (a filesystem of its own where
    `swarm._sandbox._volume` can make one) and without, alternating: what the volume costs
    each worktree a run makes (the pool reuses them)."""
    quota = SandboxPolicy().limits.disk_mb
    made: dict[str, list[float]] = {"plain": [], "quota": []}
    removed: dict[str, list[float]] = {"plain": [], "quota": []}
    volumes = 0
    with tempfile.TemporaryDirectory(prefix="bench-sbx-ws-") as tmp:
        repo = _repo(Path(tmp))
        for i in range(n):
            for kind in ("plain", "quota") if i % 2 == 0 else ("quota", "plain"):
                t0 = time.perf_counter()
                ws = await Workspace.create(
                    repo, name=f"{kind}{i}", disk_mb=quota if kind == "quota" else None
                )
                t1 = time.perf_counter()
                volumes += ws.volume
                await ws.close()
                made[kind].append(t1 - t0)
                removed[kind].append(time.perf_counter() - t1)
    out: dict[str, Any] = {
        kind: {
            "create_ms": round(median(made[kind]) * 1000, 2),
            "close_ms": round(median(removed[kind]) * 1000, 2),
        }
        for kind in made
    }
    out["volumes"] = volumes
    out["added_ms"] = round(sum(out["quota"].values()) - sum(out["plain"].values()), 2)
    return out


async def demo_solves(n: int) -> dict[str, Any]:
    wall: dict[str, list[float]] = {"none": [], "bwrap": []}
    cpu: dict[str, list[float]] = {"none": [], "bwrap": []}
    with tempfile.TemporaryDirectory(prefix="bench-sbx-solve-") as tmp:
        config = Path(tmp) / "swarm.toml"
        config.write_text('[providers.sim]\nkind = "sim"\ntime_scale = 0.02\n')
        for i in range(n):
            for kind in ("none", "bwrap") if i % 2 == 0 else ("bwrap", "none"):  # no order bias
                state = Path(tmp) / f"{kind}-{i}"
                request = SolveRequest(
                    task_path=str(TASK),
                    config_path=str(config),
                    state_dir=str(state),
                    traces_dir=str(state / "traces"),
                    quiet=True,
                    sandbox=kind,
                )
                c0, t0 = time.process_time(), time.perf_counter()
                report = await solve(request)
                wall[kind].append(time.perf_counter() - t0)
                cpu[kind].append(time.process_time() - c0)
                _children_cpu()  # reap the sandboxes' orphaned inits (we are their subreaper)
                assert report.status == "done", report
    stats: dict[str, Any] = {
        kind: {
            "median_s": round(median(wall[kind]), 3),
            "cpu_s": round(median(cpu[kind]), 3),
        }
        for kind in wall
    }
    stats["slower_pct"] = round(
        100 * (stats["bwrap"]["median_s"] / stats["none"]["median_s"] - 1), 1
    )
    return stats


_COMPARED = ("overhead_ms", "overhead_cpu_ms")
_PER_SANDBOX = ("median_ms", "cpu_ms")


async def against(other: Path, commands: int, rounds: int) -> dict[str, Any]:
    """This checkout's per-command figures and `other`'s, in alternating rounds (module)."""
    trees = {"this": Path(__file__).resolve().parents[1], "against": other.resolve()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    each = max(commands // rounds, 1)
    for i in range(rounds):
        for name in list(trees) if i % 2 == 0 else list(reversed(trees)):
            argv = [sys.executable, "-m", "benchmarks.bench_sandbox", "--json"]
            argv += ["--commands", str(each), "--solves", "0"]
            done = await anyio.run_process(argv, cwd=trees[name])
            runs[name].append(json.loads(done.stdout)["per_command"])
    out: dict[str, Any] = {"rounds": rounds, "commands_per_round": each, "against": str(other)}
    for label in COMMANDS:
        figures: dict[str, Any] = {}
        for name, found in runs.items():
            mine = {key: round(median(r[label][key] for r in found), 2) for key in _COMPARED}
            for kind in ("none", "bwrap"):
                for key in _PER_SANDBOX:
                    mine[f"{kind}_{key}"] = round(median(r[label][kind][key] for r in found), 2)
            figures[name] = mine
        figures["change"] = {
            key: round(figures["this"][key] - figures["against"][key], 2) for key in figures["this"]
        }
        out[label] = figures
    return out


async def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--solves", type=int, default=3)
    parser.add_argument("--workspaces", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--against", type=Path, help="a checkout to compare with (module)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    _become_subreaper()
    load_before = os.getloadavg()
    if args.against is not None:
        compared = await against(args.against, args.commands, args.rounds)
        compared["load"] = {"before": load_before, "after": os.getloadavg()}
        print(json.dumps(compared, indent=2))
        return compared
    result: dict[str, Any] = {
        "per_command": await per_command(args.commands),
        "per_workspace": await per_workspace(args.workspaces) if args.workspaces else None,
        "demo_solve": await demo_solves(args.solves) if args.solves else None,
        "goals": {"per_command_overhead_ms": 15, "demo_slower_pct": 10},
        # the machine is shared: wall figures grow with the load, CPU figures far less
        "load": {"before": load_before, "after": os.getloadavg()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for label, s in result["per_command"].items():
            if label == "worktree_volume":
                print(f"commands ran in a worktree that is a filesystem of its own: {s}")
                continue
            print(
                f"{label:>7}: none {s['none']['median_ms']} ms, bwrap {s['bwrap']['median_ms']}"
                f" ms: +{s['overhead_ms']} ms per command (CPU +{s['overhead_cpu_ms']} ms); "
                f"before issue 34 +{s['overhead_before_ms']} ms: the layers {s['layers_ms']:+} ms"
                f" (uid drop and seccomp {s['drop_ms']:+} ms)"
            )
        w = result["per_workspace"]
        if w is not None:
            print(
                f"worktree: plain {w['plain']['create_ms']} + {w['plain']['close_ms']} ms, "
                f"with its filesystem {w['quota']['create_ms']} + {w['quota']['close_ms']} ms"
                f" ({w['volumes']} volumes made)"
            )
        print(f"load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
        d = result["demo_solve"]
        if d is not None:
            print(
                f"demo solve: none {d['none']['median_s']} s, bwrap {d['bwrap']['median_s']} s "
                f"({d['slower_pct']:+} %)"
            )
    return result


if __name__ == "__main__":
    anyio.run(main)
