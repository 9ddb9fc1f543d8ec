"""The demo's scripted model: replies that refactor the demo repository for real.

`demo_script` plays every role of `swarm solve tasks/refactor.md` on the simulator. It is
stateless: it finds its place from the conversation alone (the system prompt names the
role, the first user message the subtask, the turns so far how far it got, the tool
results what the files say), so it works the same over HTTP (`swarm sim serve`), when a
run resumes, and whichever order the merges happen in.

The story it tells: the planner splits the refactor into four subtasks (`item`, then
`pricing` and `stock` side by side, then `docs`); the `pricing` coder slips in an
off-by-one (`>` for `>=`) that only the full check catches, and a fixer repairs it;
`pricing` and `stock` both touch the `__all__` line of `inventory/__init__.py`, so the
second to merge conflicts and a rebase fixer re-applies it on the new integration head.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from swarm._demo import _files
from swarm.messages import ChatRequest, ToolCall
from swarm.providers.sim import Reply, default_script

__all__ = ["PLAN", "demo_script", "init_source"]

_REPO = Path(__file__).parent / "repo"
_BUG, _FIX = "if item.qty > BULK_THRESHOLD:", "if item.qty >= BULK_THRESHOLD:"
_INIT = "inventory/__init__.py"

PLAN: dict[str, list[dict[str, object]]] = {
    "subtasks": [
        {
            "id": "item",
            "title": "Introduce the Item dataclass",
            "instructions": "Add a frozen `Item` dataclass (name, price, qty) with a `subtotal` "
            "property and `Item.from_dict` in inventory/item.py, test it, and export it.",
            "files": ["inventory/item.py", "tests/test_item.py", _INIT],
            "depends_on": [],
        },
        {
            "id": "pricing",
            "title": "Rename calc_total to order_total and price Items",
            "instructions": "Rename `calc_total` to `order_total` taking `Item`s, type-hint "
            "pricing.py and report.py, move their callers and tests to `Item`, and update "
            "the package exports.",
            "files": [
                "inventory/pricing.py",
                "inventory/report.py",
                "tests/test_pricing.py",
                "tests/test_report.py",
            ],
            "depends_on": ["item"],
        },
        {
            "id": "stock",
            "title": "Type-hint stock.py and add low_stock",
            "instructions": "Type-hint stock.py, add `low_stock(stock, threshold=5)` returning "
            "the sorted names below the threshold, test it, and export it.",
            "files": ["inventory/stock.py", "tests/test_stock.py"],
            "depends_on": ["item"],
        },
        {
            "id": "docs",
            "title": "Update the README to the new API",
            "instructions": "Rewrite the README example with `Item`, `order_total`, `summary` "
            "and `low_stock`.",
            "files": ["README.md"],
            "depends_on": ["pricing", "stock"],
        },
    ]
}


def init_source(features: frozenset[str] | set[str]) -> str:
    """`inventory/__init__.py` once the subtasks in `features` have landed (none: as shipped)."""
    pricing = ["apply_discount", "order_total" if "pricing" in features else "calc_total"]
    stock = ["in_stock", "restock", *(["low_stock"] if "stock" in features else [])]
    item = ["Item"] if "item" in features else []
    lines = [
        '"""inventory: a tiny stock and pricing library (the demo repository of `swarm solve`)."""',
        "",
        *(["from inventory.item import Item"] if item else []),
        f"from inventory.pricing import {', '.join(sorted(pricing))}",
        "from inventory.report import summary",
        f"from inventory.stock import {', '.join(sorted(stock))}",
        "",
        f"__all__ = {json.dumps(sorted([*item, *pricing, *stock, 'summary']))}",
    ]
    return "\n".join(lines) + "\n"


def _features(init_text: str) -> set[str]:
    """Which subtasks' exports an `__init__.py` (as read_file shows it) already has."""
    marks = {"item": "import Item", "pricing": "order_total", "stock": "low_stock"}
    return {name for name, mark in marks.items() if mark in init_text}


@dataclass(frozen=True)
class _Change:
    """One file a subtask changes: its text after the change, and a line that shows it's done."""

    path: str
    after: str
    done_mark: str
    new_file: bool = False


_CHANGES: dict[str, list[_Change]] = {
    "item": [
        _Change("inventory/item.py", _files.ITEM, "class Item", new_file=True),
        _Change("tests/test_item.py", _files.TEST_ITEM, "def test_", new_file=True),
    ],
    "pricing": [
        _Change("inventory/pricing.py", _files.PRICING, "def order_total"),
        _Change("inventory/report.py", _files.REPORT, "order_total(items)"),
        _Change("tests/test_pricing.py", _files.TEST_PRICING, "order_total(["),
        _Change("tests/test_report.py", _files.TEST_REPORT, 'Item("bolt"'),
    ],
    "stock": [
        _Change("inventory/stock.py", _files.STOCK, "def low_stock"),
        _Change("tests/test_stock.py", _files.TEST_STOCK, "low_stock(stock)"),
    ],
    "docs": [_Change("README.md", _files.README, "order_total(items)")],
}
_EXPORTS = ("item", "pricing", "stock")
"""Subtasks that also add their names to the package exports in `__init__.py`."""
_OWN_TESTS = {
    "item": "tests/test_item.py",
    "pricing": "tests/test_pricing.py",
    "stock": "tests/test_stock.py",
}


