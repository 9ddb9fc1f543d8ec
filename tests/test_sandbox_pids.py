"""The kernel's cap on a sandboxed command's processes (`swarm._sandbox._pids`): a pids
cgroup per command, removed once it has ended; without one, the guard alone."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm._sandbox import BwrapSandbox, Limits, SandboxPolicy, _pids, bwrap_problem
from swarm._sandbox import bwrap as bwrap_module
from swarm._sandbox.process import run_confined

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        bwrap_problem() is not None, reason=f"bubblewrap cannot run here: {bwrap_problem()}"
    ),
]

needs_cgroups = pytest.mark.skipif(
    _pids._hierarchy() is None, reason="no pids cgroup hierarchy swarm may write to here"
)


@pytest.fixture(autouse=True)
def probe_again() -> Iterator[None]:
    _pids._hierarchy.cache_clear()
    yield
    _pids._hierarchy.cache_clear()


def _ended_pid() -> int:
    return int(subprocess.run(["sh", "-c", "echo $$"], capture_output=True, check=True).stdout)


def _ours(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if p.name.startswith(f"swarm-{os.getpid()}-")]


async def _run(sandbox: BwrapSandbox, argv: list[str], cwd: Path) -> str:
    result = await run_confined(
        sandbox, argv, cwd=cwd, env={"PATH": "/usr/bin:/bin"}, timeout_s=20, max_output_chars=4000
    )
    return result.output


@needs_cgroups
async def test_the_kernel_refuses_forks_past_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard looks too late here (every minute): the kernel alone stops the command at
    `TASKS_PER_PROCESS * max_processes` tasks, whatever it tries."""
    monkeypatch.setattr(bwrap_module, "_CAPPED_INTERVALS_S", (60.0,))
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(max_processes=5)))
    started = "n=0; for i in $(seq 60); do sleep 2 & n=$((n+1)); done; echo started $n; wait"
    output = await _run(sandbox, ["/bin/sh", "-c", started], tmp_path)
    assert "Cannot fork" in output  # dash's words for EAGAIN
    assert _ours(Path("/sys/fs/cgroup/pids")) == []


@needs_cgroups
async def test_each_command_gets_its_own_cgroup_and_dead_runs_ones_are_removed(
    tmp_path: Path,
) -> None:
    root = Path("/sys/fs/cgroup/pids")
    left = root / f"swarm-{_ended_pid()}-3"  # what a killed run left
    left.mkdir()
    try:
        sandbox = BwrapSandbox()
        inside = "cat /proc/self/cgroup; echo ok"
        output = await _run(sandbox, ["/bin/sh", "-c", inside], tmp_path)
        assert output.rstrip().endswith("ok")
        assert not left.exists()
        assert _ours(root) == []
    finally:
        _pids.remove(left)


async def test_without_a_hierarchy_the_guard_alone_keeps_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pids, "_HIERARCHY", tmp_path / "no-cgroups")
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(max_processes=16)))
    launch = sandbox.launch(["true"], cwd=tmp_path, env={})
    assert launch.cgroup is None and launch.argv[0] == sandbox.bwrap
    many = "for i in $(seq 40); do sleep 5 & done; wait"
    output = await _run(sandbox, ["/bin/sh", "-c", many], tmp_path)
    assert "[sandbox: more than 16 processes at once; the command was killed]" in output
