"""A worktree as a filesystem of its own (`swarm._sandbox._volume`): the kernel refuses
writes past its disk quota, whoever makes them, and nothing of it outlives the worktree."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from swarm._cluster.node import CallLimits, WorkspaceNode, sweep_dead_clones
from swarm._sandbox import BwrapSandbox, Limits, SandboxPolicy, _volume
from swarm.agent._toolbox import coding_tools
from swarm.errors import ToolError
from swarm.run._environment import CheckEnvironment
from swarm.run._seams import GitWorkspaces
from swarm.run._workspace import Workspace, cleanup_stale
from tests.sandboxing import needs_bwrap
from tests.test_sandbox import repo

__all__ = ["repo"]

TOOLS = {t.name: t for t in coding_tools()}
_MB = 1024 * 1024

needs_volumes = pytest.mark.skipif(
    _volume.unusable() is not None,
    reason=f"worktrees cannot be filesystems here: {_volume.unusable()}",
)


def _bundle(repo: Path) -> tuple[bytes, str]:
    """What the driver sends a cluster node: the repository as a git bundle, and HEAD."""
    bundle = subprocess.run(
        ["git", "bundle", "create", "-", "--all"], cwd=repo, capture_output=True, check=True
    ).stdout
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    return bundle, sha


def _files_size(root: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in root.glob(pattern))


def test_a_checkout_takes_a_block_per_4_kb_of_each_file_and_per_directory() -> None:
    listing = "\0".join(
        [
            "100644 blob 1111 10\tREADME",
            "040000 tree 2222 -\tsrc",
            "100644 blob 3333 4097\tsrc/big.py",
            "100644 blob 4444 0\tsrc/__init__.py",
            "120000 blob 5555 7\tlink",
            "",
        ]
    )
    footprint = _volume.Footprint.of_tree(listing)
    assert footprint == _volume.Footprint(4096 + 4096 + 8192 + 0 + 4096, 5)


@needs_volumes
async def test_the_quota_is_the_room_past_the_checkout(repo: Path) -> None:
    async with Workspace.open(repo, name="w", disk_mb=64) as ws:
        assert ws.volume and os.path.ismount(ws.path)
        assert (ws.path / "app.py").read_text() == "x = 1\n"  # checked out into it
        info = os.statvfs(ws.path)
        room = info.f_bavail * info.f_frsize / _MB
        assert 64 <= room <= 64.1  # the kernel's own reserve is outside it
        image = _volume.image_of(ws.path)
        assert image.stat().st_blocks * 512 < 8 * _MB  # sparse: only what is written
    assert not ws.path.exists() and not image.exists()


@needs_volumes
@needs_bwrap
async def test_many_small_files_stop_at_the_quota_and_the_command_is_told(repo: Path) -> None:
    """What the check let pass (64 MB reached 65 to 117 MB): the kernel refuses the write
    at the quota, and the command goes on to clean up."""
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(disk_mb=16)))
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
    async with Workspace.open(repo, name="w", disk_mb=16) as ws:
        bomb = "for i in $(seq 400); do head -c 100K /dev/zero > bomb-$i; done; echo GO-ON"
        out = await TOOLS["run"].run({"command": bomb}, env.context(ws.path, timeout_s=60))
        written = _files_size(ws.path, "bomb-*")
    assert written <= 16 * _MB
    assert written > 15 * _MB  # refused at the quota, not long before it
    assert "GO-ON" in out  # refused, not killed
    assert "[sandbox: the worktree's disk quota of 16 MB is used up" in out


@needs_volumes
async def test_host_side_writes_meet_the_same_quota(repo: Path) -> None:
    """A file tool (swarm's own process, root) is refused past the quota too, with a
    message, not a traceback."""
    async with Workspace.open(repo, name="w", disk_mb=8) as ws:
        ctx = ws.context()
        for i in range(3):
            await TOOLS["write_file"].run({"path": f"blob-{i}.txt", "content": "y" * _MB * 2}, ctx)
        with pytest.raises(ToolError) as refused:
            await TOOLS["write_file"].run({"path": "blob-3.txt", "content": "y" * _MB * 3}, ctx)
        with pytest.raises(ToolError):  # an existing file is left whole, not cut short
            await TOOLS["write_file"].run({"path": "blob-0.txt", "content": "w" * _MB * 5}, ctx)
        assert (ws.path / "blob-0.txt").read_text() == "y" * _MB * 2
        assert not (ws.path / "blob-3.txt").exists()  # nor is half a new one left
        written = _files_size(ws.path, "blob-*")
    assert written <= 8 * _MB
    assert str(refused.value).startswith(
        "write_file failed: the worktree's disk quota of 8 MB is used up: writes past it "
        "were refused"
    )


@needs_volumes
async def test_a_dead_runs_volume_is_unmounted_and_deleted_by_cleanup(repo: Path) -> None:
    ws = await Workspace.create(repo, name="w", run_id="dead", disk_mb=8)
    assert ws.volume
    gone = subprocess.Popen(["true"])  # noqa: ASYNC220 (waited for at once)
    gone.wait()  # its pid names a process that has ended: the run that made `w` is dead
    owner = ws.path.with_name(f"{ws.path.name}.owner")
    owner.write_text(f"{socket.gethostname()} {gone.pid}\n")
    removed = await cleanup_stale(repo, run_id="dead")
    assert removed == [ws.path]
    assert not os.path.ismount(ws.path) and not ws.path.exists()
    assert not _volume.image_of(ws.path).exists()


@needs_volumes
async def test_a_runs_worktrees_take_the_sandboxs_quota_and_keep_it_when_reused(
    repo: Path,
) -> None:
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(disk_mb=8)))
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
    workspaces = GitWorkspaces(repo, "r1", env, reuse=True)
    try:
        async with workspaces.open("HEAD", "s1") as first:
            assert isinstance(first, Workspace) and first.volume and first.disk_mb == 8
            (first.path / "scratch").write_bytes(b"z" * 6 * _MB)
        async with workspaces.open("HEAD", "s2") as second:
            assert second is first and not (second.path / "scratch").exists()
            info = os.statvfs(second.path)
            assert info.f_bavail * info.f_frsize >= 8 * _MB  # the reset gave the room back
    finally:
        await workspaces.aclose()
    assert not first.path.exists() and not _volume.image_of(first.path).exists()


@needs_volumes
async def test_a_cluster_nodes_clone_is_a_filesystem_of_its_own_too(repo: Path) -> None:
    """The node's clone (made from a bundle, no shared disk) meets the same quota; its git
    dir is beside it, and nothing of either outlives the actor."""
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(disk_mb=8)))
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
    bundle, sha = _bundle(repo)
    node = WorkspaceNode(env, "r1", "n1")
    limits = CallLimits(check=None, timeout_s=30, max_output_chars=20_000)
    try:
        info = await node.open(bundle, sha)
        assert node.volume and os.path.ismount(info.path)
        assert (node.root / "app.py").read_text() == "x = 1\n"
        wrote = await node.tool("write_file", {"path": "a.txt", "content": "a" * _MB * 6}, limits)
        assert wrote.error is None
        refused = await node.tool("write_file", {"path": "b.txt", "content": "b" * _MB * 4}, limits)
        assert refused.error is not None and "disk quota of 8 MB is used up" in refused.error
        assert "+" + "a" * 10 in await node.patch()  # a clone like any other
        status = await node.tool("run", {"command": "git status --short"}, limits)
        assert status.text.startswith("command exited with code 0\n?? a.txt\n"), status
    finally:
        await node.close()
    assert not node.root.exists() and not node.root.parent.exists()


@needs_volumes
async def test_a_killed_actors_clone_is_unmounted_by_the_next_one_or_the_cluster(
    repo: Path,
) -> None:
    """An actor killed with its node never closes its clone: the next actor on the node
    (once per process), or the local cluster at its end, unmounts and deletes it (live
    clones in the same directory, another test's too, are kept)."""
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=BwrapSandbox())
    bundle, sha = _bundle(repo)
    node = WorkspaceNode(env, "r1", "killed")
    await node.open(bundle, sha)
    assert os.path.ismount(node.root)
    gone = subprocess.Popen(["true"])  # noqa: ASYNC220 (waited for at once)
    gone.wait()
    (node.root.parent / "repo.owner").write_text(f"{socket.gethostname()} {gone.pid}\n")
    live = WorkspaceNode(env, "r1", "live")
    await live.open(bundle, sha)  # its owner (this process) lives: kept
    sweep_dead_clones(Path(tempfile.gettempdir()))
    assert not os.path.ismount(node.root) and not node.root.parent.exists()
    assert os.path.ismount(live.root)
    await live.close()
    assert not live.root.parent.exists()


@needs_volumes
async def test_a_volume_that_cannot_be_made_leaves_a_plain_worktree_and_what_was_there(
    repo: Path, tmp_path: Path
) -> None:
    """An image already where the worktree's would go (another's): the worktree is a plain
    directory (the quota is then the sandbox's check), and the image is left alone."""
    where = tmp_path / "worktrees"
    (where / "adhoc").mkdir(parents=True)
    theirs = _volume.image_of(where / "adhoc" / "w")
    theirs.write_bytes(b"not ours")
    async with Workspace.open(repo, name="w", disk_mb=8, root=where) as ws:
        assert not ws.volume and not os.path.ismount(ws.path)
        assert (ws.path / "app.py").read_text() == "x = 1\n"
    assert theirs.read_bytes() == b"not ours"


@needs_volumes
@needs_bwrap
async def test_other_worktrees_filesystems_are_not_a_commands_and_may_go_as_it_starts(
    repo: Path,
) -> None:
    """A command's bwrap bound the git dir with every mount below it: the other worktrees'
    filesystems. One removed while bwrap made them read-only failed the command's start
    ("bwrap: Can't bind mount ... Unable to apply mount flags"), and a check was red for
    nothing: a final check under load, in CI."""
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(disk_mb=8)))
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
    mounts = "grep -c 'swarm-worktrees/adhoc/[og]' /proc/self/mountinfo; echo STARTED"
    async with Workspace.open(repo, name="mine", disk_mb=8) as mine:
        ctx = env.context(mine.path, timeout_s=60)
        async with Workspace.open(repo, name="other", disk_mb=8) as other:
            assert other.volume and os.path.ismount(other.path)
            seen = await TOOLS["run"].run({"command": mounts}, ctx)
        # its own worktree is mounted, not the other's filesystem
        assert "\n0\nSTARTED" in seen, seen

        async def churn() -> None:
            for i in range(12):
                async with Workspace.open(repo, name=f"gone-{i}", disk_mb=8):
                    pass

        outputs: list[str] = []

        async def commands() -> None:
            for _ in range(30):
                outputs.append(await TOOLS["run"].run({"command": mounts}, ctx))

        async with anyio.create_task_group() as tg:
            tg.start_soon(churn)
            tg.start_soon(commands)
    failed = [out for out in outputs if "STARTED" not in out]
    assert not failed, failed[0]
