"""Tests a change adds where pytest never collects them (`swarm.run._strays`)."""

from __future__ import annotations

from pathlib import Path

from swarm.run._strays import DEFAULT_PATTERNS, Stray, collected_patterns, stray_prompt, stray_tests


def _patch(path: str, *added: str) -> str:
    lines = "\n".join(f"+{line}" for line in added)
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,2 +1,9 @@\n"
        f" def low_stock(stock, threshold=5):\n{lines}\n"
    )


def test_a_test_added_to_a_module_is_a_stray() -> None:
    # what the 1.5B model wrote when asked to add low_stock to stock.py and test it
    patch = _patch(
        "inventory/stock.py",
        "def test_low_stock():",
        "    assert low_stock({'a': 1}) == ['a']",
        "class TestLevels:",
        "    def test_none(self):",
        "        with pytest.raises(KeyError):",
        "            low_stock({})",
        "async def test_later():",
        "    assert True",
    )
    assert stray_tests(patch) == [
        Stray("inventory/stock.py", "test_low_stock"),
        Stray("inventory/stock.py", "TestLevels"),
        Stray("inventory/stock.py", "test_later"),
    ]


def test_tests_in_collected_files_methods_and_helpers_are_not_strays() -> None:
    test = ("def test_low_stock():", "    assert low_stock({}) == []")
    assert stray_tests(_patch("tests/test_stock.py", *test)) == []
    assert stray_tests(_patch("stock_test.py", *test)) == []
    assert stray_tests(_patch("tests/conftest.py", *test)) == []
    method = _patch("stock.py", "    def test_method(self):", "        assert self")
    assert stray_tests(method) == []  # not top level
    # a client's own `test_connection()` asserts nothing: not a test
    helper = _patch("db.py", "def test_connection(url):", "    return ping(url)", "x = 1")
    assert stray_tests(helper) == []
    assert stray_tests(_patch("db.py", "def test_connection(url):", "x = 1", "assert x")) == []
    assert stray_tests(_patch("README.md", "def test_x():", "    assert 1")) == []  # not Python


def test_the_repositorys_python_files_setting_decides(tmp_path: Path) -> None:
    assert collected_patterns(tmp_path) == DEFAULT_PATTERNS
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\npython_files = check_*.py\n")
    assert collected_patterns(tmp_path) == ("check_*.py",)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\npython_files = ["tests.py", "test_*.py"]\n'
    )
    assert collected_patterns(tmp_path) == ("tests.py", "test_*.py")  # before setup.cfg
    patch = _patch("shop/tests.py", "def test_low_stock():", "    assert True")
    assert stray_tests(patch, collected_patterns(tmp_path)) == []
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\npython_files =\n    check_*.py\n    *_check.py\n"
    )
    assert collected_patterns(tmp_path) == ("check_*.py", "*_check.py")  # pytest.ini first
    # a pytest.ini without the setting is still where pytest's settings are: the default
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    assert collected_patterns(tmp_path) == DEFAULT_PATTERNS
    (tmp_path / "pytest.ini").unlink()
    for broken in ("not [ toml", "[tool]\npytest = 1\n", "[tool.pytest]\nini_options = 2\n"):
        (tmp_path / "pyproject.toml").write_text(broken)  # not pytest's: setup.cfg is
        assert collected_patterns(tmp_path) == ("check_*.py",)
    (tmp_path / "tox.ini").write_text("[tox]\nenvlist = py311\n[pytest]\naddopts = -q\n")
    assert collected_patterns(tmp_path) == DEFAULT_PATTERNS  # tox.ini's [pytest], before setup.cfg


def test_the_prompt_names_the_test_file_to_move_to(tmp_path: Path) -> None:
    strays = [Stray("inventory/stock.py", "test_low_stock")]
    said = stray_prompt(strays, DEFAULT_PATTERNS, tmp_path)
    assert said == (
        "Your change adds test_low_stock in inventory/stock.py. The tests never run it: "
        "pytest collects tests only from files named test_*.py or *_test.py. Move it (with "
        "the imports it needs) into tests/test_stock.py (a new file), delete it where it is "
        "now, run run_tests, then call finish."
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_stock.py").write_text("")
    assert "into tests/test_stock.py, delete it" in stray_prompt(strays, DEFAULT_PATTERNS, tmp_path)