# -- building replies ------------------------------------------------------------------


def _call(turn: int, i: int, name: str, **arguments: object) -> ToolCall:
    # ids derive from the position, so a replayed conversation gets the same ids
    return ToolCall.model_construct(
        id=f"call_{turn}_{i}", name=name, arguments=json.dumps(arguments)
    )


_THINK = {"edit_file": 300, "write_file": 300, "finish": 30, "run_tests": 20}
"""Hidden thinking tokens of a reply, by the weightiest tool it calls (others: 60). The
catalog's figure for Kimi K2.6 (5,000 a call) would stretch the demo to minutes."""
_PLAN_THINK = 150


def _reply(turn: int, text: str, calls: Sequence[tuple[str, Mapping[str, object]]]) -> Reply:
    think = max((_THINK.get(name, 60) for name, _ in calls), default=60)
    tool_calls = [_call(turn, i, n, **a) for i, (n, a) in enumerate(calls)]
    return Reply(text=text, tool_calls=tool_calls, reasoning_tokens=think)


def _edit(path: str, before: str, after: str) -> tuple[str, dict[str, object]]:
    """An edit_file call replacing the smallest block of whole lines that differs, widened
    until the old text is unique in the file."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo, hi = head, len(a) - tail
    while lo > 0 or hi < len(a):
        old = "".join(a[lo:hi])
        if old and before.count(old) == 1:
            break
        lo, hi = (lo - 1, hi) if lo > 0 else (lo, hi + 1)
    new = "".join(b[lo : len(b) - (len(a) - hi)])
    return "edit_file", {"path": path, "old": "".join(a[lo:hi]), "new": new}


def _before(path: str) -> str:
    return (_REPO / path).read_text(encoding="utf-8")


def _results(request: ChatRequest) -> dict[str, str]:
    """What read_file returned, by path, over the whole conversation (latest wins)."""
    paths: dict[str, str] = {}
    out: dict[str, str] = {}
    for m in request.messages:
        for c in m.tool_calls:
            if c.name == "read_file":
                paths[c.id] = str(json.loads(c.arguments).get("path", ""))
        if m.role == "tool" and m.tool_call_id in paths:
            out[paths[m.tool_call_id]] = m.content or ""
    return out


def _last_tool_text(request: ChatRequest) -> str:
    tail = []
    for m in reversed(request.messages):
        if m.role != "tool":
            break
        tail.append(m.content or "")
    return "\n".join(reversed(tail))


def _tests_passed(request: ChatRequest) -> bool:
    """Whether the run_tests result just returned says PASSED."""
    return _last_tool_text(request).startswith("PASSED")


# -- the roles ---------------------------------------------------------------------------

Step = Callable[[ChatRequest, int], Reply]


def _planner() -> list[Step]:
    def explore(_: ChatRequest, turn: int) -> Reply:
        return _reply(
            turn,
            "Let me look at the package layout and who calls calc_total.",
            [
                ("list_dir", {"path": "inventory"}),
                ("search", {"pattern": "calc_total"}),
            ],
        )

    def answer(_: ChatRequest, turn: int) -> Reply:
        text = (
            "calc_total is defined in pricing.py and used by report.py, the tests and the "
            "package exports. Item comes first; pricing and stock are independent of each "
            "other and can run in parallel; the README waits for both.\n\n"
            f"```json\n{json.dumps(PLAN)}\n```"
        )
        return Reply(text=text, reasoning_tokens=_PLAN_THINK)

    return [explore, answer]


def _apply_steps(subtask: str, *, rebase: bool) -> list[Step]:
    """Read the files, change them, run the subtask's tests, finish. Shared by the coder
    and the rebase fixer: both derive each edit from what the files say now."""
    changes = _CHANGES[subtask]
    exports = subtask in _EXPORTS
    reads = [c.path for c in changes if not c.new_file] + ([_INIT] if exports else [])

    def read(_: ChatRequest, turn: int) -> Reply:
        text = (
            f"The `{subtask}` patch no longer applies: re-reading the files on the new head."
            if rebase
            else f"Reading {', '.join(reads)} before changing them."
        )
        return _reply(turn, text, [("read_file", {"path": p}) for p in reads])

    def change(request: ChatRequest, turn: int) -> Reply:
        seen = _results(request)
        calls: list[tuple[str, dict[str, object]]] = []
        for c in changes:
            # the coder plants the demo's bug; a rebase re-applies the fixed patch
            bug = c.path == "inventory/pricing.py" and not rebase
            after = _files.PRICING_WITH_BUG if bug else c.after
            if c.new_file:
                calls.append(("write_file", {"path": c.path, "content": after}))
            elif c.done_mark not in seen.get(c.path, ""):
                calls.append(_edit(c.path, _before(c.path), after))
        if exports:
            have = _features(seen.get(_INIT, ""))
            if subtask not in have:
                calls.append(_edit(_INIT, init_source(have), init_source(have | {subtask})))
        verb = "Re-applying" if rebase else "Making"
        return _reply(turn, f"{verb} the `{subtask}` change in {len(calls)} edits.", calls)

    def test(_: ChatRequest, turn: int) -> Reply:
        own = _OWN_TESTS.get(subtask)
        args = {"args": own} if own and not rebase else {}
        return _reply(turn, "Running the tests.", [("run_tests", args)])

    def finish(request: ChatRequest, turn: int) -> Reply:
        verdict = "tests pass" if _tests_passed(request) else "tests still fail"
        title = next(str(s["title"]) for s in PLAN["subtasks"] if s["id"] == subtask)
        return _reply(turn, "Done.", [("finish", {"summary": f"{title}; {verdict}."})])

    return [read, change, test, finish]


def _fixer(subtask: str) -> list[Step]:
    """A fixer after a red check: the pricing bug is the one the demo plants."""
    target = "inventory/pricing.py" if subtask == "pricing" else None

    def look(_: ChatRequest, turn: int) -> Reply:
        if target is None:
            return _reply(turn, "Re-running the tests to see the failure.", [("run_tests", {})])
        return _reply(
            turn,
            "test_report expects the 10-unit bolt line to get the bulk discount, but the "
            "total has none. Reading the discount rule in pricing.py.",
            [("read_file", {"path": target})],
        )

    def fix(request: ChatRequest, turn: int) -> Reply:
        if target and "qty > BULK_THRESHOLD" in _results(request).get(target, ""):
            return _reply(
                turn,
                "Off by one: ten units must qualify, so `>=`, not `>`.",
                [("edit_file", {"path": target, "old": _BUG, "new": _FIX})],
            )
        return _reply(turn, "Running the whole suite.", [("run_tests", {})])

    def test(_: ChatRequest, turn: int) -> Reply:
        return _reply(turn, "Checking the fix with the full suite.", [("run_tests", {})])

    def finish(request: ChatRequest, turn: int) -> Reply:
        ok = _tests_passed(request)
        summary = (
            "Fixed the bulk-discount threshold in order_total (`>` → `>=`); all tests pass."
            if ok
            else "Could not find the cause; the check still fails."
        )
        return _reply(turn, "Done.", [("finish", {"summary": summary})])

    return [look, fix, test, finish]


def _fallback() -> list[Step]:
    """For anything the demo did not plan (another plan, a final-verification fixer)."""

    def test(_: ChatRequest, turn: int) -> Reply:
        return _reply(turn, "Running the tests.", [("run_tests", {})])

    def finish(_: ChatRequest, turn: int) -> Reply:
        return _reply(
            turn,
            "Nothing more for me to do.",
            [("finish", {"summary": "No scripted change for this step."})],
        )

    return [test, finish]


_BY_TITLE = sorted(((str(s["title"]), str(s["id"])) for s in PLAN["subtasks"]), reverse=True)
"""The plan's subtasks by title (the prompts name a subtask by its title alone)."""


