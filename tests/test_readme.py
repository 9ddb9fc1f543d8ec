"""The README's code runs as written."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._sandbox import bwrap_problem
from swarm._tracing.semconv import SANDBOX_KIND
from swarm.config import load_config
from swarm.run._task import parse_task

README = Path(__file__).parent.parent / "README.md"


def python_block(after_heading: str) -> str:
    text = README.read_text()
    section = text[text.index(after_heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, f"no python block after {after_heading!r}"
    return match.group(1)


def test_readme_starts_with_install_and_test_commands() -> None:
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), re.DOTALL)
    assert first_block
    lines = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    test = ".venv/bin/python -m pytest -n 2 --dist loadfile"
    assert lines[:2] == ["bash .ci/install", test]
    ci = (README.parent / ".ci" / "run").read_text()
    assert f"{test}\n" in ci  # CI runs exactly the README's command


def calc_repo(tmp_path: Path) -> Path:
    """A git repository whose `add` subtracts, and a unittest that catches it."""
    repo = tmp_path / "calc"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text(
        "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True
        )
    return repo


async def test_devin_like_agent_example_fixes_a_repository(tmp_path: Path) -> None:
    repo = calc_repo(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(python_block("## A Devin-like agent"), "README.md", "exec"), namespace)
    patch = await namespace["fix_tests"](repo)
    assert "-    return a - b" in patch
    assert "+    return a + b" in patch
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


async def test_the_devin_like_agent_runs_its_commands_in_bubblewrap(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    """Unchanged, the example gets the best sandbox the machine offers (issue 34)."""
    if bwrap_problem() is not None:
        pytest.skip(f"bubblewrap cannot run here: {bwrap_problem()}")
    namespace: dict[str, Any] = {}
    exec(compile(python_block("## A Devin-like agent"), "README.md", "exec"), namespace)
    await namespace["fix_tests"](calc_repo(tmp_path))
    kinds = [(s.attributes or {}).get(SANDBOX_KIND) for s in spans.get_finished_spans()]
    ran = [kind for kind in kinds if kind is not None]
    assert ran and set(ran) == {"bwrap"}, kinds


def test_config_and_task_examples_load_as_written(tmp_path: Path) -> None:
    """Each `toml` block is a valid swarm.toml on its own; the task-file example parses."""
    text = README.read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 4
    for i, block in enumerate(blocks):
        path = tmp_path / f"block{i}" / "swarm.toml"
        path.parent.mkdir()
        path.write_text(block)
        load_config(path, env={})  # a ConfigError names the block's key
    main = next(i for i, block in enumerate(blocks) if "[tiers.reasoning]" in block)
    full = load_config(tmp_path / f"block{main}" / "swarm.toml", env={})
    assert full.tiers["reasoning"].models == ["moonshot/kimi-k2.6"]
    task_block = re.search(r"```markdown\n(.*?)```", text, re.DOTALL)
    assert task_block
    task = parse_task(task_block.group(1), source="README.md")
    assert task.title == "Rename calc_total to total_price"
    assert task.max_agents == 8
