"""Tool calls read against what the instructions ask (`swarm.run._asked_calls`)."""

from __future__ import annotations

from pathlib import Path

from swarm._sandbox import NoSandbox
from swarm.agent._loop import Agent
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.agent.hooks import StepInfo, Veto
from swarm.messages import ToolCall
from swarm.run._asked_calls import AskedRenames, NotATool
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
