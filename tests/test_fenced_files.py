"""A whole file shown in a fence, where a tool call was wanted, written as `write_file`:
only when it is plainly the whole file, and the model is told why when it is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm._routing.router import Router
from swarm._sandbox import NoSandbox
from swarm.agent._fenced_files import FencedFileWrites
from swarm.agent._loop import Agent
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.agent.hooks import StepInfo
from swarm.config import ProviderConfig, SwarmConfig, TierConfig
from swarm.config._faults import RealModel
from swarm.messages import ChatRequest, ChatResult, Message, ToolCall
from swarm.providers.sim import SimProvider
from swarm.providers.sim._real_model import real_model_script
from swarm.providers.sim._reply import Reply
from swarm.testing import ScriptedModel, call, reply

PRICING = '''"""Prices."""


def apply_discount(price, percent):
    return round(price * (100 - percent) / 100, 2)


def calc_total(items):
    return round(sum(i["price"] * i["qty"] for i in items), 2)
'''
TOOLS = frozenset({"write_file", "finish"})
RENAMED = PRICING.replace("calc_total", "order_total")
TYPED = PRICING.replace("(price, percent)", "(price: float, percent: float) -> float")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "pricing.py").write_text(PRICING)
    return tmp_path


async def _read(hook: FencedFileWrites, text: str, finish: str = "stop") -> ChatResult | None:
    result = reply(text).model_copy(update={"finish_reason": finish})
    return await hook.after_model(StepInfo("coder", 3, []), result)


def _writes(result: ChatResult | None) -> dict[str, str]:
    assert result is not None and result.tool_call_format == "fenced-file"
    assert result.text_tool_calls == len(result.message.tool_calls)
    out = {}
    for c in result.message.tool_calls:
        assert c.name == "write_file"
        args = json.loads(c.arguments)
        out[args["path"]] = args["content"]
    return out


@pytest.mark.parametrize(
    "text",
    [
        f"Here is the updated `shop/pricing.py`:\n\n```python\n{TYPED}```\nDone.",
        f"### shop/pricing.py\n```python\n{TYPED}```",
        f"**shop/pricing.py**\n```\n{TYPED}```",
        f"```python shop/pricing.py\n{TYPED}```",
        f"```python\n# shop/pricing.py\n{TYPED}```",
        f"The whole file, typed:\n```python\n{TYPED}\n\n\n```",  # the one file in scope
    ],
)
async def test_a_whole_file_however_its_path_is_written_becomes_a_write(
    workspace: Path, text: str
) -> None:
    hook = FencedFileWrites(workspace, ("shop/pricing.py",))
    content = _writes(await _read(hook, text))["shop/pricing.py"]
    assert content.rstrip("\n").endswith(
        'return round(sum(i["price"] * i["qty"] for i in items), 2)'
    )
    assert "def apply_discount(price: float, percent: float) -> float:" in content
    assert content.endswith(")\n")


ITEM = (
    "from dataclasses import dataclass\n\n\n@dataclass(frozen=True)\nclass Item:\n    name: str\n"
)


@pytest.mark.parametrize(
    ("name", "arguments"),
    [  # as Qwen2.5-Coder-1.5B named its calls after its subtask
        ("create_item_dataclass", {"content": ITEM}),
        ("create_dataclass", {"path": "shop/item.py", "code": ITEM}),
        ("write_file", {"content": ITEM}),
    ],
)
async def test_a_call_under_no_tool_s_name_carrying_code_writes_it(
    workspace: Path, name: str, arguments: dict[str, str]
) -> None:
    hook = FencedFileWrites(workspace, ("shop/item.py",), tools=TOOLS)
    made = ToolCall(id="c1", name=name, arguments=json.dumps(arguments))
    done = ToolCall(id="c2", name="finish", arguments='{"summary": "added Item"}')
    result = ChatResult(message=Message.assistant(None, [made, done]), finish_reason="tool_calls")
    changed = await hook.after_model(StepInfo("coder", 3, []), result)
    assert changed is not None and changed.tool_call_format == "fenced-file"
    calls = changed.message.tool_calls
    assert [c.name for c in calls] == ["write_file", "finish"]
    assert json.loads(calls[0].arguments) == {"path": "shop/item.py", "content": ITEM}


async def test_a_call_whose_arguments_fit_a_tool_is_left_to_run_as_it(workspace: Path) -> None:
    hook = FencedFileWrites(workspace, ("shop/item.py",), tools=TOOLS)
    arguments = json.dumps({"path": "shop/item.py", "content": ITEM})
    made = ToolCall(id="c1", name="create_item_dataclass", arguments=arguments)
    result = ChatResult(message=Message.assistant(None, [made]), finish_reason="tool_calls")
    assert await hook.after_model(StepInfo("coder", 3, []), result) is None


async def test_a_snippet_of_definitions_is_put_into_the_file(workspace: Path) -> None:
    """Functions shown alone replace theirs in place, new ones go at the end, and a new
    import goes after the file's imports (or its docstring)."""
    text = (
        "Add this to `shop/pricing.py`:\n```python\nimport math\n\n\n"
        "def calc_total(items: list) -> float:\n    return 0.0\n\n\n"
        "@functools.cache\ndef clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n```"
    )
    merged = _writes(await _read(FencedFileWrites(workspace, ("shop/",)), text))["shop/pricing.py"]
    assert merged == (
        '"""Prices."""\nimport math\n\n\ndef apply_discount(price, percent):\n'
        "    return round(price * (100 - percent) / 100, 2)\n\n\n"
        "def calc_total(items: list) -> float:\n    return 0.0\n\n\n"
        "@functools.cache\ndef clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n"
    )


