"""The rename tool: a Python name renamed in every Python file of the workspace at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.errors import ToolError

RENAME = next(t for t in coding_tools() if t.name == "rename")

PRICING = '''"""Prices: calc_total adds up an order."""

__all__ = ["calc_total", "apply_discount"]


def calc_total(items):  # see calc_total_v2 for the old one
    total = 0
    for item in items:
        total += item["price"]
    return total


def calc_total_v2(items):
    return recalc_total(items)


def recalc_total(items):
    return calc_total(items)
'''
REPORT = """from inventory import pricing
from inventory.pricing import calc_total


def summary(items):
    return f"total {calc_total(items)}: {pricing.calc_total(items)}"


def wrapped(items, calc_total=calc_total):
    return calc_total(items=items)
"""
TEST = """from unittest import mock

from inventory.report import summary


def test_summary():
    with mock.patch("inventory.report.calc_total", return_value=3):
        assert summary([]) == "total 3: 0"
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "inventory").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "inventory" / "__init__.py").write_text("")
    (root / "inventory" / "pricing.py").write_text(PRICING)
    (root / "inventory" / "report.py").write_text(REPORT)
    (root / "tests" / "test_report.py").write_text(TEST)
    (root / "README.md").write_text("# inventory\n\nCall `calc_total(items)`.\n")
    (root / ".venv").mkdir()
    (root / ".venv" / "calc.py").write_text("calc_total = 1\n")  # not the project's
    return root


async def rename(root: Path, **args: object) -> tuple[str, ToolContext]:
    ctx = ToolContext(root=root)
    return await RENAME.run(args, ctx), ctx


async def test_every_use_is_renamed_and_nothing_else(ws: Path) -> None:
    out, ctx = await rename(ws, old="calc_total", new="order_total")
    assert out.startswith(
        "renamed calc_total to order_total in 3 file(s): inventory/pricing.py (4), "
        "inventory/report.py (6), tests/test_report.py (1)"
    )
    pricing = (ws / "inventory" / "pricing.py").read_text()
    assert pricing == (
        PRICING.replace("calc_total adds", "order_total adds")
        .replace('["calc_total"', '["order_total"')
        .replace("def calc_total(items):  #", "def order_total(items):  #")
        .replace("return calc_total(items)", "return order_total(items)")
    )
    assert "calc_total_v2" in pricing and "recalc_total" in pricing  # longer names kept
    report = (ws / "inventory" / "report.py").read_text()
    assert "calc_total" not in report
    assert "pricing.order_total(items)" in report and "order_total=order_total" in report
    assert '"inventory.report.order_total"' in (ws / "tests" / "test_report.py").read_text()
    assert (ws / ".venv" / "calc.py").read_text() == "calc_total = 1\n"  # not walked
    # the files it changed are the patch's; the README is listed for the model
    assert ctx.written.paths() == {
        "inventory/pricing.py",
        "inventory/report.py",
        "tests/test_report.py",
    }
    assert "Other files still show 'calc_total'" in out
    assert "README.md:3:Call `calc_total(items)`." in out
    # and the renamed code still works
    subprocess.run(
        [sys.executable, "-c", "from inventory.report import summary; print(summary([]))"],
        cwd=ws,
        check=True,
    )


async def test_a_plain_word_is_renamed_in_code_only(ws: Path) -> None:
    out, _ = await rename(ws, old="total", new="amount")
    assert out.startswith("renamed total to amount in 1 file(s): inventory/pricing.py (3)")
    text = (ws / "inventory" / "pricing.py").read_text()
    assert "amount = 0" in text and "amount += item" in text and "return amount" in text
    assert "calc_total adds up" in text  # prose and other names untouched
    (ws / "f.py").write_text('total = 1\nprint(f"total {{total}}: {total + 1:>{total}}")\n')
    await rename(ws, old="amount", new="total")
    await rename(ws, old="total", new="amount")
    assert (ws / "f.py").read_text() == (
        'amount = 1\nprint(f"total {{total}}: {amount + 1:>{amount}}")\n'
    )


async def test_bad_names_and_no_uses_are_told(ws: Path) -> None:
    with pytest.raises(ToolError, match="new must be a Python name"):
        await rename(ws, old="calc_total", new="order-total")
    with pytest.raises(ToolError, match="new must be a Python name"):
        await rename(ws, old="calc_total", new="class")
    with pytest.raises(ToolError, match="the same name"):
        await rename(ws, old="calc_total", new="calc_total")
    with pytest.raises(ToolError, match="no Python file uses the name 'nowhere'"):
        await rename(ws, old="nowhere", new="somewhere")
    # asked again once made, again and again by a small model: it is told it is made
    await rename(ws, old="calc_total", new="order_total")
    with pytest.raises(ToolError) as made:
        await rename(ws, old="calc_total", new="order_total")
    assert str(made.value) == (
        "no Python file uses the name 'calc_total'; 'order_total' is in inventory/pricing.py, "
        "inventory/report.py, tests/test_report.py: the rename looks made already. If it is, "
        "your change is done: call finish"
    )


async def test_a_file_that_does_not_parse_is_left_alone_and_named(ws: Path) -> None:
    broken = "def calc_total(:\n    '''never closed\n"
    (ws / "inventory" / "broken.py").write_text(broken)
    out, _ = await rename(ws, old="calc_total", new="order_total")
    assert "Not changed, as they do not parse: inventory/broken.py" in out
    assert (ws / "inventory" / "broken.py").read_text() == broken
