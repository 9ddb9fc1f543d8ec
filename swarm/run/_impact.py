"""Test impact from imports: the test files a change can reach, and the check that runs them.

pytest-testmon records, per test, the code it executed (coverage), and reruns a test when
a file it executed changed; it cannot see what it does not trace (data files, the
environment, configuration) and reruns everything when those change. Here the grain is
the module and the dependency is the import: a test file depends on every module it
imports, transitively, as read by `ast` from the repository's own Python files (imports
inside functions and `try` blocks included, and `importlib.import_module("x")` with a
literal name). No run is needed to build it: it is read from the tree being checked.

A subtask's check then runs only the test files that import (transitively) a module its
change touched, plus the test files it changed (`select`); the merge queue runs the whole
check on the integration branch, so nothing the selection misses lands unchecked.

The selection is trusted only where imports tell the whole story; otherwise the answer is
why not (a `str`), and the caller runs the whole check: a changed `conftest.py` (fixtures
and hooks reach tests without an import), a changed file that is not Python (data, setup,
configuration), a changed module a `conftest.py` imports, a change no test file reaches, a
check that is not a plain pytest run, or pytest configured to collect other files than
`test_*.py` / `*_test.py` or doctests of modules.
"""

from __future__ import annotations

import ast
import configparser
import hashlib
import os
import re
import shlex
import tomllib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from swarm._pyast import parse as parse_python

__all__ = ["Selection", "changed_files", "select", "unselectable"]


@dataclass(frozen=True)
class Selection:
    """The test files a change reaches, and the check command that runs only them."""

    command: str
    tests: tuple[str, ...]
    """Test files to run (repository paths, sorted)."""
    total: int
    """Test files the whole check collects."""

    def describe(self) -> str:
        return f"impact: {len(self.tests)} of {self.total} test files"


_PYTEST = re.compile(r"(?:^|\s)(?:\S*/)?(?:pytest|py\.test)(?:\s|$)|-m\s+pytest(?:\s|$)")
_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "build", "dist", "site-packages"})
_CONFIG_KEYS = ("python_files", "testpaths", "addopts")
_DIFF_PATHS = re.compile(r"^diff --git a/(.+?) b/(.+?)$", re.MULTILINE)


def changed_files(patch: str) -> frozenset[str]:
    """The repository paths a git patch touches (both sides of a rename)."""
    return frozenset(p for m in _DIFF_PATHS.finditer(patch) for p in m.groups())


def unselectable(command: str, changed: Iterable[str]) -> str | None:
    """Why no selection of `command`'s tests can be trusted for the `changed` paths, as far
    as the command and the paths alone tell (no file is read); None: `select` may find one."""
    if not any(True for _ in changed):
        return "no file changed"
    split = _split_pytest(command)
    if isinstance(split, str):
        return split
    _, words = split
    if any("$" in w or w.startswith("~") for w in words):
        return "the check's pytest arguments use shell expansion"
    if "--pyargs" in words:
        return "the check names packages (--pyargs)"
    return None


def select(root: Path, command: str, changed: Iterable[str]) -> Selection | str:
    """The test files of `command`'s suite in `root` that the `changed` paths reach, as a
    command running only those; or why the selection cannot be trusted (run it all)."""
    changed = sorted(set(changed))
    split = _split_pytest(command)
    if (why := unselectable(command, changed)) is not None or isinstance(split, str):
        return why or "the check is not a pytest run"
    head, words = split
    scope = _paths_in(root, words)
    if any("::" in w for w in scope):
        return "the check names single tests"
    config = _pytest_config(root)
    if isinstance(config, str):
        return config
    if "--doctest-modules" in words or "--doctest-modules" in config.get("addopts", ""):
        return "the check collects doctests from modules"
    files = _python_files(root)
    for path in changed:
        why = _untrusted(path) or (
            None if path in files else f"{path} was removed (what imported it is not known)"
        )
        if why:
            return why
    roots = scope or config.get("testpaths", "").split() or ["."]
    tests = sorted(f for f in files if _is_test(f) and _under(f, roots))
    if not tests:
        return "no test files found"
    graph = _ImportGraph(root, files)
    reached = graph.importers_of([p for p in changed if p in files])
    if any(Path(f).name == "conftest.py" for f in reached):
        return "a conftest.py imports a changed module"
    chosen = sorted({*(f for f in reached if f in tests), *(p for p in changed if p in tests)})
    if not chosen:
        return "no test file reaches the change"
    if len(chosen) == len(tests):
        return "every test file reaches the change"
    kept = [w for w in words if w not in scope]
    return Selection(f"{head} {shlex.join([*kept, *chosen])}", tuple(chosen), len(tests))


