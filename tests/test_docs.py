"""The cookbook's examples run as written, and the docs build with warnings as errors."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_public_api import documented_modules
from tests.test_readme import calc_repo

DOCS = Path(__file__).parent.parent / "docs"


def run_page(name: str) -> dict[str, Any]:
    """The page's python blocks, executed in one fresh namespace."""
    text = (DOCS / "cookbook" / name).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks, f"no python block in {name}"
    namespace: dict[str, Any] = {"__name__": f"cookbook_{name[:-3]}"}
    exec(compile("\n".join(blocks), str(DOCS / "cookbook" / name), "exec"), namespace)
    return namespace


async def test_devin_like_agent(tmp_path: Path) -> None:
    patch = await run_page("devin.md")["main"](calc_repo(tmp_path))
    assert "+    return a + b" in patch


async def test_map_reduce_without_solve() -> None:
    summary = await run_page("map-reduce.md")["main"](["a.py", "bb.py", "ccc.py"])
    assert summary == "Reviewed: a.py: 1, bb.py: 2, ccc.py: 0"


async def test_an_mcp_tool(tmp_path: Path) -> None:
    out = await run_page("mcp.md")["main"](tmp_path)
    assert out == "Lyon: sunny, 21 C / Sunny in Lyon tomorrow."


async def test_approval() -> None:
    results = await run_page("approval.md")["main"]()
    assert results == ["dropped sessions", "error: not approved: users is live data", "finished"]


async def test_resuming_one_agent(tmp_path: Path) -> None:
    assert await run_page("resume.md")["main"](tmp_path) == ("A and B", 3)


async def test_streaming_a_model_call() -> None:
    assert await run_page("streaming.md")["main"]() == "tokens as they arrive "


async def test_testing_with_scripted_model() -> None:
    await run_page("testing.md")["main"]()


def test_every_cookbook_page_runs_here_and_is_in_the_nav() -> None:
    pages = sorted(p.name for p in (DOCS / "cookbook").glob("*.md"))
    run_here = sorted(set(re.findall(r'run_page\("([\w-]+\.md)"\)', Path(__file__).read_text())))
    assert pages == run_here
    nav = (DOCS.parent / "mkdocs.yml").read_text()
    assert all(f"cookbook/{page}" in nav for page in pages)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_docs_build_strict(tmp_path: Path) -> None:
    """mkdocs + mkdocstrings, every warning an error (CI runs the same in .ci/run)."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)],
        cwd=DOCS.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "api" / "index.html").read_text()
    assert "before_tool" in html
    for module in documented_modules():
        assert f'id="{module}"' in html, f"{module} is not rendered"
