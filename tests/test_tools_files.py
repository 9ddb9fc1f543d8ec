"""The file, search and git_diff tools, each confined to its workspace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from swarm.agent._tool import Tool, ToolContext
from swarm.agent._toolbox import coding_tools, resolve_path
from swarm.errors import ToolError

TOOLS = {t.name: t for t in coding_tools()}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "calc.py").write_text(
        "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    (root / "README.md").write_text("# calc\nadd and sub\n")
    (tmp_path / "outside.txt").write_text("secret outside\n")
    return root


def ctx_for(root: Path, **kw: object) -> ToolContext:
    return ToolContext(root=root, **kw)  # type: ignore[arg-type]


async def call(name: str, root: Path, /, **args: object) -> str:
    return await TOOLS[name].run(args, ctx_for(root))


async def test_read_file_numbers_lines_and_takes_ranges(ws: Path) -> None:
    out = await call("read_file", ws, path="src/calc.py")
    assert out.splitlines()[0] == "     1\tdef add(a, b):"
    assert out.splitlines()[-1] == "     6\t    return a - b"
    assert await call("read_file", ws, path="src/calc.py", start=5, end=6) == (
        "     5\tdef sub(a, b):\n     6\t    return a - b"
    )
    assert await call("read_file", ws, path="src/calc.py", start=6, end=99) == (
        "     6\t    return a - b"
    )
    with pytest.raises(ToolError, match=r"past the end: 'src/calc\.py' has 6 lines"):
        await call("read_file", ws, path="src/calc.py", start=7)
    with pytest.raises(ToolError, match="bad range"):
        await call("read_file", ws, path="src/calc.py", start=3, end=2)
    with pytest.raises(ToolError, match="no such file"):
        await call("read_file", ws, path="nope.py")
    with pytest.raises(ToolError, match="is a directory"):
        await call("read_file", ws, path="src")
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError, match="binary"):
        await call("read_file", ws, path="blob.bin")


async def test_read_file_truncates_long_files_with_a_hint(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 5001)))
    out = await TOOLS["read_file"].run({"path": "big.txt"}, ctx_for(ws, max_output_chars=2000))
    assert out.startswith("     1\tline 1\n")
    assert "characters cut" in out
    assert "  5000\tline 5000" in out
    assert out.endswith("(big.txt has 5000 lines; read a range with start and end)")
    assert len(out) < 2200


async def test_list_dir(ws: Path) -> None:
    assert await call("list_dir", ws) == "README.md\nsrc/"
    assert await call("list_dir", ws, path="src") == "calc.py"
    (ws / "empty").mkdir()
    assert await call("list_dir", ws, path="empty") == "(empty is empty)"
    with pytest.raises(ToolError, match="is a file"):
        await call("list_dir", ws, path="README.md")


async def test_write_file_creates_parents(ws: Path) -> None:
    out = await call("write_file", ws, path="pkg/sub/new.py", content="x = 1\n")
    assert out == "wrote 6 bytes to pkg/sub/new.py"
    assert (ws / "pkg" / "sub" / "new.py").read_text() == "x = 1\n"


async def test_a_path_missing_its_directory_names_the_file_it_means(ws: Path) -> None:
    with pytest.raises(ToolError, match=r"no such file: 'calc\.py'; did you mean 'src/calc\.py'\?"):
        await call("read_file", ws, path="calc.py")
    with pytest.raises(ToolError, match=r"did you mean 'src/calc\.py'\?"):
        await call("edit_file", ws, path="lib/calc.py", old="x", new="y")
    out = await call("write_file", ws, path="calc.py", content="x = 1\n")
    assert out == "wrote 6 bytes to calc.py (a new file; src/calc.py exists: did you mean that?)"


async def test_write_file_unindents_python_written_all_indented(ws: Path) -> None:
    """As the 1.5B model wrote a module inside a JSON string: every line indented. Over a
    file whose other definitions it would delete, it is a part of that file (see
    `test_an_indented_part_of_a_file_written_over_it_is_put_into_it`)."""
    indented = "\n    import math\n\n    def add(a, b):\n        return a + b\n    "
    out = await call("write_file", ws, path="src/calc.py", content=indented)
    assert "add put into the file" in out and "no longer" not in out
    assert (ws / "src" / "calc.py").read_text() == (
        "import math\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    out = await call("write_file", ws, path="src/new.py", content=indented)
    assert out.endswith("(every line was indented: written without that indent)")
    assert (
        ws / "src" / "new.py"
    ).read_text() == "import math\n\ndef add(a, b):\n    return a + b\n"


async def test_write_file_refuses_search_output_and_takes_off_read_files_numbers(
    ws: Path,
) -> None:
    """As the 1.5B model did: search's hits written over the README (refused, nothing
    written), and read_file's numbered lines written back (written without the numbers)."""
    (ws / "README.md").write_text("# calc\n\nfrom calc import add\n")
    hits = "README.md:3:from calc import total\nREADME.md:5:print(total(1))"
    with pytest.raises(ToolError, match=r"content for README\.md is search output"):
        await call("write_file", ws, path="README.md", content=hits)
    assert (ws / "README.md").read_text() == "# calc\n\nfrom calc import add\n"
    shown = await call("read_file", ws, path="src/calc.py")
    out = await call("write_file", ws, path="src/calc.py", content=shown.replace("a - b", "a + b"))
    assert out.endswith("(read_file's line numbers taken off)")
    assert (ws / "src" / "calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")


