"""What enters a workspace's patch, on real git: what the agent changed, never a check's
outputs, never a path matching `.swarmignore`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import anyio
import pytest

from swarm._sandbox import NoSandbox
from swarm.agent._tool import ToolContext, WriteLog
from swarm.agent._toolbox import coding_tools
from swarm.run._check import run_check
from swarm.run._workspace import Workspace
from tests.test_workspace import assert_clean, repo, sh

__all__ = ["repo"]  # the fixture

TOOLS = {t.name: t for t in coding_tools()}
CHECK = (
    "mkdir -p coverage .nyc_output && echo '<html>' > coverage/index.html"
    " && echo cov > .coverage && echo '{}' > .nyc_output/out.json && echo lcov > report.lcov"
)


def names(patch: str) -> set[str]:
    """Both sides of every file's header (a rename names two paths)."""
    out: set[str] = set()
    for line in patch.splitlines():
        if line.startswith("diff --git a/"):
            old, new = line.removeprefix("diff --git a/").split(" b/", 1)
            out |= {old, new}
    return out


async def run(ctx: ToolContext, command: str) -> str:
    return await TOOLS["run"].run({"command": command}, ctx)


async def test_a_checks_outputs_stay_out_and_the_tools_files_go_in(repo: Path) -> None:
    async with Workspace.open(repo, name="w") as ws:
        ctx = ws.context(check=CHECK)
        await TOOLS["edit_file"].run({"path": "calc.py", "old": "a - b", "new": "a + b"}, ctx)
        await TOOLS["write_file"].run({"path": "tests/test_calc.py", "content": "T = 1\n"}, ctx)
        await TOOLS["run_tests"].run({}, ctx)
        assert (await run_check(CHECK, ws.path, timeout_s=30)).passed  # as the coordinator
        await run(ctx, "echo x > gen.txt")
        assert (ws.path / "coverage" / "index.html").exists() and (ws.path / ".coverage").exists()
        patch = await ws.patch()
        assert names(patch) == {"calc.py", "tests/test_calc.py"}
        assert "+    return a + b" in patch and "+T = 1" in patch
        # git_diff shows the agent what its patch holds: not the file `run` made
        shown = await TOOLS["git_diff"].run({}, ctx)
        assert "b/tests/test_calc.py" in shown and "gen.txt" not in shown
    assert_clean(repo)


async def test_deletions_and_moves_made_with_run_are_in_the_patch(repo: Path) -> None:
    async with Workspace.open(repo, name="w") as ws:
        ctx = ws.context()
        # (plain `mv`: git's index is read-only in the sandbox a workspace's context has)
        await run(ctx, "rm old.txt && mkdir lib && mv calc.py lib/calc.py && mv data.bin d.bin")
        await run(ctx, ": > empty.txt")  # an empty file is nobody's move
        patch = await ws.patch()
        assert names(patch) == {"old.txt", "calc.py", "lib/calc.py", "data.bin", "d.bin"}
        assert "deleted file mode 100644" in patch and "-remove me" in patch
        async with Workspace.open(repo, name="other") as other:
            await other.apply(patch)
            assert (
                other.path / "lib" / "calc.py"
            ).read_text() == "def add(a, b):\n    return a - b\n"
            assert (other.path / "d.bin").read_bytes() == b"\x00\x01binary"
            assert not (other.path / "calc.py").exists() and not (other.path / "old.txt").exists()
            assert await other.patch() == patch  # what `apply` made counts as written
    assert_clean(repo)