async def test_a_snippet_that_is_a_script_is_refused_and_the_model_is_told(
    workspace: Path,
) -> None:
    snippet = "def calc_total(items):\n    return 0\n\n\nprint(calc_total([]))\n"
    result = await _read(
        FencedFileWrites(workspace, ("shop/",)), f"`shop/pricing.py`:\n```python\n{snippet}```"
    )
    assert result is not None and not result.message.tool_calls
    assert "shop/pricing.py without apply_discount" in result.tool_call_problem
    assert "edit_file" in result.tool_call_problem


async def test_a_test_shown_alone_goes_to_the_one_file_the_reply_names(workspace: Path) -> None:
    """As the 1.5B model answered: a test and its import, "add this to tests/..."."""
    (workspace / "tests").mkdir()
    test = "from shop.pricing import calc_total\n\n\ndef test_total():\n    assert calc_total\n"
    (workspace / "tests" / "test_pricing.py").write_text(test)
    text = (
        "Here's the test:\n\n```python\nfrom shop.pricing import apply_discount\n\n"
        "def test_discount() -> None:\n    assert apply_discount(10, 50) == 5\n```\n\n"
        "Add it to `tests/test_pricing.py`, then run the tests."
    )
    hook = FencedFileWrites(workspace, ("shop/pricing.py", "tests/test_pricing.py"))
    merged = _writes(await _read(hook, text))["tests/test_pricing.py"]
    assert merged.startswith(
        "from shop.pricing import calc_total\nfrom shop.pricing import apply_discount\n"
    )
    assert merged.endswith("def test_discount() -> None:\n    assert apply_discount(10, 50) == 5\n")
    assert "def test_total():" in merged


async def test_fences_in_list_items_go_to_the_file_that_defines_what_they_show(
    tmp_path: Path,
) -> None:
    """As the 1.5B model answered "Add clamp" (two files in scope, both named in its
    prose, no path on either fence): numbered steps, each fence indented inside its list
    item. A fence indented N spaces takes N off its lines (CommonMark); a block with no
    path of its own goes to the one scope file that defines a name it shows (`add`,
    `test_add`)."""
    (tmp_path / "mathutil").mkdir()
    (tmp_path / "tests").mkdir()
    init = '"""Small numeric helpers."""\n\n\ndef add(a, b):\n    return a + b\n'
    test = "from mathutil import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    (tmp_path / "mathutil" / "__init__.py").write_text(init)
    (tmp_path / "tests" / "test_mathutil.py").write_text(test)
    clamp = "def clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n"
    test_clamp = "def test_clamp():\n    assert clamp(5, 0, 3) == 3\n"

    def indented(code: str) -> str:
        return "\n".join(f"     {line}" if line else "" for line in code.splitlines())

    with_clamp = f"{init}\n\n{clamp}"
    tested = f"{test.replace('add', 'add, clamp', 1)}\n\n{test_clamp}"
    text = (
        "To add `clamp` to `mathutil/__init__.py` and test it in `tests/test_mathutil.py`:\n\n"
        "1. **Add the `clamp` function to `mathutil/__init__.py`**:\n"
        "   - Add the `clamp` function as follows:\n"
        f"     ```python\n{indented(with_clamp)}\n     ```\n\n"
        "2. **Test it**:\n"
        "   - Add these tests:\n"
        f"     ```python\n{indented(tested)}\n     ```\n"
    )
    hook = FencedFileWrites(tmp_path, ("mathutil/__init__.py", "tests/test_mathutil.py"))
    writes = _writes(await _read(hook, text))
    assert writes["mathutil/__init__.py"] == with_clamp
    assert writes["tests/test_mathutil.py"].startswith("from mathutil import add, clamp\n")
    assert writes["tests/test_mathutil.py"].endswith(test_clamp)
    assert "def test_add():" in writes["tests/test_mathutil.py"]


