"""A worktree's disk quota (`swarm._sandbox._disk`): one file is stopped by the kernel
exactly at the quota; many files by the guard's check, which looks sooner while the disk
fills fast."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from swarm._sandbox import BwrapSandbox, Limits, SandboxPolicy
from swarm._sandbox._disk import FIRST_LOOK_S, SOONEST_S, DiskWatch
from swarm.agent._toolbox import coding_tools
from swarm.run._environment import CheckEnvironment
from swarm.run._workspace import Workspace
from tests.sandboxing import needs_bwrap
from tests.test_sandbox import repo

__all__ = ["repo"]

TOOLS = {t.name: t for t in coding_tools()}
_MB = 1024 * 1024


@needs_bwrap
async def test_one_file_stops_exactly_at_the_disk_quota_and_says_so(repo: Path) -> None:
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(disk_mb=8)))
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
    async with Workspace.open(repo, name="w") as ws:
        out = await TOOLS["run"].run(
            {"command": "head -c 40M /dev/zero > big; echo AFTER"},
            env.context(ws.path, timeout_s=30),
        )
        size = (ws.path / "big").stat().st_size
    assert size == 8 * _MB
    assert "AFTER" in out  # refused, not killed: the command goes on and can clean up
    assert "[sandbox: a file grew past 8 MB, the most any file may hold" in out


def test_the_quota_binds_the_largest_file_when_it_is_the_smaller() -> None:
    assert Limits(file_size_mb=4096, disk_mb=64).largest_file_mb == 64
    assert Limits(file_size_mb=16, disk_mb=64).largest_file_mb == 16
    assert Limits(file_size_mb=None, disk_mb=None).largest_file_mb is None


def test_a_disk_filling_fast_is_looked_at_sooner(tmp_path: Path) -> None:
    """The rule alone, on a clock of its own: the disk's free space is real (32 MB
    allocated in the watched directory between two looks 1 ms apart)."""
    now = [0.0]
    watch = DiskWatch(tmp_path, 64, clock=lambda: now[0])
    assert watch.next_look_s(0.25) == FIRST_LOOK_S  # how fast it fills is not known yet
    now[0] += 1.0
    assert watch.over() is None
    assert watch.next_look_s(0.25) == 0.25  # a quiet second: the planned look
    fd = os.open(tmp_path / "fill", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 32 * _MB)
    finally:
        os.close(fd)
    now[0] += 0.001
    assert watch.over() is None  # 32 of 64 MB
    assert watch.next_look_s(0.25) == SOONEST_S
