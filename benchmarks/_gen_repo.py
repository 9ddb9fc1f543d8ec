"""A generated shop: a multi-module Python repository with a real pytest suite, for benchmarks.

`make_repo(root, modules)` writes and commits a `src/` layout package (`src/shop/m00.py`
... one module per product line, each with a couple of functions) and a test file per
module (`tests/test_m00.py` ...); each test file also imports two neighbouring modules, and
a basket test loops over them, so the suite does real work (about 2 s for 24 modules on
a 2-core machine; `SUITE_WORK` sets how much). `plan(modules)` is a plan file with one
subtask per module (the module and its test file), and `edits(i)` is the work a coder does
on module `i`: type hints and a docstring on `price`, a new `bulk_price`, and a test for it.
The suite is green before and after every edit, and no two subtasks touch the same file,
so every subtask can merge cleanly in any order.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SUITE_WORK", "Edit", "edits", "make_repo", "module_path", "plan", "suite_path"]

SUITE_WORK = 100_000
"""Loop iterations of each module's basket test: what makes the suite take real time."""

_PYPROJECT = """\
[project]
name = "shop"
version = "0.1.0"
requires-python = ">=3.11"

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["src"]
"""

_MODULE = '''\
"""Product line {nn} of the shop: unit prices and discounts."""

RATE = {rate}


def price(quantity):
    return quantity * RATE + 1


def discount(total, percent):
    if not 0 <= percent <= 100:
        raise ValueError(f"percent out of range: {{percent}}")
    return total - total * percent // 100
'''

_TEST = '''\
"""Tests of product line {nn}, and of a basket across its neighbours."""

import pytest

from shop import {a}, {b}, {m}


def test_price():
    assert {m}.price(2) == 2 * {m}.RATE + 1


@pytest.mark.parametrize("percent", [0, 10, 50, 100])
def test_discount(percent):
    assert {m}.discount(200, percent) == 200 - 2 * percent


def test_discount_rejects_bad_percent():
    with pytest.raises(ValueError):
        {m}.discount(10, 101)


def test_basket():
    lines = ({m}, {a}, {b})
    total = 0
    for q in range({work}):
        line = lines[q % 3]
        total += line.discount(line.price(q), q % 101)
    assert total == {expected}
'''

_PRICE = "def price(quantity):\n    return quantity * RATE + 1\n"
_PRICE_TYPED = '''\
def price(quantity: int) -> int:
    """The price of `quantity` units: the rate per unit plus a fixed fee of 1."""
    return quantity * RATE + 1


def bulk_price(quantity: int, percent: int) -> int:
    """The price of `quantity` units with `percent` off."""
    return discount(price(quantity), percent)
'''
_TEST_ANCHOR = "def test_price():\n"
_TEST_BULK = """\
def test_bulk_price():
    assert {m}.bulk_price(10, 50) == {m}.discount({m}.price(10), 50)


def test_price():
"""


@dataclass(frozen=True)
class Edit:
    """One `edit_file` call: replace `old` with `new` in `path`."""

    path: str
    old: str
    new: str


def name(i: int) -> str:
    return f"m{i:02d}"


def module_path(i: int) -> str:
    return f"src/shop/{name(i)}.py"


def suite_path(i: int) -> str:
    return f"tests/test_{name(i)}.py"


def _rate(i: int) -> int:
    return 3 + i % 17


def _basket(rates: tuple[int, int, int], work: int) -> int:
    """What `test_basket` computes, worked out here so the test asserts a real number."""
    total = 0
    for q in range(work):
        price = q * rates[q % 3] + 1
        total += price - price * (q % 101) // 100
    return total


def make_repo(root: Path, modules: int, *, work: int = SUITE_WORK) -> None:
    """Write the shop with `modules` product lines into `root` (created) and commit it."""
    (root / "src" / "shop").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(_PYPROJECT)
    (root / "src" / "shop" / "__init__.py").write_text('"""A shop, one module a line."""\n')
    for i in range(modules):
        a, b = (i + 1) % modules, (i + 7) % modules
        (root / module_path(i)).write_text(_MODULE.format(nn=f"{i:02d}", rate=_rate(i)))
        expected = _basket((_rate(i), _rate(a), _rate(b)), work)
        test = _TEST.format(
            nn=f"{i:02d}", m=name(i), a=name(a), b=name(b), work=work, expected=expected
        )
        (root / suite_path(i)).write_text(test)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", f"shop with {modules} product lines")


def _git(root: Path, *args: str) -> None:
    command = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args]
    subprocess.run(command, cwd=root, check=True, capture_output=True)


def plan(modules: int) -> dict[str, Any]:
    """One subtask per module, named after it; its files are the module and its test."""
    return {
        "subtasks": [
            {
                "id": name(i),
                "title": f"type and extend product line {i:02d}",
                "instructions": (
                    f"In {module_path(i)}: add type hints and a docstring to `price`, add "
                    f"`bulk_price(quantity, percent)`, and test it in {suite_path(i)}."
                ),
                "files": [module_path(i), suite_path(i)],
                "depends_on": [],
            }
            for i in range(modules)
        ]
    }


def edits(i: int) -> list[Edit]:
    """The coder's edits for module `i`; the suite stays green after them."""
    return [
        Edit(module_path(i), _PRICE, _PRICE_TYPED),
        Edit(suite_path(i), _TEST_ANCHOR, _TEST_BULK.format(m=name(i))),
    ]