async def test_a_name_the_task_asks_to_rename_may_leave_the_file(workspace: Path) -> None:
    text = f"### shop/pricing.py\n```python\n{RENAMED}```"
    refused = await _read(FencedFileWrites(workspace, ("shop/*.py",)), text)
    assert refused is not None and refused.tool_call_problem
    asked = "Rename calc_total to order_total everywhere."
    hook = FencedFileWrites(workspace, ("shop/*.py",), asked=asked)
    assert _writes(await _read(hook, text)) == {"shop/pricing.py": RENAMED}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("### shop/pricing.py\n```python\ndef calc_total(:\n```", "not valid Python"),
        (
            f"### shop/pricing.py\n```python\n{TYPED}\n# ... rest of the file unchanged\n```",
            "a part left out",
        ),
        ("### shop/other.py\n```python\nX = 1\n```", "not one of its files"),
        ("### ../outside.py\n```python\nX = 1\n```", "not a path inside the workspace"),
        (f"### shop/pricing.py\n```python\n{PRICING}```", "as it already is"),
        ("### shop/new.py\n```python\nprint('hi')\n```", "defines nothing"),
        ("### shop/new.py\n```python\ndef finish(summary):\n    print(summary)\n```", "a tool"),
    ],
)
async def test_what_is_not_plainly_a_whole_file_is_refused_with_the_reason(
    workspace: Path, text: str, problem: str
) -> None:
    hook = FencedFileWrites(workspace, ("shop/pricing.py", "shop/new.py"), tools=TOOLS)
    result = await _read(hook, text)
    assert result is not None and not result.message.tool_calls
    assert problem in result.tool_call_problem


async def test_nothing_changes_for_calls_cut_replies_unnamed_code_or_prose(workspace: Path) -> None:
    hook = FencedFileWrites(workspace, ("shop/pricing.py", "shop/new.py"))
    fenced = f"### shop/pricing.py\n```python\n{TYPED}```"
    assert await _read(hook, fenced, finish="length") is None  # cut: asked again instead
    called = reply(call("read_file", path="shop/pricing.py"))
    assert await hook.after_model(StepInfo("coder", 1, []), called) is None
    assert await _read(hook, "```python\nX = 1\n```") is None  # two files in scope, no path
    assert await _read(hook, "I will now edit `shop/pricing.py`.") is None
    other = TYPED.replace("100 - percent", "100.0 - percent")
    twice = f"### shop/pricing.py\n```python\n{TYPED}```\n`shop/pricing.py`:\n```\n{other}```"
    assert await _read(hook, twice) is None  # which one?


async def test_a_new_file_and_a_file_that_only_grows(workspace: Path) -> None:
    (workspace / "README.md").write_text("# Shop\n\nSells things.\n")
    hook = FencedFileWrites(workspace, ("shop/", "README.md"))
    text = (
        "`shop/stock.py`:\n```python\ndef low_stock(stock, threshold=5):\n    return []\n```\n"
        "README.md:\n```markdown\n# Shop\n\nSells things.\n\nSee `low_stock`.\n```\n"
    )
    written = _writes(await _read(hook, text))
    assert written["shop/stock.py"].startswith("def low_stock(")
    assert written["README.md"].endswith("See `low_stock`.\n")
    shrunk = await _read(hook, "README.md:\n```markdown\n# Shop\n```")
    assert shrunk is not None and "without 1 of its lines" in shrunk.tool_call_problem


