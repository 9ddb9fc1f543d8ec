"""What the swarm's agents are told: their subtask's files shown with it."""

from __future__ import annotations

import os
from pathlib import Path

from swarm.agent._tool import ToolContext
from swarm.run._plan import Subtask
from swarm.run._roles import coder_prompt, mentions_text, named_symbols, shown_files
from swarm.run._task import Task


def test_an_agent_is_shown_its_files_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "big.py").write_text("x = 1\n" * 100)
    (tmp_path / "blob.bin").write_bytes(b"\0\1\2")
    (tmp_path.parent / "secret.txt").write_text("outside")
    os.symlink(tmp_path.parent / "secret.txt", tmp_path / "link.txt")
    ctx = ToolContext(root=tmp_path)
    files = ["pkg/calc.py", "pkg/new.py", "big.py", "blob.bin", "link.txt"]
    shown = shown_files(ctx, files, budget=300)
    assert shown.startswith("\n\nThe files as they are now:\n\n")
    assert "pkg/calc.py:\n```\ndef add(a, b):\n    return a + b\n```" in shown
    assert "pkg/new.py: (not there yet: create it with write_file)" in shown
    assert "big.py: (too long to show here: read it with read_file)" in shown
    assert "blob.bin" not in shown
    assert "outside" not in shown  # a link out of the workspace is not followed
    assert shown_files(ctx, []) == ""

    task = Task(title="Sum", instructions="Make add add.", check="pytest")
    st = Subtask(id="add", title="Fix add", instructions="Fix it.", files=["pkg/calc.py"])
    prompt = coder_prompt(task, st, shown_files(ctx, st.files))
    assert prompt.startswith(
        "Overall task: Sum\n\nThe whole task (other agents do the parts that are not yours):\n"
        "> Make add add.\n\nYour subtask: Fix add\n"
    )
    assert prompt.endswith("return a + b\n```")


def test_the_code_names_a_subtask_uses_are_the_ones_looked_up() -> None:
    st = Subtask(
        id="r",
        title="Rename calc_total to order_total",
        instructions="Use `Item.from_dict` in `report.py` and `summary(items)`; keep `str`. "
        "Export it from `inventory/__init__.py` with low_stock.",
        files=["report.py"],
    )
    names = named_symbols(st)
    assert names == ["Item", "from_dict", "summary", "calc_total", "order_total", "low_stock"]
    text = mentions_text(["a.py:3:calc_total(x)", "b.py:1:" + "y" * 200], names[:1])
    assert text.startswith("\n\nWhere `Item` appear in other files now:\n```\na.py:3:")
    assert "y" * 150 + "..." in text and mentions_text([], names) == ""