async def test_write_file_says_where_python_does_not_parse(ws: Path) -> None:
    out = await call("write_file", ws, path="src/new.py", content="def f(:\n    pass\n")
    assert "It is not valid Python (line 1: " in out
    assert (ws / "src" / "new.py").read_text() == "def f(:\n    pass\n"  # written as given
    # over a file that parses: refused, as edit_file refuses to break one
    before = (ws / "src" / "calc.py").read_text()
    with pytest.raises(ToolError, match=r"^refused: the content is not valid Python \(line 1"):
        await call("write_file", ws, path="src/calc.py", content="test_x() -> None:\n    pass\n")
    assert (ws / "src" / "calc.py").read_text() == before
    text = await call("write_file", ws, path="notes.txt", content="    indented\n")
    assert text == "wrote 13 bytes to notes.txt"


async def test_write_file_over_a_module_says_which_definitions_it_dropped(ws: Path) -> None:
    out = await call("write_file", ws, path="src/calc.py", content="def add(a, b):\n    pass\n")
    assert out == (
        "wrote 24 bytes to src/calc.py. It replaced the whole file: sub is no longer in it. "
        "If that was not meant, put back what is missing (edit_file changes part of a file)"
    )
    kept = await call(
        "write_file", ws, path="src/calc.py", content="def add(): ...\ndef sub(): ...\n"
    )
    assert kept == "wrote 30 bytes to src/calc.py"


@pytest.mark.parametrize("placeholder", ["...\n...", "# ...\n", "  …  "])
async def test_write_file_of_a_placeholder_over_a_file_is_refused(
    ws: Path, placeholder: str
) -> None:
    """A fixer of the 1.5B model wrote `...` lines over a module, three times."""
    before = (ws / "src" / "calc.py").read_text()
    for _ in range(2):  # refused each time, not once
        with pytest.raises(ToolError, match="the content is a placeholder"):
            await call("write_file", ws, path="src/calc.py", content=placeholder)
    assert (ws / "src" / "calc.py").read_text() == before
    await call("write_file", ws, path="new.py", content="...\n")  # a new file may be a stub