async def test_a_whole_file_that_leaves_out_the_module_docstring_keeps_it(
    workspace: Path,
) -> None:
    """The demo's coder gave each module it typed back whole with its path as a comment
    where the docstring had been: written so, every module lost its docstring."""
    hook = FencedFileWrites(workspace, ("shop/pricing.py",), tools=TOOLS)
    body = TYPED.replace('"""Prices."""\n\n\n', "# shop/pricing.py\nimport math\n")
    written = _writes(await _read(hook, f"```python\n{body}```"))["shop/pricing.py"]
    assert written == body.replace("import math\n", '"""Prices."""\n\nimport math\n', 1)
    own = '"""Prices, typed."""\n' + body  # a docstring of its own is the model's choice
    assert _writes(await _read(hook, f"```python\n{own}```"))["shop/pricing.py"] == own


README = """# inventory

A tiny stock and pricing library.

```python
from inventory import calc_total

print(calc_total(items))  # 4.75
```

Run the tests with `python -m pytest -q`.
"""


async def test_a_readme_shown_whole_with_its_example_fenced_inside_is_written(
    workspace: Path,
) -> None:
    """The 1.5B model's README update: the file in a ```` ```markdown ```` fence, its
    ```` ```python ```` example nested in it, some of its lines changed. First line to
    last, nothing elided: the whole file. Cut short at either end, it is a part."""
    (workspace / "README.md").write_text(README)
    hook = FencedFileWrites(workspace, ("README.md",), tools=TOOLS)
    updated = README.replace("calc_total", "order_total")
    text = f"Here is the updated README file:\n\n```markdown\n{updated}```\n\nIt uses the new API."
    assert _writes(await _read(hook, text)) == {"README.md": updated}
    for part in (updated.split("\n\n", 1)[1], updated.rsplit("\n\n", 1)[0] + "\n"):
        refused = await _read(hook, f"README.md:\n```markdown\n{part}```")
        assert refused is not None and not refused.message.tool_calls, part
        assert "README.md without" in refused.tool_call_problem


async def test_an_agent_whose_model_shows_the_file_writes_it(workspace: Path) -> None:
    """The loop end to end: the fenced file is written by the real `write_file`, counted
    as a call read from text, and the model reads the tool's result."""
    model = ScriptedModel(
        [f"Here is `shop/pricing.py`:\n```python\n{TYPED}```", call("finish", summary="typed")]
    )
    agent = Agent[str](
        "coder",
        model=model,
        tools=coding_tools(include=["read_file", "write_file", "edit_file", "finish"]),
        context=ToolContext(root=workspace, sandbox=NoSandbox()),
        hooks=[FencedFileWrites(workspace, ("shop/pricing.py",))],
    )
    result = await agent.run("Type shop/pricing.py's functions.")
    assert result.finished and (workspace / "shop" / "pricing.py").read_text() == TYPED
    assert result.calls.parsed == 1 and result.calls.nudges == 0
    told = [m for m in model.requests[1].messages if m.role == "tool"]
    assert len(told) == 1 and "shop/pricing.py" in (told[0].content or "")


async def test_an_agent_is_told_what_its_fenced_file_would_delete(workspace: Path) -> None:
    script = "`shop/pricing.py`:\n```python\ndef calc_total(items):\n    return 0\n\nprint(1)\n```"
    model = ScriptedModel([script, call("finish", summary="no")])
    agent = Agent[str](
        "coder",
        model=model,
        tools=coding_tools(include=["write_file", "finish"]),
        context=ToolContext(root=workspace, sandbox=NoSandbox()),
        hooks=[FencedFileWrites(workspace, ("shop/pricing.py",))],
    )
    result = await agent.run("Type it.")
    told = model.requests[1].messages[-1]
    assert told.role == "user" and "without apply_discount" in (told.content or "")
    assert result.calls.rejected == 1 and (workspace / "shop" / "pricing.py").read_text() == PRICING


