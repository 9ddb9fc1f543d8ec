"""Workspaces on real temporary git repositories: patches, commits, cleanup on every path."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from swarm.agent._toolbox import coding_tools
from swarm.errors import WorkspaceError
from swarm.run._workspace import BRANCH_PREFIX, Workspace, cleanup_stale, git

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def sh(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def user_state(repo: Path) -> tuple[str, ...]:
    """What the user sees: branch, status, staged and unstaged diffs, worktrees, branches."""
    return (
        sh(repo, "rev-parse", "--abbrev-ref", "HEAD"),
        sh(repo, "rev-parse", "HEAD"),
        sh(repo, "status", "--porcelain"),
        sh(repo, "diff", "--cached"),
        sh(repo, "diff"),
        sh(repo, "worktree", "list", "--porcelain"),
        sh(repo, "branch", "--list"),
    )


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A repository on `main` with one commit, plus uncommitted work the user is doing."""
    repo = tmp_path / "repo"
    repo.mkdir()
    sh(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "data.bin").write_bytes(b"\x00\x01binary")
    (repo / "old.txt").write_text("remove me\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-qm", "base")
    (repo / "calc.py").write_text("# user's unsaved idea\n")
    (repo / "staged.txt").write_text("staged\n")
    sh(repo, "add", "staged.txt")
    (repo / "scratch.txt").write_text("untracked\n")
    before = user_state(repo)
    yield repo
    assert user_state(repo) == before  # the user's checkout, index and branch are untouched


def branches(repo: Path) -> str:
    return sh(repo, "for-each-ref", "--format=%(refname:short)", f"refs/heads/{BRANCH_PREFIX}/")


def leftovers(repo: Path) -> tuple[str, str, list[Path]]:
    common = repo / ".git"
    files = sorted((common / "swarm-worktrees").rglob("*")) + sorted(common.glob("swarm-trash-*"))
    return (branches(repo), sh(repo, "worktree", "list"), files)


def assert_clean(repo: Path) -> None:
    branches, worktrees, files = leftovers(repo)
    assert branches == "" and files == []
    assert len(worktrees.splitlines()) == 1, worktrees