async def test_write_file_that_would_delete_most_of_a_module_is_refused_once(ws: Path) -> None:
    # a small model asked to add what was missing wrote the module anew as a class
    clobber = "class Calc:\n    def total(self):\n        return 0\n"
    ctx, args = ctx_for(ws), {"path": "src/calc.py", "content": clobber}
    with pytest.raises(ToolError) as refused:
        await TOOLS["write_file"].run(args, ctx)
    assert str(refused.value) == (
        "not written: this would replace the whole of src/calc.py and delete add, sub (2 of "
        "its 2 functions and classes). To change a part, use edit_file; to add to it, write "
        "it whole with what it has kept. To replace it anyway, call write_file again with "
        "the same content."
    )
    assert (ws / "src" / "calc.py").read_text().startswith("def add(a, b):")
    out = await TOOLS["write_file"].run(args, ctx)  # asked for again: meant
    assert out.startswith("wrote 50 bytes to src/calc.py. It replaced the whole file: add, sub")
    assert (ws / "src" / "calc.py").read_text() == clobber


async def test_edit_file_replaces_a_unique_match(ws: Path) -> None:
    out = await call(
        "edit_file",
        ws,
        path="src/calc.py",
        old="def add(a, b):\n    return a - b",
        new="def add(a, b):\n    return a + b",
    )
    assert out.startswith("edited src/calc.py at line 1:\n     1\tdef add(a, b):")
    assert "     2\t    return a + b" in out
    assert (ws / "src" / "calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")


async def test_an_edit_that_changes_nothing_is_refused(ws: Path) -> None:
    """The 1.5B model asked for `test_clamp` "added" it so three times, then said it was."""
    before = (ws / "src" / "calc.py").read_text()
    line = "def add(a, b):"
    with pytest.raises(ToolError, match=r"^`new` is the same as `old`: nothing would change"):
        await call("edit_file", ws, path="src/calc.py", old=line, new=line)
    assert (ws / "src" / "calc.py").read_text() == before


async def test_a_module_never_gains_an_import_of_itself(ws: Path) -> None:
    """The 1.5B model put `from mathutil import clamp` atop `mathutil/__init__.py`: the
    package then failed to import, and every test with it."""
    out = await call(
        "edit_file",
        ws,
        path="src/calc.py",
        old="def add(a, b):",
        new="from calc import add\nimport math\n\n\ndef add(a, b):",
    )
    assert "(left out `from calc import add`: src/calc.py is that module" in out
    text = (ws / "src" / "calc.py").read_text()
    assert text.startswith("import math\n\n\ndef add(a, b):") and "from calc" not in text
    typed = text.replace("def sub(a, b):", "def sub(a: int, b: int) -> int:")
    out = await call(
        "write_file", ws, path="src/calc.py", content=f"from src.calc import sub\n{typed}"
    )
    assert "(left out `from src.calc import sub`" in out
    assert (ws / "src" / "calc.py").read_text() == typed


async def test_edit_file_reports_every_place_when_ambiguous(ws: Path) -> None:
    with pytest.raises(ToolError, match=r"occurs 2 times .* \(at lines 2, 6\).*replace_all"):
        await call("edit_file", ws, path="src/calc.py", old="return a - b", new="return 0")


async def test_edit_file_replaces_every_occurrence_when_asked(ws: Path) -> None:
    """A rename: the real 1.5B model's `edit_file(old="calc_total", ...)` met several."""
    before = (ws / "src" / "calc.py").read_text()
    out = await call(
        "edit_file", ws, path="src/calc.py", old="return a - b", new="return 0", replace_all=True
    )
    assert out == "replaced 2 occurrences in src/calc.py (lines 2, 6)"
    assert (ws / "src" / "calc.py").read_text() == before.replace("return a - b", "return 0")


