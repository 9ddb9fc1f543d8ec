"""Test impact from imports (`swarm.run._impact`): which test files a change reaches, the
command that runs only them, and every case where the whole check runs instead. Real
files on disk, read as the checks would see them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from swarm.run._impact import Selection, changed_files, select

PYTEST = "python -m pytest -q -p no:cacheprovider"

SHOP = {
    "shop/__init__.py": "",
    "shop/money.py": "def cents(x):\n    return round(x * 100)\n",
    "shop/cart.py": "from .money import cents\n\n\ndef total(xs):\n    return cents(sum(xs))\n",
    "shop/tax.py": "def rate():\n    return 0.2\n",
    "shop/lazy.py": (
        "def load():\n    import importlib\n\n    return importlib.import_module('shop.tax')\n"
    ),
    "tests/__init__.py": "",
    "tests/conftest.py": "import pytest\n",
    "tests/test_money.py": "from shop.money import cents\n",
    "tests/test_cart.py": "from shop import cart\n",
    "tests/test_tax.py": "import shop.tax\n",
    "tests/test_lazy.py": "def test_it():\n    from shop.lazy import load\n",
    "tests/test_other.py": "import os\n",
}


def make(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def chosen(root: Path, changed: list[str], command: str = PYTEST) -> tuple[str, ...]:
    found = select(root, command, changed)
    assert isinstance(found, Selection), found
    return found.tests


def test_a_module_reaches_the_tests_that_import_it_directly_or_through_others(
    tmp_path: Path,
) -> None:
    root = make(tmp_path, SHOP)
    # cart imports money (relatively): a change to money reaches test_cart too
    assert chosen(root, ["shop/money.py"]) == ("tests/test_cart.py", "tests/test_money.py")
    assert chosen(root, ["shop/cart.py"]) == ("tests/test_cart.py",)
    # an import inside a function, and importlib.import_module with a literal name
    assert chosen(root, ["shop/tax.py"]) == ("tests/test_lazy.py", "tests/test_tax.py")


def test_the_command_keeps_its_options_and_runs_only_the_chosen_files(tmp_path: Path) -> None:
    root = make(tmp_path, SHOP)
    found = select(root, f"PYTHONHASHSEED=0 {PYTEST} -x -k 'not slow' tests", ["shop/cart.py"])
    assert isinstance(found, Selection), found
    assert found.command == (
        "PYTHONHASHSEED=0 python -m pytest -q -p no:cacheprovider -x -k 'not slow' "
        "tests/test_cart.py"
    )
    assert (found.tests, found.total) == (("tests/test_cart.py",), 5)
    assert found.describe() == "impact: 1 of 5 test files"


def test_an_option_whose_value_is_a_path_keeps_it(tmp_path: Path) -> None:
    root = make(tmp_path, {**SHOP, "slow/test_x.py": "import shop.cart\n"})
    found = select(root, f"{PYTEST} --ignore slow tests", ["shop/cart.py"])
    assert isinstance(found, Selection), found
    assert found.command == f"{PYTEST} --ignore slow tests/test_cart.py"


def test_the_interpreter_is_kept_as_written_for_the_shell_to_expand(tmp_path: Path) -> None:
    root = make(tmp_path, SHOP)
    found = select(root, "$PYTHON -m pytest -q", ["shop/cart.py"])
    assert isinstance(found, Selection), found
    assert found.command == "$PYTHON -m pytest -q tests/test_cart.py"


def test_a_changed_test_file_runs_with_the_tests_the_change_reaches(tmp_path: Path) -> None:
    root = make(tmp_path, SHOP)
    assert chosen(root, ["tests/test_other.py", "shop/cart.py"]) == (
        "tests/test_cart.py",
        "tests/test_other.py",
    )


def test_the_check_paths_bound_the_suite(tmp_path: Path) -> None:
    root = make(tmp_path, {**SHOP, "slow/test_money_slow.py": "import shop.money\n"})
    assert chosen(root, ["shop/money.py"], f"{PYTEST} tests") == (
        "tests/test_cart.py",
        "tests/test_money.py",
    )
    assert chosen(root, ["shop/money.py"]) == (
        "slow/test_money_slow.py",
        "tests/test_cart.py",
        "tests/test_money.py",
    )


def test_a_package_init_reaches_whoever_imports_the_package_or_a_module_in_it(
    tmp_path: Path,
) -> None:
    root = make(tmp_path, SHOP)
    assert len(chosen(root, ["shop/__init__.py"])) == 4  # all but test_other


def test_a_src_layout_and_a_tests_folder_without_init(tmp_path: Path) -> None:
    files = {
        "src/pkg/__init__.py": "",
        "src/pkg/core.py": "X = 1\n",
        "src/pkg/api.py": "from pkg.core import X\n",
        "tests/helpers.py": "from pkg import api\n",
        "tests/test_api.py": "from helpers import *\n",
        "tests/test_none.py": "import json\n",
    }
    root = make(tmp_path, files)
    assert chosen(root, ["src/pkg/core.py"]) == ("tests/test_api.py",)


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        (["tests/conftest.py"], "conftest.py changed"),
        (["shop/prices.json"], "not a Python module"),
        (["setup.py"], "setup"),
        (["shop/gone.py", "shop/cart.py"], "shop/gone.py was removed"),
        (["shop/unused.py"], "no test file reaches the change"),
        ([], "no file changed"),
    ],
)
def test_a_selection_it_cannot_trust_says_why(tmp_path: Path, changed: list[str], why: str) -> None:
    root = make(tmp_path, {**SHOP, "shop/unused.py": "", "setup.py": ""})
    found = select(root, PYTEST, changed)
    assert isinstance(found, str) and why in found, found


def test_a_module_a_conftest_imports_reaches_every_test(tmp_path: Path) -> None:
    root = make(tmp_path, {**SHOP, "tests/conftest.py": "from shop.tax import rate\n"})
    found = select(root, PYTEST, ["shop/tax.py"])
    assert found == "a conftest.py imports a changed module"


@pytest.mark.parametrize(
    ("command", "config", "why"),
    [
        ("python check.py", {}, "not a pytest run"),
        (f"{PYTEST} && ruff check .", {}, "not a plain pytest run"),
        (f"{PYTEST} {{files}}", {}, "not a plain pytest run"),
        (f"{PYTEST} tests/test_cart.py::test_x", {}, "names single tests"),
        (f"{PYTEST} --pyargs shop", {}, "--pyargs"),
        (f"{PYTEST} --basetemp=$TMPDIR/t", {}, "shell expansion"),
        (f"{PYTEST} --doctest-modules", {}, "doctests"),
        (PYTEST, {"pytest.ini": "[pytest]\naddopts = --doctest-modules\n"}, "doctests"),
        (
            PYTEST,
            {"pyproject.toml": "[tool.pytest.ini_options]\npython_files = ['check_*.py']\n"},
            "python_files",
        ),
        (PYTEST, {"setup.cfg": "[tool:pytest]\npython_files = *.py\n"}, "python_files"),
    ],
)
def test_a_check_it_cannot_scope_runs_whole(
    tmp_path: Path, command: str, config: dict[str, str], why: str
) -> None:
    root = make(tmp_path, {**SHOP, **config})
    found = select(root, command, ["shop/cart.py"])
    assert isinstance(found, str) and why in found, found


def test_testpaths_from_the_config_bound_the_suite(tmp_path: Path) -> None:
    files = {
        **SHOP,
        "slow/test_x.py": "import shop.cart\n",
        "slow/test_y.py": "import shop.tax\n",
        "tox.ini": "[pytest]\ntestpaths = slow\n",
    }
    root = make(tmp_path, files)
    assert chosen(root, ["shop/cart.py"]) == ("slow/test_x.py",)
    assert select(root, PYTEST, ["shop/__init__.py"]) == "every test file reaches the change"


def test_changed_files_reads_both_sides_of_a_patch() -> None:
    patch = (
        "diff --git a/shop/cart.py b/shop/cart.py\n--- a/shop/cart.py\n+++ b/shop/cart.py\n"
        "diff --git a/old.py b/new.py\nsimilarity index 90%\n"
    )
    assert changed_files(patch) == {"shop/cart.py", "old.py", "new.py"}