async def test_workspace_starts_at_base_on_its_own_branch(repo: Path) -> None:
    async with Workspace.open(repo, name="coder-1", run_id="r1") as ws:
        assert ws.base == sh(repo, "rev-parse", "HEAD").strip()
        assert ws.branch == f"{BRANCH_PREFIX}/r1/coder-1"
        assert ws.path == (repo / ".git" / "swarm-worktrees" / "r1" / "coder-1").resolve()
        assert (ws.path / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
        assert not (ws.path / "staged.txt").exists() and not (ws.path / "scratch.txt").exists()
        assert sh(ws.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == ws.branch
        assert sh(ws.path, "status", "--porcelain") == ""
        assert await ws.patch() == ""
    assert_clean(repo)


async def test_patch_has_edits_new_deleted_and_binary_files(repo: Path) -> None:
    async with Workspace.open(repo, name="a") as ws:
        (ws.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (ws.path / "pkg").mkdir()
        (ws.path / "pkg" / "new.py").write_text("NEW = 1\n")
        ws.written.note("pkg/new.py")  # as write_file does
        (ws.path / "old.txt").unlink()
        (ws.path / "data.bin").write_bytes(b"\x00\x02binary")
        patch = await ws.patch()
        assert "-    return a - b\n+    return a + b\n" in patch
        assert "diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644" in patch
        assert "deleted file mode 100644" in patch and "-remove me" in patch
        assert "GIT binary patch" in patch
        assert sh(ws.path, "status", "--porcelain").count("??") == 1  # index left as it was
        async with Workspace.open(repo, name="b") as other:
            await other.apply(patch)
            assert (other.path / "calc.py").read_text() == (ws.path / "calc.py").read_text()
            assert (other.path / "pkg" / "new.py").read_text() == "NEW = 1\n"
            assert not (other.path / "old.txt").exists()
            assert (other.path / "data.bin").read_bytes() == b"\x00\x02binary"
            assert await other.patch() == patch
            await other.apply("")  # an empty patch is a no-op
            await other.apply(patch, reverse=True)  # taken back out: the tree at base
            assert await other.patch() == ""
            assert not (other.path / "pkg" / "new.py").exists()
            assert (other.path / "old.txt").read_text() == (repo / "old.txt").read_text()
        with pytest.raises(WorkspaceError, match="git apply"):
            await ws.apply(patch)  # already applied: does not apply again
    assert_clean(repo)


async def test_a_same_size_edit_right_after_checkout_is_in_the_patch(repo: Path) -> None:
    # edited within the checkout's second, the file's stat matches its index entry; only
    # git's "racily clean" check (entries not older than the index file) catches it, so
    # the patch, made a second later (after the tests ran), must still see the edit
    for n in range(2):
        async with Workspace.open(repo, name=f"racy{n}") as ws:
            (ws.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
            await anyio.sleep(1.1)
            assert "+    return a + b" in await ws.patch(), f"edit missed on try {n}"
    assert_clean(repo)


async def test_commit_moves_the_branch_and_patch_stays_against_base(repo: Path) -> None:
    async with Workspace.open(repo, name="c") as ws:
        (ws.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (ws.path / "new.py").write_text("x = 1\n")
        sha = await ws.commit("fix add")
        assert sh(repo, "rev-parse", ws.branch).strip() == sha
        assert sh(repo, "log", "-1", "--format=%s%n%P", sha).split() == ["fix", "add", ws.base]
        assert await ws.commit("nothing new") == sha  # nothing to commit: no empty commit
        patch = await ws.patch()
        assert "+    return a + b" in patch and "b/new.py" in patch
    assert_clean(repo)


async def test_tools_work_inside_a_workspace(repo: Path) -> None:
    tools = {t.name: t for t in coding_tools()}
    async with Workspace.open(repo, name="tools") as ws:
        ctx = ws.context(check="true")
        assert ctx.root == ws.path and ctx.base == ws.base
        await tools["edit_file"].run({"path": "calc.py", "old": "a - b", "new": "a + b"}, ctx)
        await ws.commit("agent committed on its own")
        await tools["write_file"].run({"path": "later.py", "content": "y = 2\n"}, ctx)
        diff = await tools["git_diff"].run({}, ctx)
        assert "+    return a + b" in diff and "+y = 2" in diff  # both, against base
        assert diff == await ws.patch()
    assert_clean(repo)


async def test_removed_when_the_block_raises(repo: Path) -> None:
    seen: list[Path] = []

    async def crashing_agent() -> None:
        async with Workspace.open(repo, name="boom") as ws:
            seen.append(ws.path)
            (ws.path / "file.txt").write_text("work in progress\n")
            raise RuntimeError("agent crashed")

    with pytest.raises(RuntimeError, match="agent crashed"):
        await crashing_agent()
    assert seen and not seen[0].exists()
    assert_clean(repo)


async def test_removed_when_cancelled_mid_use(repo: Path) -> None:
    entered = False
    with anyio.CancelScope() as scope:
        async with Workspace.open(repo, name="cancelled") as ws:
            entered = True
            (ws.path / "file.txt").write_text("work in progress\n")
            scope.cancel()
            await anyio.sleep(30)
    assert entered and scope.cancelled_caught
    assert not ws.path.exists()
    assert_clean(repo)


async def test_removed_when_cancelled_while_opening(repo: Path) -> None:
    for delay in (0.0, 0.005, 0.01, 0.02, 0.04):
        with anyio.move_on_after(delay):
            async with Workspace.open(repo, name="early"):
                await anyio.sleep(30)
        assert_clean(repo)


async def test_bad_names_and_bases_are_refused(repo: Path) -> None:
    for name in ("", "../x", "a/b", ".hidden", "x.lock", "a..b", "-rf"):
        with pytest.raises(WorkspaceError, match="bad workspace name"):
            async with Workspace.open(repo, name=name):
                pass
    with pytest.raises(WorkspaceError, match="bad workspace run_id"):
        async with Workspace.open(repo, name="ok", run_id="r/1"):
            pass
    with pytest.raises(WorkspaceError, match="'nope' is not a commit"):
        async with Workspace.open(repo, name="ok", base="nope"):
            pass
    assert_clean(repo)


async def test_a_name_in_use_is_refused_without_harming_the_owner(repo: Path) -> None:
    async with Workspace.open(repo, name="same") as ws:
        with pytest.raises(WorkspaceError, match="in use"):
            async with Workspace.open(repo, name="same"):
                pass
        assert ws.path.is_dir() and branches(repo).split() == [ws.branch]
    assert_clean(repo)


CRASH = """
import os, sys, anyio
from pathlib import Path
from swarm.run._workspace import Workspace

async def main() -> None:
    async with Workspace.open(Path(sys.argv[1]), name=sys.argv[2], run_id="crashed") as ws:
        (ws.path / "half-done.txt").write_text("x")
        print(ws.path, flush=True)
        os._exit(9)  # no cleanup: as if killed

anyio.run(main)
"""


async def test_cleanup_stale_removes_what_a_crashed_run_left(repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    paths = []
    for name in ("w1", "w2"):
        done = await anyio.run_process(
            [sys.executable, "-c", CRASH, str(repo), name], env=env, check=False
        )
        assert done.returncode == 9, done.stderr.decode()
        paths.append(Path(done.stdout.decode().strip()))
    assert all(p.is_dir() for p in paths)
    assert len(branches(repo).split()) == 2
    # a branch left without its worktree (a crash in the middle of removal)
    sh(repo, "branch", f"{BRANCH_PREFIX}/crashed/w3", "HEAD")
    async with Workspace.open(repo, name="live", run_id="crashed") as live:
        assert await cleanup_stale(repo, run_id="other") == []
        removed = await cleanup_stale(repo)
        assert sorted(removed) == sorted([*paths, paths[0].with_name("w3")])
        assert live.path.is_dir()  # its owner (this process) is alive: kept
        assert branches(repo).split() == [live.branch]
    assert_clean(repo)
    assert await cleanup_stale(repo) == []


async def test_a_hundred_workspaces_at_once_on_one_repository(repo: Path) -> None:
    base = await git("rev-parse", "HEAD", cwd=repo)
    patches: dict[int, str] = {}
    paths: list[Path] = []

    async def agent(i: int) -> None:
        async with Workspace.open(repo, base=base, name=f"agent-{i}", run_id="wide") as ws:
            paths.append(ws.path)
            (ws.path / f"file{i}.txt").write_text(f"agent {i}\n")
            ws.written.note(f"file{i}.txt")
            patches[i] = await ws.patch()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(agent, i)
    assert len(paths) == len(set(paths)) == 100
    for i, patch in patches.items():
        assert patch.startswith(f"diff --git a/file{i}.txt b/file{i}.txt\nnew file mode")
        assert patch.endswith(f"@@ -0,0 +1 @@\n+agent {i}\n")
    assert len(patches) == 100
    assert not any(p.exists() for p in paths)
    assert_clean(repo)


async def test_git_helper_raises_with_gits_message(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not a git repository"):
        await git("status", cwd=tmp_path)
    assert await git("--version", cwd=tmp_path) == sh(tmp_path, "--version").rstrip("\n")


async def test_a_chain_of_gits_runs_in_order_and_stops_at_the_first_failure(
    tmp_path: Path,
) -> None:
    """`git_chain`: the commands run one after the other in one process start, in a path
    a shell would split or expand (space, quote, `$`); the first failure stops the rest
    and raises with git's message."""
    from swarm.run._git import git_chain

    odd = tmp_path / "a b'$HOME"
    odd.mkdir()
    sh(odd, "init", "-q", "-b", "main")
    (odd / "f.txt").write_text("one\n")
    sh(odd, "add", "f.txt")
    sh(odd, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (odd / "f.txt").write_text("edited\n")
    (odd / "junk.txt").write_text("untracked\n")
    (odd / "keep.txt").write_text("kept\n")
    await git_chain(("reset", "--hard", "--quiet"), ("clean", "-ffdxq", "-e", "keep.txt"), cwd=odd)
    assert (odd / "f.txt").read_text() == "one\n"
    assert not (odd / "junk.txt").exists() and (odd / "keep.txt").exists()
    (odd / "junk.txt").write_text("untracked\n")
    with pytest.raises(WorkspaceError, match=r"git reset --hard / clean -ffdxq failed.*bad-rev"):
        await git_chain(("reset", "--hard", "bad-rev"), ("clean", "-ffdxq"), cwd=odd)
    assert (odd / "junk.txt").exists()  # the clean after the failed reset did not run


def test_a_stale_packed_refs_lock_is_told(repo: Path) -> None:
    """A git killed mid-way leaves `packed-refs.lock`: every later ref deletion waits on it,
    then fails. A run says so at its start (`solve`'s warnings); a fresh one is some git at
    work."""
    from swarm.run._git import stale_ref_lock

    common = repo / ".git"
    assert stale_ref_lock(common) is None
    lock = common / "packed-refs.lock"
    lock.touch()
    assert stale_ref_lock(common) is None
    old = time.time() - 600
    os.utime(lock, (old, old))
    note = stale_ref_lock(common)
    assert note is not None and str(lock) in note and "10 min old" in note