async def test_edit_file_shows_closest_candidates_when_missing(ws: Path) -> None:
    with pytest.raises(ToolError) as info:
        await call("edit_file", ws, path="src/calc.py", old="def ad(a,b):\n  return a-b", new="")
    message = str(info.value)
    assert message.startswith(
        "old text not found in 'src/calc.py'. closest candidates (copy `old` from them exactly):"
    )
    # the lines as they are, without read_file's numbers (a model copied those into `old`)
    assert "lines 1-4:\ndef add(a, b):\n    return a - b\n" in message
    with pytest.raises(ToolError) as small:  # a small file: shown whole, to copy from
        await call("edit_file", ws, path="src/calc.py", old="zzzzzzzzzzzz", new="")
    assert "no similar lines; the file now reads (copy `old` from it):\ndef add(a, b):\n" in str(
        small.value
    )
    (ws / "big.py").write_text("".join(f"value_{i} = {i}\n" for i in range(400)))
    with pytest.raises(ToolError, match="no similar lines found; read the file"):
        await call("edit_file", ws, path="big.py", old="zzzzzzzzzzzz", new="")
    with pytest.raises(ToolError, match="old is empty"):
        await call("edit_file", ws, path="src/calc.py", old="", new="x")
    with pytest.raises(ToolError, match=r"no such file: 'new\.py'; to create it, call write_file"):
        await call("edit_file", ws, path="new.py", old="x", new="y")


