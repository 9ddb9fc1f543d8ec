"""A rename no instruction asks for is vetoed before it runs (`swarm.run._asked_renames`)."""

from __future__ import annotations

from pathlib import Path

from swarm._sandbox import NoSandbox
from swarm.agent._loop import Agent
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.run._asked_renames import AskedRenames
from swarm.run._missing import words
from swarm.testing import ScriptedModel, call

TASK = "Rename `calc_total` to `order_total`. Add the `Item` dataclass (name, price, qty)."


async def test_only_the_renames_the_instructions_name_run(tmp_path: Path) -> None:
    """A small model asked for a dataclass renamed ten names it was never asked to."""
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
        hooks=(AskedRenames(words(TASK)),),
        context=ToolContext(root=tmp_path, sandbox=NoSandbox()),
    )
    result = await agent.run("go")
    assert result.finished
    told = [r.messages[-1].content or "" for r in model.requests[1:]]
    assert told[0] == (
        "error: vetoed: Not renamed: no instruction asks to rename `name` to `item_name` "
        "(none names `item_name`). Rename only what the task or your subtask asks to; every "
        "other name stays as it is."
    )
    assert "no instruction asks to rename `price` to `item_price`" in told[1]
    assert told[2].startswith("renamed calc_total to order_total in 1 file(s)")
    assert (tmp_path / "pricing.py").read_text() == (
        "def order_total(items):\n    return sum(i['price'] for i in items if i['name'])\n"
    )
