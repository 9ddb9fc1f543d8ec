"""Files a subtask names that its change leaves as they were (`swarm.run._untouched`)."""

from __future__ import annotations

from pathlib import Path

from swarm.run._untouched import untouched_files, untouched_prompt


def _diff(*paths: str) -> str:
    return "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-x\n+y\n" for p in paths
    )


def test_named_files_the_change_leaves_alone_are_untouched(tmp_path: Path) -> None:
    # "Add type hints to every public function in pricing.py, stock.py and report.py"
    files = ["inventory/pricing.py", "inventory/stock.py", "inventory/report.py"]
    assert untouched_files(_diff("inventory/pricing.py"), files, tmp_path) == [
        "inventory/stock.py",
        "inventory/report.py",
    ]
    assert untouched_files(_diff(*files), files, tmp_path) == []


def test_a_new_file_a_renamed_one_and_a_change_made_elsewhere(tmp_path: Path) -> None:
    made = "diff --git a/inventory/item.py b/inventory/item.py\nnew file mode 100644\n"
    made += "--- /dev/null\n+++ b/inventory/item.py\n@@ -0,0 +1 @@\n+x\n"
    files = ["inventory/item.py", "inventory/__init__.py"]
    assert untouched_files(made, files, tmp_path) == ["inventory/__init__.py"]
    moved = "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\n"
    moved += "rename to new.py\n"
    assert untouched_files(moved + _diff("a.py"), ["a.py", "old.py", "new.py"], tmp_path) == []
    # all of the work in files the planner did not list: its list was a guess
    assert untouched_files(_diff("shared.py"), ["a.py", "b.py"], tmp_path) == []


def test_tests_folders_and_wildcards_are_left_out(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    files = ["a.py", "tests/test_a.py", "a_test.py", "conftest.py", "docs", "src/", "*.md"]
    assert untouched_files(_diff("a.py"), files, tmp_path) == []
    assert untouched_files(_diff("a.py"), ["a.py", "check_a.py"], tmp_path, ["check_*.py"]) == []


def test_the_prompt() -> None:
    assert untouched_prompt(["inventory/stock.py", "inventory/report.py"]) == (
        "Your subtask names inventory/stock.py, inventory/report.py, and your change leaves "
        "them as they were. Do your subtask's part in each of them too (read_file shows a "
        "file), run run_tests, then call finish. If a file needs no change, call finish "
        "and say why."
    )
