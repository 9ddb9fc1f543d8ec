"""The package's import structure: every module imports alone, and imports run downward.

Layers, lowest first (STYLE.md, "A package per layer"): a module may import its own layer
and the layers below it, never one above. Imports inside functions and under
`TYPE_CHECKING` count too: a lazy import upward is still an upward dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "swarm"

_GROUND = {
    "errors",
    "messages",
    "model",
    "config",
    "budget",
    "catalog",
    "_serve",
    "_tokens",
    "_pyast",
}
_TOP = {"__init__", "__main__", "cli", "testing", "pytest_plugin", "_commands"}
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("ground", frozenset(_GROUND)),
    ("tracing", frozenset({"_tracing"})),
    ("providers", frozenset({"providers"})),
    ("routing", frozenset({"_routing"})),
    ("sandbox", frozenset({"_sandbox"})),
    ("agent", frozenset({"agent"})),
    ("run", frozenset({"run", "_demo"})),
    ("cluster", frozenset({"_cluster"})),
    ("simulate", frozenset({"_simulate"})),
    ("analysis", frozenset({"_analysis"})),
    ("viewer", frozenset({"_viewer"})),
    ("top", frozenset(_TOP)),
)

# Upward imports allowed, as (importing module, imported module): none. Kept as a named
# place so that a debt taken on is written down; the test fails when an entry is unneeded.
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        dirs = path.relative_to(PACKAGE).parents
        if not all((PACKAGE / d / "__init__.py").exists() for d in dirs):
            continue  # data, not the package (swarm/_demo/repo is a sample repository)
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def _layer(module: str) -> int:
    """Index of a module's layer; `swarm` itself (its `__init__`) is the top."""
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    for index, (_, members) in enumerate(LAYERS):
        if head in members:
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def _path_of(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _imports(module: str) -> set[str]:
    """The swarm modules `module` imports, anywhere in its body."""
    path = _path_of(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports_in(path.read_text(), package)


def _imports_in(source: str, package: str) -> set[str]:
    known = set(_modules())
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:  # `from swarm.x import y` may name the module x.y
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {name for name in found if name == "swarm" or name.startswith("swarm.")}


def _upward() -> list[tuple[str, str]]:
    bad = []
    for module in _modules():
        for target in sorted(_imports(module)):
            if _layer(target) > _layer(module):
                bad.append((module, target))
    return bad


def test_every_module_is_in_a_layer() -> None:
    for module in _modules():
        _layer(module)


def test_imports_run_downward() -> None:
    upward = _upward()
    new = [
        f"{m} ({LAYERS[_layer(m)][0]}) imports {t} ({LAYERS[_layer(t)][0]})"
        for m, t in upward
        if (m, t) not in ALLOWED_UPWARD
    ]
    assert not new, "imports run upward:\n" + "\n".join(new)
    stale = ALLOWED_UPWARD - set(upward)
    assert not stale, f"fixed, so remove from ALLOWED_UPWARD: {sorted(stale)}"


def test_the_layer_check_sees_lazy_and_relative_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import swarm.cli\n"
        "def f():\n    from swarm._viewer import serve\n"
        "from . import loader\nfrom .._tracing import semconv\n"
    )
    assert _imports_in(source, "swarm._analysis") == {
        "swarm.cli",
        "swarm._viewer.serve",
        "swarm._analysis.loader",
        "swarm._tracing.semconv",
    }
    assert _layer("swarm") > _layer("swarm._viewer.serve") > _layer("swarm._analysis.loader")


_FORK_EACH = """
import importlib, os, sys, traceback
for dep in sys.stdin.read().split():  # third-party only (a head start, best effort)
    try:
        importlib.import_module(dep)
    except Exception:
        pass
import swarm  # what importing any of its modules first runs: the same in every child
running = {}
def reap():
    pid, status = os.wait()
    if status:
        print(running[pid])
    del running[pid]
for module in sys.argv[1:]:
    if len(running) >= (os.cpu_count() or 2):
        reap()
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(module)
        except BaseException:
            sys.stderr.write(f"== {module}\\n{traceback.format_exc()[-2000:]}")
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    running[pid] = module
while running:
    reap()
"""


def _third_party(modules: list[str]) -> str:
    """The modules (outside swarm) that importing `modules` loads, one per line."""
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    try:\n        importlib.import_module(m)\n"
        "    except Exception:\n        pass\n"  # the test itself says which and why
        "names = [n for n in sys.modules if n.split('.')[0] != 'swarm']\n"
        "print('\\n'.join(sorted(n for n in names if not n.startswith('__'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return proc.stdout


def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    """An import cycle shows when a module is the first one imported; try each first.

    Importing any `swarm.x` runs the package's `__init__` first, so each module is
    imported in a child forked from an interpreter that has just imported `swarm` (and the
    third-party modules swarm uses): the state a fresh interpreter would be in at that
    point, without paying for its start each time."""
    modules = [m for m in _modules() if m != "swarm.__main__"]  # __main__ runs the CLI
    proc = subprocess.run(
        [sys.executable, "-c", _FORK_EACH, *modules],
        cwd=ROOT,
        input=_third_party(modules),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not proc.stdout.split(), proc.stderr[-8000:]