async def test_swarmignore_keeps_paths_out_even_tracked_ones(tmp_path: Path) -> None:
    repo = tmp_path / "own"
    repo.mkdir()
    sh(repo, "init", "-q", "-b", "main")
    (repo / ".swarmignore").write_text("# check outputs\ncoverage/\n*.lcov\n")
    (repo / "report.lcov").write_text("old\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "more.lcov").write_text("old\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-qm", "checked-in coverage")
    async with Workspace.open(repo, name="w") as ws:
        ctx = ws.context()
        await TOOLS["write_file"].run({"path": "report.lcov", "content": "new\n"}, ctx)
        await TOOLS["write_file"].run({"path": "coverage/a.html", "content": "x"}, ctx)
        await TOOLS["write_file"].run({"path": "pkg/coverage/b", "content": "x"}, ctx)
        await TOOLS["write_file"].run({"path": "kept.py", "content": "K = 1\n"}, ctx)
        await run(ctx, "rm sub/more.lcov")
        assert names(await ws.patch()) == {"kept.py"}
    assert_clean(repo)


async def test_binary_files_the_tools_wrote_are_in_the_patch(repo: Path) -> None:
    async with Workspace.open(repo, name="w") as ws:
        (ws.path / "img.png").write_bytes(b"\x89PNG\x00\x01\x02")
        ws.written.note("img.png")  # a tool that writes bytes notes what it wrote
        (ws.path / "data.bin").write_bytes(b"\x00\x03binary")
        patch = await ws.patch()
        assert names(patch) == {"img.png", "data.bin"} and patch.count("GIT binary patch") == 2
    assert_clean(repo)


async def test_gitignored_files_stay_out_even_when_written(repo: Path) -> None:
    async with Workspace.open(repo, name="w") as ws:
        ctx = ws.context()
        await TOOLS["write_file"].run({"path": ".gitignore", "content": "build/\n"}, ctx)
        await TOOLS["write_file"].run({"path": "build/out.o", "content": "o"}, ctx)
        assert names(await ws.patch()) == {".gitignore"}
    assert_clean(repo)


async def test_the_workspace_owns_its_write_log(repo: Path) -> None:
    """The log is the workspace's, passed to the contexts it makes; a context built by
    hand for its directory notes there only when given it (no registry by path)."""
    async with Workspace.open(repo, name="w") as ws:
        assert ws.context().written is ws.written
        by_hand = ToolContext(root=ws.path, written=ws.written)
        await TOOLS["write_file"].run({"path": "new.py", "content": "x = 1\n"}, by_hand)
        assert ws.written.paths() == {"new.py"} and "new.py" in names(await ws.patch())
        own = ToolContext(root=ws.path)
        assert own.written is not ws.written and not own.written.paths()


def test_the_write_log_is_safe_across_threads() -> None:
    fresh = WriteLog()

    async def many() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(anyio.to_thread.run_sync, fresh.note, f"f{i}")

    anyio.run(many)
    assert len(fresh.paths()) == 200


@pytest.mark.parametrize("path", ["a b.txt", "[x]*.txt", "ünï.txt"])
async def test_odd_file_names_go_in_literally(repo: Path, path: str) -> None:
    async with Workspace.open(repo, name="w") as ws:
        ctx = ws.context()
        await TOOLS["write_file"].run({"path": path, "content": "1\n"}, ctx)
        (ws.path / "[x]-other.txt").write_text("not written\n")
        patch = await ws.patch()
        assert patch.count("diff --git") == 1 and "+1" in patch
    assert_clean(repo)


async def test_the_worktree_diff_and_the_index_copy_give_the_same_patch(repo: Path) -> None:
    """With nothing untracked to add the patch is the worktree against base (two git
    processes); with a check's output beside a deletion it is built on a copy of the
    index. Both must give the same patch for the same edits. The commands stage changes
    themselves (`git rm`, `git add`): only unsandboxed, git's index being read-only in a
    sandbox."""
    async with Workspace.open(repo, name="w") as ws:
        ctx = dataclasses.replace(ws.context(), sandbox=NoSandbox())
        (ws.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")  # same size
        await run(ctx, "rm old.txt && git rm -q data.bin && chmod +x calc.py")
        await run(ctx, "echo new > added.txt && git add added.txt && echo later >> added.txt")
        short = await ws.patch()
        assert names(short) == {"calc.py", "old.txt", "data.bin", "added.txt"}
        assert "+    return a + b" in short and "new mode 100755" in short
        await run(ctx, "echo out > check-output.log")  # unwritten, beside a deletion
        assert await ws.patch() == short
    assert_clean(repo)


def _listings(trace: Path) -> int:
    """The listings of untracked files (`git ls-files --others`) git's trace recorded."""
    if not trace.exists():
        return 0
    starts = [json.loads(line) for line in trace.read_text().splitlines()]
    return sum(
        e.get("event") == "start" and "ls-files" in e["argv"] and "--others" in e["argv"]
        for e in starts
    )


async def test_edits_to_tracked_files_need_one_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tools changed tracked files only, nothing was deleted: the worktree against base
    is the patch, without a listing of the untracked files (one git process, not two).
    A written file the diff does not show (put back as it was) brings the listing back.
    Git's own trace (`GIT_TRACE2_EVENT`) counts the listings."""
    trace = tmp_path / "git-trace.json"
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    async with Workspace.open(repo, name="w") as ws:
        ctx = ws.context()
        grown = (ws.path / "calc.py").read_text() + "x = 1\n"  # keeps what calc.py defines
        await TOOLS["write_file"].run({"path": "calc.py", "content": grown}, ctx)
        assert (await run_check(CHECK, ws.path, timeout_s=30)).passed  # outputs beside
        patch = await ws.patch()
        assert names(patch) == {"calc.py"} and "+x = 1" in patch
        assert _listings(trace) == 0
        old = (repo / "old.txt").read_text()
        for content in ("changed\n", old):
            await TOOLS["write_file"].run({"path": "old.txt", "content": content}, ctx)
        assert await ws.patch() == patch
        assert _listings(trace) == 1
    assert_clean(repo)