async def test_edit_file_takes_old_text_copied_with_read_files_line_numbers(ws: Path) -> None:
    shown = await call("read_file", ws, path="src/calc.py", start=1, end=2)
    out = await call(
        "edit_file", ws, path="src/calc.py", old=shown, new=shown.replace("a - b", "a + b")
    )
    assert out.startswith("edited src/calc.py at line 1 (old matched without its line numbers)")
    assert (ws / "src" / "calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    # some lines copied with their numbers, others typed: the 1.5B model's third try
    mixed = "def sub(a, b):\n     6\t    return a - b"
    out = await call(
        "edit_file", ws, path="src/calc.py", old=mixed, new="def sub(a, b):\n    return 0"
    )
    assert "(old matched without its line numbers)" in out
    assert (ws / "src" / "calc.py").read_text().endswith("def sub(a, b):\n    return 0\n")


async def test_edit_file_matches_one_place_whatever_its_indentation(ws: Path) -> None:
    (ws / "shop.py").write_text(
        "class Cart:\n    def total(self):  \n        return 0\n\n    def size(self):\n"
        "        return 0\n"
    )
    out = await call(
        "edit_file",
        ws,
        path="shop.py",
        old="def total(self):\n    return 0\n",
        new="def total(self):\n    return sum(self.prices)\n",
    )
    assert "(old matched ignoring indentation and spaces at line ends)" in out
    assert (ws / "shop.py").read_text() == (
        "class Cart:\n    def total(self):\n        return sum(self.prices)\n\n"
        "    def size(self):\n        return 0\n"
    )
    with pytest.raises(ToolError, match="old text not found"):  # two places: not guessed
        await call("edit_file", ws, path="src/calc.py", old="return a - b  ", new="return 0")


async def test_edit_file_keeps_crlf_line_endings(ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await call("edit_file", ws, path="win.txt", old="one\ntwo", new="one\n2")
    assert (ws / "win.txt").read_bytes() == b"one\r\n2\r\nthree\r\n"


@pytest.mark.parametrize("name", ["read_file", "write_file", "edit_file", "list_dir", "search"])
async def test_escapes_are_refused(ws: Path, tmp_path: Path, name: str) -> None:
    tool = TOOLS[name]
    outside = str(tmp_path / "outside.txt")
    os.symlink(tmp_path / "outside.txt", ws / "link.txt")
    os.symlink(tmp_path, ws / "linkdir")
    for path, reason in [
        ("../outside.txt", "outside the workspace"),
        ("src/../../outside.txt", "outside the workspace"),
        (outside, "outside the workspace"),
        ("link.txt", "symlink pointing outside"),
        ("linkdir/outside.txt", "symlink pointing outside"),
    ]:
        args = _args_for(tool, path)
        with pytest.raises(ToolError, match=reason):
            await tool.run(args, ctx_for(ws))
    assert (tmp_path / "outside.txt").read_text() == "secret outside\n"


def test_paths_resolve_as_a_full_resolve_does(ws: Path, tmp_path: Path) -> None:
    """Only a path's own parts are looked at under the (resolved once) root; the answer is
    that of resolving the whole path, the root reached through a symlink too."""
    (ws / "src" / "pkg").mkdir()
    os.symlink("pkg", ws / "src" / "inner")  # a symlink inside, pointing inside
    os.symlink(ws, tmp_path / "via")
    for root in (ws, tmp_path / "via"):
        ctx = ctx_for(root)
        for path in ["src/calc.py", "src/inner/x.py", "src/new/deeper/y.py", "README.md", "."]:
            assert resolve_path(ctx, path) == (root / path).resolve(), (root, path)
        assert resolve_path(ctx, "src/inner/x.py") == ws.resolve() / "src" / "pkg" / "x.py"


async def test_a_path_copied_with_the_workspace_s_own_location_is_the_file_in_it(
    ws: Path,
) -> None:
    """The 1.5B model's fixer edited `swarm-worktrees/<run>/_integration/mathutil/...`, the
    path a check's traceback showed, and was told no such file, twice."""
    ctx = ctx_for(ws)
    copied = "repo/.git/swarm-worktrees/run-1/ws/src/calc.py"
    assert resolve_path(ctx, copied) == ws.resolve() / "src" / "calc.py"
    out = await call(
        "edit_file", ws, path=copied, old="return a - b\n\n\n", new="return a + b\n\n\n"
    )
    assert out.startswith("edited src/calc.py at line 2")
    # nothing there past the name: the path as given
    assert resolve_path(ctx, "ws/missing.py") == ws.resolve() / "ws" / "missing.py"
    with pytest.raises(ToolError, match="outside the workspace"):
        resolve_path(ctx, "ws/../../outside.txt")


def _args_for(tool: Tool, path: str) -> dict[str, object]:
    if tool.name == "search":
        return {"pattern": "secret", "path": path}
    if tool.name == "write_file":
        return {"path": path, "content": "pwned"}
    if tool.name == "edit_file":
        return {"path": path, "old": "secret", "new": "pwned"}
    return {"path": path}


async def test_absolute_paths_inside_are_fine_and_git_is_read_only(ws: Path) -> None:
    assert "def add" in await call("read_file", ws, path=str(ws / "src" / "calc.py"))
    (ws / ".git").mkdir()
    with pytest.raises(ToolError, match=r"inside \.git"):
        await call("write_file", ws, path=".git/config", content="x")
    assert await call("list_dir", ws) == "README.md\nsrc/"


@pytest.fixture(params=["rg", "python"])
def search_ctx(request: pytest.FixtureRequest, ws: Path) -> ToolContext:
    (ws / "src" / "util.py").write_text("def helper():\n    return add(1, 2)\n")
    (ws / "notes.txt").write_text("add notes\n")
    (ws / ".hidden").mkdir()
    (ws / ".hidden" / "x.py").write_text("add hidden\n")
    # the Python fallback is used when rg is not on the workspace's PATH
    path = os.environ["PATH"] if request.param == "rg" else str(ws / "no-bin")
    return ctx_for(ws, env={"PATH": path})


async def test_search_prints_path_line_text(search_ctx: ToolContext) -> None:
    run = TOOLS["search"].run
    assert await run({"pattern": r"def \w+\("}, search_ctx) == (
        "src/calc.py:1:def add(a, b):\nsrc/calc.py:5:def sub(a, b):\nsrc/util.py:1:def helper():"
    )
    assert await run({"pattern": "add", "glob": "*.txt"}, search_ctx) == "notes.txt:1:add notes"
    assert await run({"pattern": "add", "path": "src/util.py"}, search_ctx) == (
        "src/util.py:2:    return add(1, 2)"
    )
    assert await run({"pattern": "add", "path": "src", "glob": "calc.*"}, search_ctx) == (
        "src/calc.py:1:def add(a, b):"
    )
    assert await run({"pattern": "nowhere_to_be_found"}, search_ctx) == (
        "no matches for 'nowhere_to_be_found'"
    )
    with pytest.raises(ToolError):
        await run({"pattern": "(unclosed"}, search_ctx)
    with pytest.raises(ToolError, match="no such file or directory"):
        await run({"pattern": "x", "path": "missing"}, search_ctx)


def _git(root: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_git_diff_shows_the_patch_and_leaves_the_index(ws: Path) -> None:
    """Edits to tracked files and the files the tools wrote; not other untracked files."""
    _git(ws, "init", "-q")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-qm", "base")
    assert await call("git_diff", ws) == "(no changes)"
    (ws / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    ctx = ctx_for(ws)  # one agent's context: its write log lives as long as it does
    await TOOLS["write_file"].run({"path": "new.py", "content": "print('new')\n"}, ctx)
    (ws / "artifact.txt").write_text("made by a check\n")
    diff = await TOOLS["git_diff"].run({}, ctx)
    assert "artifact.txt" not in diff
    assert "diff --git a/new.py b/new.py\nnew file mode 100644" in diff
    assert "+print('new')" in diff
    assert "-    return a - b\n+    return a + b" in diff
    assert _git(ws, "status", "--porcelain") == " M src/calc.py\n?? artifact.txt\n?? new.py\n"
    # one file's or one directory's part (a model asks for a file's diff)
    for path in ("src/calc.py", "src", "./src/"):
        part = await TOOLS["git_diff"].run({"path": path}, ctx)
        assert part.startswith("diff --git a/src/calc.py b/src/calc.py") and "new.py" not in part
    assert "diff --git a/new.py" in await TOOLS["git_diff"].run({"path": "new.py"}, ctx)
    assert await TOOLS["git_diff"].run({"path": "README.md"}, ctx) == "(no changes to README.md)"
    with pytest.raises(ToolError, match="outside"):
        await TOOLS["git_diff"].run({"path": "../outside.txt"}, ctx)


async def test_git_diff_outside_a_repository_is_a_tool_error(ws: Path) -> None:
    with pytest.raises(ToolError, match="git_diff failed"):
        await call("git_diff", ws)  # tmp_path is in no repository


async def test_an_edit_that_drops_a_definition_says_so(ws: Path) -> None:
    """A small model names a definition's first line as `old` meaning 'insert here'."""
    out = await call(
        "edit_file", ws, path="src/calc.py", old="def sub(a, b):", new="def mul(a, b):"
    )
    assert out.endswith(
        "Note: sub is no longer defined in it. To add code beside a definition, keep the "
        "definition's lines in `new`."
    )


async def test_a_whole_definition_put_over_anothers_first_line_goes_before_it(ws: Path) -> None:
    """What the 1.5B model did to 'add clamp' to a file with `add`: `old` the first line of
    `add`, `new` all of `clamp`. As written, `add`'s body would stay behind under `clamp`
    and `add` be gone (three fix rounds never found why); so `clamp` goes before `add`."""
    clamp = "def clamp(x, lo, hi):\n    return min(hi, max(lo, x))"
    out = await call("edit_file", ws, path="src/calc.py", old="def add(a, b):", new=clamp)
    assert out.startswith(
        "edited src/calc.py at line 1 (`old` held only the first line of `def add`: your code "
        "went before it and add was kept whole; to replace add, put all of it in `old`)"
    )
    assert (ws / "src" / "calc.py").read_text() == (
        f"{clamp}\n\n\ndef add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    # a method: one blank line; a rename of the header alone is a rename
    (ws / "shop.py").write_text("class Cart:\n    def total(self):\n        return 0\n")
    size = "    def size(self):\n        return 1\n"
    await call("edit_file", ws, path="shop.py", old="    def total(self):", new=size)
    assert (ws / "shop.py").read_text() == (
        f"class Cart:\n{size}\n    def total(self):\n        return 0\n"
    )
    await call("edit_file", ws, path="src/calc.py", old="def sub(a, b):", new="def minus(a, b):")
    assert "def minus(a, b):\n    return a - b" in (ws / "src" / "calc.py").read_text()


async def test_new_code_is_never_put_between_a_decorator_and_its_definition(ws: Path) -> None:
    (ws / "deco.py").write_text(
        "import functools\n\n\n@functools.cache\ndef add(a, b):\n    return a\n"
    )
    before = (ws / "deco.py").read_text()
    with pytest.raises(ToolError) as refused:
        await call(
            "edit_file",
            ws,
            path="deco.py",
            old="def add(a, b):",
            new="def mul(a, b):\n    return 0",
        )
    assert str(refused.value) == (
        "refused: `old` holds the first line of `def add` but not its body, and `new` defines "
        "other names: the body of add would be left under your code, and add gone. To add "
        "code beside it, make `new` your code followed by `old` unchanged; to replace add, "
        "put all of it in `old`"
    )
    assert (ws / "deco.py").read_text() == before


async def test_an_edit_that_would_break_python_is_refused_with_the_lines_it_would_make(
    ws: Path,
) -> None:
    """The 1.5B model's `return clamp(a, min(a, b), max(a, b)}`: written, it left a module
    that no test could import, and the fixers that followed never saw why."""
    before = (ws / "src" / "calc.py").read_text()
    with pytest.raises(ToolError) as refused:
        await call(
            "edit_file",
            ws,
            path="src/calc.py",
            old="    return a - b\n\n\ndef sub",
            new="    return min(a, max(a, b)}\n\n\ndef sub",
        )
    message = str(refused.value)
    assert message.startswith("refused: the edit would make src/calc.py invalid Python (line 2: ")
    assert "so the file is unchanged. The edited lines would read:\n     1\tdef add(a, b):\n" in (
        message
    )
    assert "     2\t    return min(a, max(a, b)}\n" in message
    assert message.endswith("Correct `new` and call edit_file again.")
    assert (ws / "src" / "calc.py").read_text() == before
    with pytest.raises(ToolError, match="invalid Python"):  # a rename that breaks it, too
        await call("edit_file", ws, path="src/calc.py", old="a, b", new="a b", replace_all=True)
    # a file already broken may be mended a step at a time; other files are not parsed
    (ws / "broken.py").write_text("def f(:\n    return [\n")
    await call("edit_file", ws, path="broken.py", old="def f(:", new="def f():")
    await call("edit_file", ws, path="README.md", old="# calc", new="# calc (")


async def test_writing_a_file_as_it_already_is_says_nothing_changed(ws: Path) -> None:
    """The 1.5B model wrote right code, then wrote it again and again, told each time only
    how many bytes it had written."""
    text = (ws / "src" / "calc.py").read_text()
    out = await call("write_file", ws, path="src/calc.py", content=text)
    assert (
        out
        == f"src/calc.py already holds exactly this content ({len(text)} bytes): nothing changed"
    )


async def test_a_new_definition_edited_into_being_goes_at_the_end(ws: Path) -> None:
    """The 1.5B model's `edit_file(old="def clamp(x, lo, hi):", new=<all of clamp>)` on a
    file with no clamp: it found nothing, again and again."""
    clamp = "def clamp(x, lo, hi):\n    return min(hi, max(lo, x))\n"
    out = await call("edit_file", ws, path="src/calc.py", old="def clamp(x, lo, hi):", new=clamp)
    assert out.startswith(
        "edited src/calc.py at line 9 (`old`, the first line of clamp, is not in the file: "
        "clamp is new, so it went at the end):"
    )
    text = (ws / "src" / "calc.py").read_text()
    assert text.endswith("def sub(a, b):\n    return a - b\n\n\n" + clamp)
    # not so: a definition the file has, an indented (method's) first line, other text
    for old, new in (
        ("def add(a, c):", "def add(a, c):\n    return 0"),
        ("    def size(self):", "    def size(self):\n        return 1"),
        ("def mul(a, b):", "x = 1"),
    ):
        with pytest.raises(ToolError, match="old text not found"):
            await call("edit_file", ws, path="src/calc.py", old=old, new=new)
    assert (ws / "src" / "calc.py").read_text() == text


async def test_a_new_definitions_first_line_may_come_without_its_colon(ws: Path) -> None:
    """The model's `old` was `def clamp(x, lo, hi) -> float`, copied without the colon that
    `new` has, and `new` indented with a tab."""
    clamp = "def clamp(x, lo, hi) -> float:\n\treturn min(max(x, lo), hi)"
    out = await call(
        "edit_file", ws, path="src/calc.py", old="def clamp(x, lo, hi) -> float", new=clamp
    )
    assert "clamp is new, so it went at the end" in out
    assert (ws / "src" / "calc.py").read_text().endswith("\n\n\n" + clamp + "\n")


async def test_an_indented_part_of_a_file_written_over_it_is_put_into_it(ws: Path) -> None:
    """The 1.5B model wrote each function it changed with write_file, every line indented
    (a part of a file): written whole, the module's other definitions went with it."""
    part = "    def sub(a, b):\n        return b - a\n\n    def mul(a, b):\n        return a * b\n"
    out = await call("write_file", ws, path="src/calc.py", content=part)
    assert out.endswith(
        "(every line was indented, as a part of a file is: sub, mul put into the file, each "
        "in place of the definition of its name or at the end; the rest of the file is as it "
        "was)"
    ), out
    assert (ws / "src" / "calc.py").read_text() == (
        "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return b - a\n"
        "\n\ndef mul(a, b):\n    return a * b\n"
    )
    # a part that loses nothing written whole (a new file, or one it keeps every name of)
    out = await call(
        "write_file", ws, path="src/new.py", content="    def f():\n        return 1\n"
    )
    assert out.endswith("(every line was indented: written without that indent)")


async def test_an_edit_made_again_says_it_is_already_made(ws: Path) -> None:
    """The 1.5B model renamed `calc_total`'s definition, then sent the same edit again and
    was shown candidates for the text it had just replaced."""
    edit = {"path": "src/calc.py", "old": "def sub(a, b):", "new": "def minus(a, b):"}
    await call("edit_file", ws, **edit)
    with pytest.raises(ToolError) as again:
        await call("edit_file", ws, **edit)
    assert str(again.value) == (
        "old text not found in 'src/calc.py', but `new` is there (line 5): this edit is "
        "already made"
    )


async def test_an_edit_made_again_is_refused_rather_than_defining_a_name_twice(ws: Path) -> None:
    """The 1.5B model sent the same edit three times (`old` the header of `add`, `new` a
    whole `clamp`): each was put beside `add`, and three passing `clamp`s were merged."""
    clamp = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
    await call("edit_file", ws, path="src/calc.py", old="def add(a, b):", new=clamp)
    once = (ws / "src" / "calc.py").read_text()
    assert once.count("def clamp") == 1
    with pytest.raises(ToolError) as refused:
        await call("edit_file", ws, path="src/calc.py", old="def add(a, b):", new=clamp)
    assert str(refused.value) == (
        "refused: src/calc.py would define clamp more than once (clamp at lines 1, 5), so the "
        "file is unchanged. If the definition there is what you meant, that change is already "
        "made (read_file shows the file); to change it, edit the one that is there."
    )
    assert (ws / "src" / "calc.py").read_text() == once
    with pytest.raises(ToolError, match="would define clamp, add, sub more than once"):
        await call("write_file", ws, path="src/calc.py", content=once + "\n\n" + once)
    # what was twice already may stay so, and decorated repeats (overloads) are fine
    (ws / "twice.py").write_text("def f():\n    pass\n\n\ndef f():\n    pass\n")
    await call("edit_file", ws, path="twice.py", old="    pass\n\n\n", new="    return 1\n\n\n")
    overloads = (
        "from typing import overload\n\n\n@overload\ndef g(x: int) -> int: ...\n\n\n"
        "@overload\ndef g(x: str) -> str: ...\n\n\ndef g(x):\n    return x\n"
    )
    assert (await call("write_file", ws, path="over.py", content=overloads)).startswith("wrote")