def _split_pytest(command: str) -> tuple[str, list[str]] | str:
    """The command up to pytest (prefix and interpreter, as written: `$PYTHON` and `~`
    stay the shell's to expand) and pytest's own words."""
    match = _PYTEST.search(command)
    if match is None:
        return "the check is not a pytest run"
    if any(c in command for c in ("&&", "||", ";", "|", "`", "$(", ">", "<", "{files}")):
        return "the check is not a plain pytest run"
    try:
        shlex.split(command[: match.end()])
        return command[: match.end()].rstrip(), shlex.split(command[match.end() :])
    except ValueError:
        return "the check could not be read as a shell command"


_VALUE_OPTIONS = frozenset(
    {
        "-k",
        "-m",
        "-p",
        "-c",
        "-o",
        "-W",
        "-n",
        "--rootdir",
        "--deselect",
        "--ignore",
        "--ignore-glob",
        "--confcutdir",
        "--basetemp",
        "--junitxml",
        "--maxfail",
        "--tb",
    }
)
"""pytest options whose value is the next word (kept with it, never taken for a path)."""


def _paths_in(root: Path, words: list[str]) -> list[str]:
    """The words of a pytest command line that name paths to test (not option values)."""
    paths: list[str] = []
    value = False
    for word in words:
        if value:
            value = False
        elif word in _VALUE_OPTIONS:
            value = True
        elif not word.startswith("-") and (root / word.split("::")[0]).exists():
            paths.append(word)
    return paths


def _untrusted(path: str) -> str | None:
    name = Path(path).name
    if name == "conftest.py":
        return f"{path} changed (fixtures and hooks reach tests without an import)"
    if not name.endswith(".py"):
        return f"{path} changed (not a Python module: no import reaches it)"
    if name in ("setup.py", "noxfile.py", "fabfile.py"):
        return f"{path} changed (setup, not imported by tests)"
    return None


def _pytest_config(root: Path) -> dict[str, str] | str:
    """pytest's settings that decide what it collects, from the first file that has a
    pytest section (pytest's own order); or why they rule a selection out."""
    found: dict[str, str] | None = None
    for name, section in (
        ("pytest.ini", "pytest"),
        (".pytest.ini", "pytest"),
        ("pyproject.toml", None),
        ("tox.ini", "pytest"),
        ("setup.cfg", "tool:pytest"),
    ):
        path = root / name
        if not path.is_file():
            continue
        try:
            found = _read_section(path, section)
        except (ValueError, configparser.Error, UnicodeDecodeError) as exc:
            return f"{name} could not be read ({type(exc).__name__})"
        if found is not None:
            break
    found = found or {}
    if "python_files" in found:
        return "pytest's python_files is set (tests are not only test_*.py)"
    return found


def _read_section(path: Path, section: str | None) -> dict[str, str] | None:
    if section is None:
        table = tomllib.loads(path.read_text()).get("tool", {}).get("pytest", {})
        options = table.get("ini_options")
        if not isinstance(options, dict):
            return None
        return {
            k: " ".join(map(str, v)) if isinstance(v, list) else str(v)
            for k, v in options.items()
            if k in _CONFIG_KEYS
        }
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(path.read_text())
    if not parser.has_section(section):
        return None
    return {k: v for k, v in parser.items(section) if k in _CONFIG_KEYS}


def _is_test(path: str) -> bool:
    name = Path(path).name
    return name.startswith("test_") or name.endswith("_test.py")


def _under(path: str, roots: Sequence[str]) -> bool:
    for root in roots:
        root = os.path.normpath(root)
        if root == "." or path == root or path.startswith(root.rstrip("/") + "/"):
            return True
    return False


def _python_files(root: Path) -> frozenset[str]:
    """The repository's Python files (hidden directories, virtual environments and build
    output left out; symlinked directories not followed)."""
    out: set[str] = set()
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _SKIP_DIRS
            and not d.endswith(".egg-info")
            and not (here / d / "pyvenv.cfg").exists()
        ]
        rel = here.relative_to(root)
        out.update((rel / f).as_posix() for f in files if f.endswith(".py"))
    return frozenset(out)


