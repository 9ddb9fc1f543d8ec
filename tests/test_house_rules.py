"""The house rules a reviewer would otherwise check by hand: no secrets in help(), and
every error class in `swarm/errors.py`.

No signature or repr evaluates the environment (`help(swarm.Router)` once printed every
provider key). Sizes are a review habit, not a test: one idea per module, a function you
can read in one screen (line caps pinned here once made modules of 391-400 lines).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import pydoc
import re
from pathlib import Path

import pytest

import swarm

PACKAGE = Path(swarm.__file__).parent


def _modules() -> list[str]:
    names = ["swarm"]
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="swarm."):
        if ".demo.repo" not in info.name and not info.name.endswith("__main__"):
            names.append(info.name)
    return names


def test_no_signature_or_help_shows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-house-rules-0123456789"
    monkeypatch.setenv("CEREBRAS_API_KEY", secret)
    leaks = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if getattr(obj, "__module__", None) != name or not callable(obj):
                continue
            try:
                text = str(inspect.signature(obj))
            except (TypeError, ValueError):
                continue
            if secret in text or "environ({" in text:
                leaks.append(f"{name}.{attr}{text[:80]}")
    assert not leaks, leaks
    assert secret not in pydoc.render_doc(swarm.Router)
    assert secret not in pydoc.render_doc(swarm.load_config)


SIGNALS = {"swarm.agent._tool.Finish"}
"""Exceptions that are not errors: `Finish` ends an agent's run with its summary."""


def test_every_error_class_is_in_errors_py() -> None:
    """One error tree to read and catch from: an exception class defined anywhere else is
    one a user cannot find (GaveUp, PlanError and WireError once were)."""
    elsewhere = []
    for name in _modules():
        if name == "swarm.errors":
            continue
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and f"{name}.{value.__qualname__}" not in SIGNALS
            ):
                elsewhere.append(f"{name}.{value.__qualname__}")
    assert elsewhere == []


def test_python_is_parsed_only_behind_the_lock() -> None:
    """`ast.parse` from two threads at once fails on CPython 3.11 (`swarm._pyast`): every
    parse in swarm and its built-in tools goes through `swarm._pyast`."""
    root = Path(__file__).parents[1]
    found = [
        f"{path.relative_to(root)}:{n}"
        for tree in (root / "swarm", root / "tools")
        for path in sorted(tree.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "ast.parse(" in line and path.name != "_pyast.py"
    ]
    assert found == []


def test_no_test_patches_swarm_with_monkeypatch() -> None:
    """Knobs are options passed in (a config section's field, a policy, an argument), not
    private module constants a test overwrites: what a test needs to set, a user may too."""
    tests = Path(__file__).parent
    patched = [
        f"{path.name}:{n}"
        for path in sorted(tests.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "monkeypatch.setattr(" in line and path.name != "test_house_rules.py"
    ]
    assert patched == []


def test_the_run_glossary_names_what_exists() -> None:
    """`swarm/run/__init__.py` draws the run's rooms and defines its nouns: every room it
    names is a module of `swarm.run`, and every class it names is defined in one (a
    renamed or folded class, `Crew` once, must leave the glossary too)."""
    import swarm.run

    text = swarm.run.__doc__ or ""
    named = set(re.findall(r"`([A-Za-z_][\w/]*)`", text))
    rooms = {n.rstrip("/") for n in named if n.startswith("_") or n == "journal"}
    classes = {n for n in named if n[0].isupper()}
    run_dir = PACKAGE / "run"
    missing_rooms = sorted(
        r for r in rooms if not (run_dir / f"{r}.py").exists() and not (run_dir / r).is_dir()
    )
    defined = {
        value.__name__
        for info in pkgutil.walk_packages([str(run_dir)], prefix="swarm.run.")
        for value in vars(importlib.import_module(info.name)).values()
        if inspect.isclass(value) and value.__module__.startswith("swarm.run")
    }
    assert rooms and classes
    assert missing_rooms == []
    assert sorted(classes - defined) == []