async def test_the_simulator_shows_whole_files_that_an_agent_writes(workspace: Path) -> None:
    """`[providers.sim.real_model] whole_files`: the simulator shows the files its script
    writes, under their paths, and calls nothing; through the router, the agent's hook
    writes them."""
    spoilt = RealModel(whole_files=1.0, wrong_names=0, repeats=0, truncated=0, no_call=0)

    def script(request: ChatRequest) -> Reply:
        if any(m.role == "tool" for m in request.messages):
            done = ToolCall(id="f", name="finish", arguments='{"summary": "ok"}')
            return Reply(tool_calls=[done])
        arguments = json.dumps({"path": "shop/pricing.py", "content": TYPED})
        return Reply(tool_calls=[ToolCall(id="w", name="write_file", arguments=arguments)])

    config = SwarmConfig(
        providers={"sim": ProviderConfig(kind="sim", time_scale=0)},
        tiers={"speed": TierConfig(models=["sim/kimi-k2.6"])},
    )
    provider = SimProvider("sim", script=real_model_script(script, spoilt), time_scale=0)
    async with Router(config, providers={"sim": provider}, env={}) as router:
        agent = Agent[str](
            "coder",
            model=router.model("speed"),
            tools=coding_tools(include=["write_file", "finish"]),
            context=ToolContext(root=workspace, sandbox=NoSandbox()),
            hooks=[FencedFileWrites(workspace, ("shop/pricing.py",))],
            max_steps=4,
        )
        result = await agent.run("Type shop/pricing.py.")
    assert result.finished and result.calls.parsed >= 1
    assert (workspace / "shop" / "pricing.py").read_text() == TYPED


async def test_a_file_named_without_its_directories_is_the_scope_file_it_ends(
    workspace: Path,
) -> None:
    """The 1.5B model's "Here is the modified `pricing.py`" for the scope's
    `shop/pricing.py` (a second scope file elsewhere, so nothing else names it)."""
    text = f"Here is the modified `pricing.py`:\n\n```python\n{TYPED}```\n"
    hook = FencedFileWrites(workspace, ("shop/pricing.py", "tests/test_pricing.py"))
    assert _writes(await _read(hook, text)) == {"shop/pricing.py": TYPED}
    other = FencedFileWrites(workspace, ("shop/pricing.py", "old/pricing.py"))
    assert not (await _read(other, text) or reply("")).message.tool_calls  # which one?


def _with_calls(text: str, *calls: ToolCall) -> ChatResult:
    result = reply(list(calls))
    message = Message.assistant(text, list(calls))
    return result.model_copy(update={"message": message})


async def test_code_shown_beside_run_tests_is_written_first_block_on_block(
    workspace: Path,
) -> None:
    """The 1.5B model's "First, import clamp ```...``` Next, the test ```...``` Finally,
    we will call run_tests", with its run_tests call: the test file (its subtask's only
    file) gets the import, then the function, and the tests run after the write."""
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_pricing.py").write_text(
        "from shop.pricing import calc_total\n\n\n"
        "def test_total():\n    assert calc_total([]) == 0\n"
    )
    text = (
        "First, import it:\n\n```python\nfrom shop.pricing import apply_discount\n```\n\n"
        "Next, the test:\n\n```python\ndef test_discount() -> None:\n"
        "    assert apply_discount(10, 50) == 5\n```\n\nFinally, we run the tests."
    )
    hook = FencedFileWrites(workspace, ("tests/test_pricing.py",))
    tests = call("run_tests")
    done = await hook.after_model(StepInfo("coder", 2, []), _with_calls(text, tests))
    assert done is not None
    assert [c.name for c in done.message.tool_calls] == ["write_file", "run_tests"]
    assert done.text_tool_calls == 1
    written = json.loads(done.message.tool_calls[0].arguments)["content"]
    assert written == (
        "from shop.pricing import calc_total\nfrom shop.pricing import apply_discount\n\n\n"
        "def test_total():\n    assert calc_total([]) == 0\n\n\n"
        "def test_discount() -> None:\n    assert apply_discount(10, 50) == 5\n"
    )


async def test_code_shown_beside_an_edit_is_the_models_own_business(workspace: Path) -> None:
    text = f"I'll change it to:\n\n```python\n{TYPED}```"
    edit = call("edit_file", path="shop/pricing.py", old="(price, percent)", new="(p, q)")
    hook = FencedFileWrites(workspace, ("shop/pricing.py",))
    assert await hook.after_model(StepInfo("coder", 2, []), _with_calls(text, edit)) is None