def _place(request: ChatRequest) -> tuple[str, str, bool]:
    """(role, subtask, rebase) read from the conversation alone: the system prompt says the
    role, the first user message names the subtask. Request metadata never crosses HTTP, so
    the script must not need it (`swarm sim serve` plays the same story as in-process)."""
    system = next((m.content or "" for m in request.messages if m.role == "system"), "")
    user = next((m.content or "" for m in request.messages if m.role == "user"), "")
    role = next((r for r, mark in _ROLE_MARKS.items() if system.startswith(mark)), "")
    found = next((id_ for title, id_ in _BY_TITLE if f"subtask: {title}" in user), "")
    found = found or next((id_ for title, id_ in _BY_TITLE if f"subtask, {title}," in user), "")
    rebase = role == "fixer" and "was done on an older version" in user
    return role, found, rebase


_ROLE_MARKS = {
    "planner": "You are the planner",
    "coder": "You are a coder",
    "fixer": "You are a fixer",
}


def _steps(role: str, subtask: str, rebase: bool) -> list[Step]:
    if role == "planner":
        return _planner()
    if role == "coder" and subtask in _CHANGES:
        return _apply_steps(subtask, rebase=False)
    if role == "fixer" and subtask in _CHANGES:
        return _apply_steps(subtask, rebase=True) if rebase else _fixer(subtask)
    return _fallback()


def demo_script(request: ChatRequest) -> Reply:
    """The scripted model of the out-of-the-box demo (`swarm.providers.sim.Script`); a
    conversation that is not one of the swarm's roles gets `default_script`'s answer."""
    role, subtask, rebase = _place(request)
    if not role:
        return default_script(request)
    turn = sum(1 for m in request.messages if m.role == "assistant")
    steps = _steps(role, subtask, rebase)
    if turn >= len(steps):
        return _fallback()[-1](request, turn)
    return steps[turn](request, turn)
