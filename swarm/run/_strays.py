"""Tests a change adds where the test runner never looks for them.

Asked to add `low_stock` to `stock.py` and test it, a small model wrote
`def test_low_stock()` at the bottom of `stock.py`. pytest collects tests only from
files named `test_*.py` or `*_test.py` (its `python_files`), so the test never ran, the
check passed on the old tests, and the subtask merged untested. A coder's change is read
for top-level `test_*` functions and `Test*` classes that assert, added to a Python file the
repository's pytest settings do not collect: the coder is asked once to move them into a
test file, and the report says what is still out of reach.

Only the patch and the repository's pytest settings are read: the rule costs nothing for
a change that adds no test.
"""

from __future__ import annotations

import configparser
import fnmatch
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from swarm.run._diff import python_sections

__all__ = ["Stray", "collected_patterns", "is_test_file", "stray_prompt", "stray_tests"]

DEFAULT_PATTERNS = ("test_*.py", "*_test.py")
"""pytest's own `python_files`."""
_ADDED_TEST = re.compile(r"^\+(?:async[ \t]+)?def[ \t]+(test_\w+)|^\+class[ \t]+(Test\w+)", re.M)
_ASSERTS = re.compile(r"\bassert\b|\braises\(")
_TOP_LEVEL = re.compile(r"^[+ ][^\s#]", re.MULTILINE)
_CONFIG_FILES = (
    ("pytest.ini", "pytest"),
    (".pytest.ini", "pytest"),
    ("pyproject.toml", ""),
    ("tox.ini", "pytest"),
    ("setup.cfg", "tool:pytest"),
)
"""Where pytest looks for its settings, in its order, with the section each file uses."""


@dataclass(frozen=True, slots=True)
class Stray:
    """A test the change adds to a file the test runner does not collect."""

    path: str
    name: str

    def __str__(self) -> str:
        return f"{self.name} in {self.path}"


def stray_tests(patch: str, patterns: tuple[str, ...] = DEFAULT_PATTERNS) -> list[Stray]:
    """The top-level tests `patch` adds to Python files whose names match none of
    `patterns` (pytest's `python_files`; `conftest.py` holds fixtures, not tests): the
    `test_*` functions and `Test*` classes whose added body asserts."""
    strays: list[Stray] = []
    for path, section in python_sections(patch):
        if is_test_file(PurePosixPath(path).name, patterns):
            continue
        for added in _ADDED_TEST.finditer(section):
            after = _TOP_LEVEL.search(section, added.end())
            body = section[added.end() : after.start() if after else len(section)]
            if _ASSERTS.search(body):  # a test asserts; `test_connection()` of a client not
                strays.append(Stray(path, added[1] or added[2]))
    return strays


def is_test_file(name: str, patterns: Sequence[str] = DEFAULT_PATTERNS) -> bool:
    """Whether pytest reads file `name` for tests or fixtures: it matches `patterns`
    (`python_files`), or it is a `conftest.py`."""
    return name == "conftest.py" or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def collected_patterns(root: Path) -> tuple[str, ...]:
    """The file names pytest collects tests from in the repository at `root`: the
    `python_files` of the file pytest takes its settings from (the first of pytest.ini,
    .pytest.ini, pyproject.toml with `[tool.pytest.ini_options]`, tox.ini with `[pytest]`
    and setup.cfg with `[tool:pytest]`), else pytest's default."""
    for name, section in _CONFIG_FILES:
        try:
            text = (root / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = _from_toml(text) if name == "pyproject.toml" else _from_ini(text, section)
        if found is not None:  # pytest's settings are here, whether they name files or not
            return found or DEFAULT_PATTERNS
    return DEFAULT_PATTERNS


def _from_ini(text: str, section: str) -> tuple[str, ...] | None:
    """`python_files` of `section` (empty when unset), or None without the section."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    if not parser.has_section(section):
        return None
    return tuple(parser.get(section, "python_files", fallback="").split())


def _from_toml(text: str) -> tuple[str, ...] | None:
    """`python_files` of `[tool.pytest.ini_options]` (empty when unset), or None
    without the table."""
    try:
        tool = tomllib.loads(text).get("tool")
    except tomllib.TOMLDecodeError:
        return None
    pytest = tool.get("pytest") if isinstance(tool, dict) else None
    options = pytest.get("ini_options") if isinstance(pytest, dict) else None
    if not isinstance(options, dict):
        return None
    setting = options.get("python_files")
    if isinstance(setting, str):
        return tuple(setting.split())
    if isinstance(setting, list):
        return tuple(p for p in setting if isinstance(p, str))
    return ()


def stray_prompt(strays: list[Stray], patterns: tuple[str, ...], root: Path) -> str:
    """What a coder whose change adds tests where they are never run is told, once."""
    listed = "; ".join(map(str, strays))
    homes = dict.fromkeys(_home(s.path, root) for s in strays)
    one = len(strays) == 1
    return (
        f"Your change adds {listed}. The tests never run {'it' if one else 'them'}: pytest "
        f"collects tests only from files named {' or '.join(patterns)}. Move "
        f"{'it' if one else 'them'} (with the imports {'it needs' if one else 'they need'}) "
        f"into {', '.join(homes)}, delete {'it' if one else 'them'} where "
        f"{'it is' if one else 'they are'} now, run run_tests, then call finish."
    )


def _home(path: str, root: Path) -> str:
    """The test file for module `path`: an existing `test_<name>.py` where the tests
    are, else `tests/test_<name>.py`."""
    module = PurePosixPath(path)
    wanted = f"test_{module.stem}.py"
    for folder in ("tests", "test", str(module.parent)):
        if (root / folder / wanted).is_file():
            return str(PurePosixPath(folder) / wanted)
    return f"tests/{wanted} (a new file)"
