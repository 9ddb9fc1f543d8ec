"""The parts of a task a plan leaves out (`swarm.run._coverage`)."""

from __future__ import annotations

from pathlib import Path

from swarm.run._coverage import coverage_problem, task_parts, uncovered_parts
from swarm.run._plan import Plan, validate_plan
from swarm.run._task import load_task

DEMO = load_task(Path(__file__).resolve().parents[1] / "tasks" / "refactor.md")


def _plan(*subtasks: tuple[str, str, list[str]]) -> Plan:
    items = [
        {"id": f"s{i}", "title": title, "instructions": said, "files": files}
        for i, (title, said, files) in enumerate(subtasks)
    ]
    return validate_plan({"subtasks": items})


def test_the_parts_are_the_outer_bullets_with_their_wrapped_lines() -> None:
    text = (
        "Intro prose.\n\n- first part,\n  wrapped\n  - a detail of it\n* second part\n\n"
        "```\n- not a part (code)\n```\n1. third part\nMore prose.\n  indented prose\n"
    )
    assert task_parts(text) == [
        "first part, wrapped a detail of it",
        "second part",
        "third part",
    ]
    assert [p[:24] for p in task_parts(DEMO.instructions)] == [
        "Introduce a frozen `Item",
        "Rename `calc_total` to `",
        "Add type hints to every ",
        "Add `low_stock(stock, th",
        "Update the README's exam",
    ]
    assert task_parts("No list at all.") == []


def test_the_1_5b_planner_s_two_subtask_plan_leaves_out_most_of_the_demo() -> None:
    # this stop's second real-model demo run: the planner's whole plan
    two = _plan(
        (
            "Add Item.from_dict",
            "Write Item.from_dict method in inventory/item.py and test it in tests/test_item.py.",
            ["inventory/item.py", "tests/test_item.py"],
        ),
        (
            "Rename calc_total",
            "Rename calc_total to order_total everywhere (definition, callers, tests and the "
            "package exports).",
            ["inventory/pricing.py", "inventory/report.py", "tests/test_pricing.py"],
        ),
    )
    left = uncovered_parts(DEMO.instructions, two)
    assert [p[:12] for p in left] == [
        "Introduce a ",
        "Add type hin",
        "Add `low_sto",
        "Update the R",
    ]
    said = coverage_problem(left)
    assert said.startswith("it leaves out these parts of the task (no subtask does them")
    assert "\n  - Update the README's example to the new API.\n" in said
    # a plan with a subtask for each part leaves nothing out
    whole = _plan(*[(part[:30], part, []) for part in task_parts(DEMO.instructions)])
    assert uncovered_parts(DEMO.instructions, whole) == []
