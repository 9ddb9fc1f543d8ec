"""Judging a check's output: test ids read whole, and a rerun of only the failed tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from swarm.run._check import Checker, failures_in, rerun_command
from swarm.run._environment import CheckEnvironment


def test_failed_ids_are_read_whole_spaces_and_all() -> None:
    output = (
        "FAILED tests/test_pager.py::test_echo_via_pager[test0 - one two] - AssertionError: x\n"
        "ERROR tests/test_a.py::TestX::test_y\n"
        "FAILED tests/test_b.py::test_c[a b] - ValueError\n"
    )
    assert failures_in(output) == {
        "tests/test_pager.py::test_echo_via_pager[test0 - one two]",
        "tests/test_a.py::TestX::test_y",
        "tests/test_b.py::test_c[a b]",
    }


@pytest.mark.parametrize(
    ("command", "rerun"),
    [
        ("python -m pytest -q tests/", "python -m pytest -q 'tests/t.py::test_x[a b]'"),
        ("pytest -x -k slow tests", "pytest -x 'tests/t.py::test_x[a b]'"),
        (
            ".venv/bin/python -m pytest -q -p no:cacheprovider src tests",
            ".venv/bin/python -m pytest -q -p no:cacheprovider 'tests/t.py::test_x[a b]'",
        ),
        ("make test", None),
        ("ruff check . && pytest", None),
    ],
)
def test_a_rerun_runs_only_the_failed_ids(command: str, rerun: str | None) -> None:
    assert rerun_command(command, ["tests/t.py::test_x[a b]"]) == rerun


async def test_a_check_killed_by_sigkill_is_not_remembered_for_its_tree(tmp_path: Path) -> None:
    """A node lost under a check kills it: the next check of that tree runs again, and a
    result that is a verdict (here, the pass) is then remembered."""
    runs = tmp_path / "runs"
    command = f'echo x >> {runs}; [ "$(wc -l < {runs})" -gt 1 ] || kill -9 $$'
    checker = Checker(CheckEnvironment.resolve(tmp_path, python=sys.executable))
    first = await checker(tmp_path, command, key="tree")
    assert first.exit_code in (-9, 137) and not first.passed
    second = await checker(tmp_path, command, key="tree")
    assert second.passed and not second.reused
    third = await checker(tmp_path, command, key="tree")
    assert third.passed and third.reused
    assert runs.read_text().count("x") == 2


def test_a_worktrees_environment_follows_os_environ_and_its_own_src(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The part of a check's environment that no worktree changes is made once (`env_for`
    runs at every check and agent), yet a changed `os.environ` is seen at the next call, a
    worktree's `src/` made meanwhile is on its PYTHONPATH, and a caller changing what it
    got changes nothing for the next."""
    environment = CheckEnvironment.resolve(tmp_path, python=sys.executable)
    first = environment.env_for(tmp_path)
    first["PATH"] = "/nowhere"
    assert environment.env_for(tmp_path)["PATH"] != "/nowhere"
    assert environment.env_for(tmp_path)["PATH"].startswith(str(Path(sys.executable).parent))
    monkeypatch.setenv("LC_SWARM_TEST", "one")
    assert environment.env_for(tmp_path)["LC_SWARM_TEST"] == "one"
    monkeypatch.setenv("LC_SWARM_TEST", "two")
    assert environment.env_for(tmp_path)["LC_SWARM_TEST"] == "two"
    assert environment.env_for(tmp_path)["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
    (tmp_path / "src").mkdir()
    assert environment.env_for(tmp_path)["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "src")