class _ImportGraph:
    """Which of the repository's Python files import which, read with `ast`."""

    def __init__(self, root: Path, files: frozenset[str]) -> None:
        self.root = root
        self.by_name: dict[str, set[str]] = {}
        """Module name -> files: each file is named as from its top package's parent
        (pytest's rootdir-relative import), from the repository root, and from `src/`."""
        for f in files:
            for name in _names_of(f, files):
                self.by_name.setdefault(name, set()).add(f)
        self.importers: dict[str, set[str]] = {}
        for f in files:
            for target in self._imports_of(f, files):
                if target != f:
                    self.importers.setdefault(target, set()).add(f)

    def importers_of(self, changed: Iterable[str]) -> set[str]:
        """Every file that imports one of `changed`, directly or through others."""
        seen: set[str] = set()
        todo = deque(changed)
        while todo:
            f = todo.popleft()
            for importer in self.importers.get(f, ()):
                if importer not in seen:
                    seen.add(importer)
                    todo.append(importer)
        return seen

    def _imports_of(self, f: str, files: frozenset[str]) -> set[str]:
        try:
            raw = _raw_imports((self.root / f).read_bytes())
        except OSError:
            return set()
        package = _package_of(f, files)
        out: set[str] = set()
        for module, level, names in raw:
            for name in _resolved(module, level, names, package):
                parts = name.split(".")
                for i in range(1, len(parts) + 1):  # `a.b.c` runs a, a.b and a.b.c
                    out.update(self.by_name.get(".".join(parts[:i]), ()))
        return out


_Raw = tuple[str, int, tuple[str, ...]]
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")
_IMPORT_CALL = re.compile(rb"""(?:import_module|__import__)\(\s*['"]([\w.]+)['"]""")


_SEEN: dict[bytes, tuple[_Raw, ...]] = {}
"""Imports by a digest of the source: worktrees of one repository share most files, and
parsing them is most of the selection's cost (0.5 s for boltons' 64 files, then 20 ms)."""
_SEEN_MAX = 20_000


def _raw_imports(source: bytes) -> tuple[_Raw, ...]:
    """A source's imports as (module, level, names), found in statements at any depth
    (functions, classes, `if`, `try`, `with`), plus `import_module("x")` calls with a
    literal name."""
    digest = hashlib.blake2b(source, digest_size=16).digest()
    if (seen := _SEEN.get(digest)) is None:
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        seen = _SEEN[digest] = _parsed_imports(source)
    return seen


def _parsed_imports(source: bytes) -> tuple[_Raw, ...]:
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return ()  # a file Python cannot read imports nothing here; its check says so
    out: list[_Raw] = [(m.decode(), 0, ()) for m in _IMPORT_CALL.findall(source)]
    todo: list[ast.AST] = [tree]
    while todo:  # statements only: walking every expression node cost 10x the parse
        node = todo.pop()
        if isinstance(node, ast.Import):
            out += [(alias.name, 0, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = tuple(a.name for a in node.names if a.name != "*")
            out.append((node.module or "", node.level, names))
        for block in _BLOCKS:
            todo.extend(getattr(node, block, ()))
    return tuple(out)


def _resolved(module: str, level: int, names: tuple[str, ...], package: str) -> list[str]:
    """The module names an import brings in (`from m import x`: m, and m.x if a module)."""
    if level:
        base = package.split(".") if package else []
        base = base[: len(base) - (level - 1)] if level > 1 else base
        module = ".".join([*base, *([module] if module else [])])
    subs = [f"{module}.{n}" if module else n for n in names]
    return [m for m in (module, *subs) if m]


def _package_of(f: str, files: frozenset[str]) -> str:
    """The dotted package a file's relative imports start from."""
    names = _names_of(f, files)
    name = names[0] if names else ""
    if Path(f).name == "__init__.py":
        return name
    return name.rpartition(".")[0]


def _names_of(f: str, files: frozenset[str]) -> list[str]:
    """The module names `f` may be imported by, the package-relative one first."""
    parts = list(Path(f).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    top = len(Path(f).parent.parts)
    while top > 0 and "/".join([*Path(f).parent.parts[:top], "__init__.py"]) in files:
        top -= 1  # climb while the folder is a package
    names = [".".join(parts[top:])]
    names.append(".".join(parts))
    if parts and parts[0] == "src":
        names.append(".".join(parts[1:]))
    return [n for n in dict.fromkeys(names) if n]