async def test_imports_alone_go_into_a_file_but_never_its_own_module(workspace: Path) -> None:
    hook = FencedFileWrites(workspace, ("shop/pricing.py",))
    text = "```python\nimport math\n```\n\nfor `shop/pricing.py`."
    after_docstring = PRICING.replace('"""Prices."""\n', '"""Prices."""\nimport math\n')
    assert _writes(await _read(hook, text)) == {"shop/pricing.py": after_docstring}
    itself = "```python\nfrom shop.pricing import calc_total\n```\n\nfor `shop/pricing.py`."
    refused = await _read(hook, itself)
    assert refused is None or not refused.message.tool_calls


MATHUTIL = (
    '"""Small numeric helpers."""\n\n\ndef add(a, b):\n    return a + b\n\n\n'
    "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
)
TEST_ADD = "from mathutil import add\n\n\ndef test_add() -> None:\n    assert add(2, 3) == 5\n"


async def test_tests_never_go_into_the_code_and_imports_of_names_the_workspace_lacks_go(
    tmp_path: Path,
) -> None:
    """The 1.5B model, sent back for `test_clamp`, showed `test_add` and `test_subtract`
    under `mathutil/__init__.py`, then a test file importing them from `mathutil`."""
    (tmp_path / "mathutil").mkdir()
    (tmp_path / "mathutil" / "__init__.py").write_text(MATHUTIL)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mathutil.py").write_text(TEST_ADD)
    hook = FencedFileWrites(tmp_path, ("mathutil/__init__.py", "tests/test_mathutil.py"))
    text = (
        "```python\n# mathutil/__init__.py\nfrom mathutil import add\nfrom mathutil import "
        "subtract\n\ndef test_add() -> None:\n    assert add(2, 3) == 5\n\n"
        "def test_subtract() -> None:\n    assert subtract(5, 3) == 2\n```\n\n"
        "```python\n# tests/test_mathutil.py\nfrom mathutil import clamp\n"
        "from mathutil import test_add, math as m, add as plus\nfrom os import path\n\n"
        "def test_clamp() -> None:\n    assert clamp(7, 0, 3) == 3\n```\n"
    )
    written = _writes(await _read(hook, text))
    assert list(written) == ["tests/test_mathutil.py"]  # the tests for mathutil are refused
    assert written["tests/test_mathutil.py"] == (
        "from mathutil import add\nfrom mathutil import clamp\nfrom mathutil import add as plus\n"
        "from os import path\n\n\ndef test_add() -> None:\n    assert add(2, 3) == 5\n\n\n"
        "def test_clamp() -> None:\n    assert clamp(7, 0, 3) == 3\n"
    )
    alone = "```python\n# mathutil/__init__.py\ndef test_x() -> None:\n    assert True\n```"
    refused = await _read(hook, alone)
    assert refused is not None and refused.tool_call_problem == (
        "the reply's code for mathutil/__init__.py defines test_x: tests go in a test file "
        "(tests/test_*.py), not in the code they test"
    )


async def test_one_fence_holding_two_files_each_under_its_path_comment_writes_both(
    tmp_path: Path,
) -> None:
    """The 1.5B model, sent back for `test_clamp`, showed `clamp` and its test in one
    fence, each under a `# path` comment."""
    (tmp_path / "mathutil").mkdir()
    (tmp_path / "mathutil" / "__init__.py").write_text(MATHUTIL)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mathutil.py").write_text(TEST_ADD)
    hook = FencedFileWrites(tmp_path)  # the completing coder: no scope
    clamp = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
    test = "def test_clamp():\n    assert clamp(11, 0, 10) == 10\n"
    text = (
        f"```python\n# mathutil/__init__.py\n\n{clamp}\n# tests/test_mathutil.py\n\n"
        f"from mathutil import clamp\n\n{test}```\nThen call `finish`."
    )
    written = _writes(await _read(hook, text))
    assert written == {
        "mathutil/__init__.py": MATHUTIL,
        "tests/test_mathutil.py": (
            "from mathutil import add\nfrom mathutil import clamp\n\n\n"
            f"def test_add() -> None:\n    assert add(2, 3) == 5\n\n\n{test}"
        ),
    }
