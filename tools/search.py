"""The search tool: regex search over the workspace, printed as `path:line:text`.

Uses ripgrep (`rg`) when it is on the workspace's PATH (it honours .gitignore); otherwise a
Python walk that skips hidden and common build directories (`workspace_files`). Loaded by
`swarm.toolbox.coding_tools()` as `swarm._builtin_tools.search`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from pathlib import Path

import anyio.to_thread

from swarm.agent._confined import read_regular
from swarm.agent._tool import ToolContext, tool
from swarm.agent._toolbox import resolve_path, run_command, workspace_files
from swarm.errors import ToolError

MAX_LINE_CHARS = 300
"""Longer matching lines (minified code) are clipped."""


@tool(read_only=True)
async def search(
    ctx: ToolContext, pattern: str, path: str | None = None, glob: str | None = None
) -> str:
    """Search file contents for a regular expression; prints `path:line:text` per match.

    Args:
        pattern: Regular expression to look for.
        path: File or directory to search, relative to the workspace root. Default: all.
        glob: Only search files whose name matches this glob, e.g. `*.py`.
    """
    root = ctx.root.resolve()
    target = resolve_path(ctx, path or ".")
    if not target.exists():
        raise ToolError(f"no such file or directory: {path!r}")
    rel = target.relative_to(root).as_posix()
    rg = shutil.which("rg", path=ctx.env.get("PATH", os.defpath))
    if rg:
        found = await _ripgrep(ctx, rg, pattern, rel, glob)
    else:
        found = await anyio.to_thread.run_sync(_python_search, root, pattern, rel, glob)
    return found or f"no matches for {pattern!r}"


async def _ripgrep(ctx: ToolContext, rg: str, pattern: str, rel: str, glob: str | None) -> str:
    argv = [rg, "--line-number", "--no-heading", "--with-filename", "--color=never"]
    argv += ["--sort=path", f"--max-columns={MAX_LINE_CHARS}", "--max-columns-preview"]
    if glob:
        argv += ["--glob", glob]
    argv += ["--regexp", pattern]
    if rel != ".":
        argv += ["--", rel]
    result = await run_command(argv, ctx)
    if result.exit_code == 1:
        return ""
    if result.exit_code != 0:
        raise ToolError(f"search failed: {result.output.strip()}")
    return result.output.rstrip("\n")


def _glob_matches(rel: str, glob: str) -> bool:
    if "/" not in glob:
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], glob)
    return fnmatch.fnmatchcase(rel, glob) or fnmatch.fnmatchcase(rel, glob.removeprefix("**/"))


def _python_search(root: Path, pattern: str, rel: str, glob: str | None) -> str:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"bad regular expression {pattern!r}: {exc}") from None
    hits: list[str] = []
    for file in workspace_files(root, rel):
        name = file.relative_to(root).as_posix()
        if glob and not _glob_matches(name, glob):
            continue
        data = read_regular(file)  # never a FIFO's open, which waits for a writer
        if data is None:
            continue
        if b"\0" in data[:8192]:
            continue
        for number, line in enumerate(data.decode(errors="replace").splitlines(), start=1):
            if regex.search(line):
                hits.append(f"{name}:{number}:{line[:MAX_LINE_CHARS]}")
    return "\n".join(hits)
