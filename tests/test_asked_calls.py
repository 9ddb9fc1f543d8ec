"""Tool calls read against what the instructions ask (`swarm.run._asked_calls`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from swarm._sandbox import NoSandbox
from swarm.agent._loop import Agent
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.agent.hooks import StepInfo, Veto
from swarm.messages import ToolCall
from swarm.run._asked_calls import AskedRenames, KeptDefinitions, NotATool
from swarm.run._missing import asked_names, words
from swarm.testing import ScriptedModel, call

TASK = "Rename `calc_total` to `order_total`. Add the `Item` dataclass (name, price, qty)."
RENAME_CALC = '{"old": "calc_total", "new": "order_total"}'
SUBTASK = "Rename `calc_total` everywhere, then add the `Item` dataclass (name, price, qty)."


async def test_only_the_renames_the_instructions_name_run(tmp_path: Path) -> None:
    """A small model asked for a dataclass renamed ten names it was never asked to."""
    assert (
        await AskedRenames(words("Add the `Item` dataclass."), words(TASK)).before_tool(
            StepInfo("coder", 1, []), ToolCall(id="1", name="rename", arguments=RENAME_CALC)
        )
        is not None
    )  # the task's rename is another subtask's
    readme = AskedRenames(words("Update the README's example."), words(TASK), ("README.md",))
    vetoed = await readme.before_tool(
        StepInfo("coder", 1, []), ToolCall(id="1", name="rename", arguments=RENAME_CALC)
    )
    assert isinstance(vetoed, Veto) and vetoed.reason == (
        "Not renamed: `rename` changes Python code, and your files (README.md) are not "
        'Python. Where they show `calc_total`, change it with edit_file (old: "calc_total", '
        'new: "order_total", replace_all: true).'
    )
    (tmp_path / "pricing.py").write_text(
        "def calc_total(items):\n    return sum(i['price'] for i in items if i['name'])\n"
    )
    model = ScriptedModel(
        [
            call("rename", old="name", new="item_name"),  # `item_name`: named nowhere
            call("rename_symbol", old="price", new="item_price"),  # runs as a rename
            call("rename", old="calc_total", new="order_total"),
            call("finish", summary="done"),
        ]
    )
    agent = Agent[str](
        "coder",
        model=model,
        tools=coding_tools(),
        hooks=(AskedRenames(words(SUBTASK), words(TASK)),),
        context=ToolContext(root=tmp_path, sandbox=NoSandbox()),
    )
    result = await agent.run("go")
    assert result.finished
    told = [r.messages[-1].content or "" for r in model.requests[1:]]
    assert told[0] == (
        "error: vetoed: Not renamed: your subtask does not ask to rename `name` to "
        "`item_name`. Rename only what your subtask asks to (another subtask may do the "
        "task's other renames); every other name stays as it is."
    )
    assert "does not ask to rename `price` to `item_price`" in told[1]
    assert told[2].startswith("renamed calc_total to order_total in 1 file(s)")
    assert (tmp_path / "pricing.py").read_text() == (
        "def order_total(items):\n    return sum(i['price'] for i in items if i['name'])\n"
    )


async def test_a_call_to_the_function_the_subtask_asks_for_is_told_to_write_it(
    tmp_path: Path,
) -> None:
    """Asked to add `low_stock`, a small model called a tool `low_stock` with a schema."""
    asked = "Add a function `low_stock` to `stock.py` that returns sorted names."
    (tmp_path / "stock.py").write_text("def in_stock(stock, name):\n    return stock[name] > 0\n")
    model = ScriptedModel(
        [
            call("low_stock", stock={"type": "dict"}, threshold={"type": "integer"}),
            call("restock", name="bolt"),  # no tool, and not a name it asks for
            call("in_stock", name="bolt"),  # a function of its file
            call("add_low_stock", threshold=2),  # named after the subtask's title
            call("finish", summary="done"),
        ]
    )
    agent = Agent[str](
        "coder",
        model=model,
        tools=coding_tools(),
        hooks=(NotATool(frozenset(asked_names(asked)), ("stock.py",), True, tmp_path),),
        context=ToolContext(root=tmp_path, sandbox=NoSandbox()),
    )
    assert (await agent.run("go")).finished
    told = [r.messages[-1].content or "" for r in model.requests[1:]]
    assert told[0].startswith(
        "error: `low_stock` is not a tool: it is code your subtask asks you to write in "
        "stock.py. To write it, show its code in a ```python fence under the file's path, "
        "or call edit_file or write_file; then call finish. The tools are:\n"
    )
    assert told[1].startswith("error: unknown tool 'restock'.")
    assert told[2].startswith(
        "error: `in_stock` is not a tool: it is code in stock.py. To change it, call "
        "edit_file on stock.py; then call finish. The tools are:\n"
    )
    assert told[3].startswith(
        "error: `add_low_stock` is not a tool: `low_stock` is code your subtask asks you to "
        "write in stock.py."
    )


MATH = '''"""Math."""


def add(a, b):
    """The sum."""
    return a + b


class Box:
    def size(self):
        return 1
'''
ADD = 'def add(a, b):\n    """The sum."""\n    return a + b\n'
CLAMP = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
INFO = StepInfo("coder", 1, [])


def committed(root: Path) -> None:
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
        command = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args]
        subprocess.run(command, cwd=root, check=True, capture_output=True)


TEST_ADD = "def test_add():\n    assert add(2, 3) == 5\n"
TEST = "def test_clamp():\n    assert clamp(5, 0, 3) == 3\n"


async def test_an_edit_that_puts_new_code_in_the_place_of_a_definition_keeps_it(
    tmp_path: Path,
) -> None:
    """The 1.5B model asked to add `clamp` replaced the whole `add` with it, then, sent
    back to put `add` back, did it again; sent back for `test_clamp`, it wrote the test
    file without `test_add`."""
    (tmp_path / "m.py").write_text(MATH)
    (tmp_path / "test_m.py").write_text(f"from m import add\n\n\n{TEST_ADD}")
    committed(tmp_path)  # what the agent starts from: what it did not add, it keeps
    model = ScriptedModel(
        [
            call("edit_file", path="m.py", old=ADD, new=CLAMP),
            call("edit_file", path="m.py", old=CLAMP, new="def lo():\n    pass\n"),
            call("write_file", path="test_m.py", content=f"from m import clamp\n\n\n{TEST}"),
            call("finish", summary="done"),
        ]
    )
    named = words("Add a function `clamp(x, lo, hi)` to m.py")
    agent = Agent[str](
        "coder",
        model=model,
        tools=coding_tools(),
        hooks=(KeptDefinitions(named, tmp_path),),
        context=ToolContext(root=tmp_path, sandbox=NoSandbox()),
    )
    assert (await agent.run("go")).finished
    told = [r.messages[-1].content or "" for r in model.requests[1:]]
    assert told[0].endswith(
        "\n(Kept `add`: no instruction asks to remove it. Your new code went in beside it.)"
    )
    assert "Kept" not in told[1]  # `clamp` is named: that edit runs as written
    assert told[2].startswith("wrote ") and told[2].endswith(
        "(Kept `test_add`: no instruction asks to remove it. Your new code went in beside it.)"
    )
    assert (tmp_path / "test_m.py").read_text() == (
        f"from m import add\nfrom m import clamp\n\n\n{TEST_ADD}\n\n{TEST}"
    )
    assert (tmp_path / "m.py").read_text() == MATH.replace(ADD, f"def lo():\n    pass\n\n\n{ADD}")


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("def add(a, b):", CLAMP, "a first line alone: edit_file keeps the body itself"),
        (
            "    def size(self):\n        return 1\n",
            "    def area(self):\n        return 2\n",
            "a method",
        ),
        (ADD, CLAMP.replace("clamp", "add_twice"), "the task names `add`, to replace"),
        (ADD, "def fine():\n    pass\n", "the task names `add`"),
        ('"""Math."""\n', CLAMP, "not a definition"),
    ],
)
async def test_an_edit_the_instructions_ask_for_or_not_at_a_definition_runs_as_written(
    tmp_path: Path, old: str, new: str, why: str
) -> None:
    (tmp_path / "m.py").write_text(MATH)
    committed(tmp_path)
    hook = KeptDefinitions(words("Replace `add` with `add_twice`"), tmp_path)
    edit = ToolCall(
        id="1", name="edit_file", arguments=json.dumps({"path": "m.py", "old": old, "new": new})
    )
    assert await hook.before_tool(INFO, edit) is None, why
    replace_all = json.dumps({"path": "m.py", "old": ADD, "new": CLAMP, "replace_all": True})
    kept = KeptDefinitions(words("Add clamp"), tmp_path)
    assert (
        await kept.before_tool(INFO, ToolCall(id="2", name="edit_file", arguments=replace_all))
        is None
    )


async def test_an_edit_renaming_a_definition_no_instruction_names_is_vetoed(
    tmp_path: Path,
) -> None:
    """A small model's fixer made `def test_add` into `def test_clamp`: the asked-for
    name was there, testing `add`, and the check passed."""
    hook = KeptDefinitions(words("Add a test `test_clamp` of `clamp`"), tmp_path)

    def edit(old: str, new: str) -> ToolCall:
        return ToolCall(
            id="1",
            name="edit_file",
            arguments=json.dumps({"path": "tests/test_m.py", "old": old, "new": new}),
        )

    vetoed = await hook.before_tool(
        INFO, edit("def test_add() -> None:", "def test_clamp() -> None:")
    )
    assert isinstance(vetoed, Veto) and vetoed.reason.startswith(
        "Not changed: this edit renames `test_add` to `test_clamp`, and no instruction asks "
        "to rename `test_add`."
    )
    typed = edit("def test_add():", "def test_add() -> None:")  # the same name: a change
    assert await hook.before_tool(INFO, typed) is None
    asked = KeptDefinitions(words("Rename `test_add` to `test_sum`"), tmp_path)
    assert await asked.before_tool(INFO, edit("def test_add():", "def test_sum():")) is None
