"""The kernel's cap on a sandboxed command's processes (`swarm._sandbox._pids`): a pids
cgroup per command, removed once it has ended; without one, the guard alone."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm._sandbox import BwrapSandbox, Limits, SandboxPolicy, _pids, bwrap_problem
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
async def test_the_kernel_refuses_forks_past_the_cap(tmp_path: Path) -> None:
    """No guard in the cgroup: the kernel alone stops the command at
    `TASKS_PER_PROCESS * max_processes` tasks, whatever it tries."""
    policy = SandboxPolicy(limits=Limits(max_processes=5), guard_in_cgroup=False)
    sandbox = BwrapSandbox(policy)
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


async def test_without_cgroups_the_guard_alone_keeps_the_limit(tmp_path: Path) -> None:
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(max_processes=16), cgroups=False))
    launch = sandbox.launch(["true"], cwd=tmp_path, env={})
    assert launch.cgroup is None and sandbox.bwrap in launch.argv  # not joining one
    assert not any("cgroup.procs" in arg for arg in launch.argv)
    # processes that outlive any load: with `sleep 5`, a shell forking slowly on a loaded
    # machine (load 20) had its first ones end before the 17th started, and the guard
    # rightly never fired; these only end when the guard kills the sandbox
    many = "for i in $(seq 40); do sleep 600 & done; wait"
    output = await _run(sandbox, ["/bin/sh", "-c", many], tmp_path)
    assert "[sandbox: more than 16 processes at once; the command was killed]" in output


async def test_where_no_cgroup_is_made_the_run_says_so_once_with_what_is_enforced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(memory_mb=321), cgroups=False))
    for _ in range(2):  # two runs' sessions, one warning
        async with sandbox.session():
            assert "ok" in await _run(sandbox, ["/bin/sh", "-c", "echo ok"], tmp_path)
    (said,) = [r.getMessage() for r in caplog.records if "no memory cgroup" in r.getMessage()]
    assert "[sandbox] cgroups = false" in said and "RLIMIT_DATA, 321 MB" in said
    assert "by swarm counting them (no pids cgroup)" in said
