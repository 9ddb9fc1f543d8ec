"""Names a subtask asks for that no file holds (`swarm.run._missing`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from swarm.run._missing import (
    asked_names,
    missing_names,
    missing_prompt,
    named_files,
    taken_prompt,
)


def test_the_names_a_subtask_asks_for() -> None:
    assert asked_names(
        "Add test_clamp to tests/test_mathutil.py",
        "Write clamp(x, lo, hi) in mathutil/__init__.py; export `Item` and run `pytest`, "
        "with print() and `json` as they are, sorted(x) and `if`.",
    ) == ["test_clamp", "clamp", "Item"]
    assert asked_names("do s1") == []
    # snake_case names are code, never prose; `_private` and `__all__` stay out
    assert asked_names("Rename calc_total to order_total, not _private or __all__.") == [
        "calc_total",
        "order_total",
    ]


async def test_a_name_is_held_by_a_tracked_or_a_new_file_as_a_whole_word(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("def clamp(x):\n    return x\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "a.py"], check=True)
    (tmp_path / "test_a.py").write_text("def test_clamps():\n    pass\n")  # new, untracked
    names = ["clamp", "test_clamps", "test_clamp", "Item"]
    assert await missing_names(tmp_path, names) == ["test_clamp", "Item"]
    assert await missing_names(tmp_path, []) == []


def test_the_coder_is_told_what_is_missing_and_where() -> None:
    told = missing_prompt(["test_clamp"], ("tests/test_m.py",))
    assert told.startswith("Your subtask asks for `test_clamp`, but no file in your worktree")
    assert "(your files: tests/test_m.py)" in told


def test_a_coder_whose_fenced_code_is_written_is_told_it_may_show_the_file() -> None:
    told = missing_prompt(["test_clamp"], ("tests/test_m.py", "README.md"), fenced=True)
    assert told == (
        "Your subtask asks for `test_clamp`, but no file in your worktree has it now. Add "
        "what is missing (your files: tests/test_m.py, README.md) by showing the whole new "
        "text of tests/test_m.py in a ```python fence under its path, or with edit_file or "
        "write_file, keeping what is there, then call `finish`."
    )
    assert "fence" not in missing_prompt(["x_y"], ("README.md",), fenced=True)


def test_the_files_a_text_names_that_are_there(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_m.py").write_text("")
    (tmp_path / "m.py").write_text("")
    text = "Add `clamp` to m.py and a test to tests/test_m.py, not to gone.py or ../m.py."
    assert named_files(tmp_path, text, "m.py again") == ("m.py", "tests/test_m.py")


def test_the_coder_is_told_what_its_change_took_away() -> None:
    told = taken_prompt({"order_total": "rename", "Item": "item"})
    assert told.startswith(
        "Your change takes away `order_total` (added by rename), `Item` (added by item): the "
        "task needs them"
    )
