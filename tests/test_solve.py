"""Whole runs of `solve()` against real temporary git repositories, scripted models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from swarm._analysis.loader import load_trace
from swarm._tracing import semconv as sc
from swarm.budget import BudgetLimits
from swarm.messages import ChatRequest
from swarm.run._plan import PlanError
from swarm.run._renamed import renames
from swarm.run._report import RunReport, render_markdown
from swarm.run._solve import SolveRequest, solve
from swarm.testing import FunctionModel, Scripted, ScriptedModel, ScriptedSource, call, reply

CHECK = "python check.py"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("def one():\n    return 1\n")
    (repo / "b.py").write_text("def two():\n    return 2\n")
    (repo / "shared.py").write_text('NAMES = ["one", "two"]\n')
    (repo / "check.py").write_text(
        "import a, b, shared\nassert a.one() == 1, 'one is wrong'\n"
        "assert b.two() == 2, 'two is wrong'\nprint('ok', shared.NAMES)\n"
    )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    return repo


def write_task(tmp_path: Path, *, check: str = CHECK, extra: str = "") -> Path:
    path = tmp_path / "task.md"
    path.write_text(f"---\ncheck: {check}\n{extra}---\n# Tidy up\n\nMake the code nicer.\n")
    return path


def write_plan(tmp_path: Path, subtasks: Sequence[dict[str, Any]]) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"subtasks": list(subtasks)}))
    return path


def subtask(id: str, files: list[str], deps: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "id": id,
        "title": f"do {id}",
        "instructions": f"do {id}",
        "files": files,
        "depends_on": list(deps),
    }


def request(tmp_path: Path, repo: Path, plan: Path | None, **kw: Any) -> SolveRequest:
    task = kw.pop("task", None) or write_task(tmp_path)
    return SolveRequest(
        task_path=str(task),
        repo=str(repo),
        plan_path=str(plan) if plan else None,
        state_dir=str(tmp_path / "state"),
        traces_dir=str(tmp_path / "traces"),
        quiet=True,
        **kw,
    )


def worktrees(repo: Path) -> list[str]:
    lines = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line for line in lines if line.startswith("worktree ")]


def edit(path: str, old: str, new: str) -> Scripted:
    return call("edit_file", path=path, old=old, new=new)


def done(summary: str = "done") -> Scripted:
    return call("finish", summary=summary)


def red_to_the_end(sid: str, breaks: Scripted) -> dict[str, list[Scripted]]:
    """Scripts for subtask `sid` whose coder makes the change `breaks` (the check goes red)
    and whose fixers give up, on its first attempt and when it starts afresh."""
    scripts: dict[str, list[Scripted]] = {}
    for attempt in ("", ":afresh1"):
        scripts[f"coder:{sid}{attempt}"] = [breaks, done()]
        scripts |= {f"fixer:{sid}:{n}{attempt}": [done("could not")] for n in (1, 2, 3)}
    return scripts


def first_told(scripts: ScriptedSource, agent_id: str) -> str:
    """What agent `agent_id` was told last in its first request."""
    model = scripts.models[agent_id]
    assert isinstance(model, ScriptedModel)
    return model.requests[0].messages[-1].content or ""


def assert_untouched(repo: Path) -> None:
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "status", "--porcelain") == ""
    assert len(worktrees(repo)) == 1, worktrees(repo)


async def test_multi_subtask_plan_is_merged_to_green(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(
        tmp_path,
        [
            subtask("s1", ["a.py"]),
            subtask("s2", ["b.py"]),
            subtask("s3", ["a.py"], ["s1"]),
        ],
    )
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
            "coder:s3": [edit("a.py", "    return 1", '    """One."""\n    return 1'), done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert report.status == "done", report
    assert report.final_check == "passed"
    assert {s.id: s.status for s in report.subtasks} == {
        "s1": "merged",
        "s2": "merged",
        "s3": "merged",
    }
    a = git(repo, "show", f"{report.branch}:a.py")
    assert "def one() -> int:" in a and '"""One."""' in a
    assert "def two() -> int:" in git(repo, "show", f"{report.branch}:b.py")
    assert "def one() -> int" in Path(str(report.patch)).read_text()
    assert Path(str(report.trace)).stat().st_size > 0
    assert "s3" in Path(str(report.report)).read_text()
    assert_untouched(repo)
    for model in scripts.models.values():
        assert isinstance(model, ScriptedModel)
        model.assert_complete()


async def test_a_plan_with_a_cycle_is_refused_before_the_run(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"], ["s2"]), subtask("s2", ["b.py"], ["s1"])])
    with pytest.raises(PlanError, match="cycle"):
        await solve(request(tmp_path, repo, plan), source=ScriptedSource({}))
    assert not (tmp_path / "state" / "runs").exists()
    assert_untouched(repo)


async def test_overlapping_scopes_run_in_order_not_at_once(tmp_path: Path, repo: Path) -> None:
    # both claim a.py and neither depends on the other: s2 must start from s1's merge
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s2": [edit("a.py", "def one() -> int:", "def one() -> int:  # typed"), done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan, max_agents=2), source=scripts)
    assert report.status == "done", report
    assert "# typed" in git(repo, "show", f"{report.branch}:a.py")


async def test_a_coder_is_told_where_the_names_its_subtask_uses_appear(
    tmp_path: Path, repo: Path
) -> None:
    rename = subtask("s1", ["a.py"]) | {"instructions": "Rename `one` to `first`."}
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s1:missing": [done("no rename")],  # `first` is still nowhere
        }
    )
    await solve(request(tmp_path, repo, write_plan(tmp_path, [rename])), source=scripts)
    prompt = first_told(scripts, "coder:s1")
    assert "Where `one`, `first` appear in other files now:" in prompt
    assert "check.py:2:assert a.one() == 1, 'one is wrong'" in prompt
    assert "shared.py:1:" in prompt and "a.py:1:" not in prompt.split("appear in")[1]


async def test_the_planner_is_shown_the_files_and_its_guessed_paths_are_placed(
    tmp_path: Path, repo: Path
) -> None:
    guessed = subtask("s1", ["app/a.py"])  # a directory the repository does not have
    scripts = ScriptedSource(
        {
            "planner": [json.dumps({"subtasks": [guessed]})],
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
        }
    )
    report = await solve(request(tmp_path, repo, None), source=scripts)
    assert report.status == "done", report
    prompt = first_told(scripts, "planner")
    assert "The repository's files (use these paths):\n```\na.py\nb.py\ncheck.py\n" in prompt
    coder = scripts.models["coder:s1"]
    assert isinstance(coder, ScriptedModel)
    assert "Files in scope: a.py" in (coder.requests[0].messages[-1].content or "")


@pytest.mark.parametrize("second", ["covers", "invalid"])
async def test_a_plan_that_leaves_out_a_part_of_the_task_is_asked_for_once_more(
    tmp_path: Path, repo: Path, second: str
) -> None:
    task = tmp_path / "task.md"
    task.write_text(
        f"---\ncheck: {CHECK}\n---\n# Tidy\n\n- Type `one` in a.py.\n"
        "- Document the module b.py with a docstring.\n"
    )
    hint = subtask("hint", ["a.py"]) | {"title": "Type one", "instructions": "Type one in a.py."}
    docs = subtask("docs", ["b.py"]) | {"title": "Document b.py", "instructions": "A docstring."}
    typed = edit("a.py", "def one():", "def one() -> int:")
    scripts = ScriptedSource(
        {
            "planner": [json.dumps({"subtasks": [hint]})],
            "planner:1": [json.dumps({"subtasks": [hint, docs]}) if second == "covers" else "?"],
            "coder:hint": [typed, done()],
            "coder:docs": [edit("b.py", "def two():", '"""Two."""\n\n\ndef two():'), done()],
        }
    )
    report = await solve(request(tmp_path, repo, None, task=task), source=scripts)
    assert report.status == "done", report
    told = first_told(scripts, "planner:1")
    assert "- it leaves out these parts of the task (no subtask does them" in told
    assert "\n  - Document the module b.py with a docstring.\n" in told
    assert "Type `one`" not in told.split("leaves out")[1]
    ran = [s.id for s in report.subtasks]
    assert ran == (["hint", "docs"] if second == "covers" else ["hint"])  # else the first
    left = "the plan leaves out a part of the task: Document the module b.py with a docstring."
    assert (left in report.warnings) == (second == "invalid")


HINT_STEP = subtask("hint", ["a.py"]) | {"title": "Hint one", "instructions": "Type one."}
"""A planner's step on a.py, to be folded with `doc_step`."""
DOCUMENTED = edit("a.py", "    return 1", '    """One."""\n    return 1')


def doc_step(after: str) -> dict[str, Any]:
    """A planner's step on a.py after step `after` (folded into it)."""
    return subtask("doc", ["a.py"], [after]) | {"title": "Doc one", "instructions": "Doc it."}


def typed_first(steps: list[dict[str, Any]], then: dict[str, list[Scripted]]) -> ScriptedSource:
    """The planner plans `steps`; the coder of the first types `one` (step 1) and the
    agents of `then` do the rest."""
    typed = [edit("a.py", "def one():", "def one() -> int:"), done("typed")]
    return ScriptedSource(
        {"planner": [json.dumps({"subtasks": steps})], "coder:hint": typed, **then}
    )


def looping(agent: str, reply: str) -> dict[str, list[Scripted]]:
    """`agent` sends `reply` until it is stuck, and again once escalated."""
    return {agent: [reply] * 2, f"{agent}:up": [reply]}


async def test_a_subtask_folded_from_the_planner_s_steps_is_given_one_step_at_a_time(
    tmp_path: Path, repo: Path
) -> None:
    steps = [
        HINT_STEP,
        doc_step("hint"),
    ]
    scripts = typed_first(steps, {"coder:hint:step2": [DOCUMENTED, done("documented")]})
    report = await solve(request(tmp_path, repo, None), source=scripts)
    assert report.status == "done", report
    assert [s.id for s in report.subtasks] == ["hint"]
    told = first_told(scripts, "coder:hint")
    assert "Type one.\n\n(Step 1 of 2: do this step, then call finish" in told
    assert "Doc it." not in told.split("Your subtask:")[1]  # the next step comes later
    second = scripts.models["coder:hint:step2"]
    assert isinstance(second, ScriptedModel)
    asked = second.requests[0].messages
    assert (asked[-1].content or "").startswith("Step 2 of 2 of your subtask: Doc one. Doc it.")
    assert any(m.role == "tool" and "finish" in (m.name or "") for m in asked)  # same talk
    assert '"""One."""' in git(repo, "show", f"{report.branch}:a.py")


async def test_a_step_the_coder_got_stuck_on_is_followed_by_the_next(
    tmp_path: Path, repo: Path
) -> None:
    steps = [
        HINT_STEP,
        subtask("again", ["a.py"], ["hint"]) | {"title": "Hint", "instructions": "Type it."},
        doc_step("again"),
    ]
    scripts = typed_first(
        steps,
        {
            **looping("coder:hint:step2", "obj['new']"),  # done already: it loops
            **looping("coder:hint:step2:afresh", "obj['new']"),  # and again, fresh
            "coder:hint:step3": [DOCUMENTED, done("documented")],
        },
    )
    report = await solve(request(tmp_path, repo, None), source=scripts)
    assert report.status == "done", report
    told = first_told(scripts, "coder:hint:step3")
    assert told.startswith("Step 3 of 3 of your subtask: Doc one. Doc it.")
    assert "if your earlier changes did it already, call finish and say so" in told
    assert '"""One."""' in git(repo, "show", f"{report.branch}:a.py")
    hint = next(s for s in report.subtasks if s.id == "hint")
    assert hint.warning is not None and "got stuck on step 2 of 3 (Hint. Type it.)" in hint.warning
    assert "obj['new']" in hint.warning
    assert "- warning: hint: got stuck on step 2 of 3" in render_markdown(report)


async def test_a_step_the_coder_got_stuck_on_is_given_once_more_to_a_fresh_coder(
    tmp_path: Path, repo: Path
) -> None:
    """A small model that had finished step 1 answered step 2 with a lone fence, again
    and again: the step goes to a coder with a conversation of its own, shown the files
    as step 1 left them."""
    steps = [HINT_STEP, doc_step("hint")]
    scripts = typed_first(
        steps,
        {**looping("coder:hint:step2", "```"), "coder:hint:step2:afresh": [DOCUMENTED, done()]},
    )
    report = await solve(request(tmp_path, repo, None), source=scripts)
    assert report.status == "done", report
    told = first_told(scripts, "coder:hint:step2:afresh")
    assert told.startswith("Overall task: ")
    assert "Doc one. Doc it.\n\n(Step 2 of 2: step 1 is done in your worktree" in told
    assert "def one() -> int:" in told  # a.py as step 1 left it
    a_py = git(repo, "show", f"{report.branch}:a.py")
    assert "def one() -> int:" in a_py and '"""One."""' in a_py
    assert next(s.warning for s in report.subtasks) is None


async def test_a_step_finished_with_nothing_changed_is_given_once_to_a_fresh_coder(
    tmp_path: Path, repo: Path
) -> None:
    """A small model answered two steps of its subtask with `finish` at once, saying it
    had made each change: a step that changed nothing goes to a fresh coder, once."""
    steps = [HINT_STEP, doc_step("hint")]
    scripts = typed_first(
        steps,
        {
            "coder:hint:step2": [done("Documented one.")],
            "coder:hint:step2:afresh": [DOCUMENTED, done()],
        },
    )
    report = await solve(request(tmp_path, repo, None), source=scripts)
    assert report.status == "done", report
    assert "(Step 2 of 2: step 1 is done" in first_told(scripts, "coder:hint:step2:afresh")
    a_py = git(repo, "show", f"{report.branch}:a.py")
    assert "def one() -> int:" in a_py and '"""One."""' in a_py


async def test_a_step_that_stays_red_is_undone_and_the_steps_around_it_merge(
    tmp_path: Path, repo: Path
) -> None:
    """One bad step of a folded subtask (a small model's type hints) took the rename and
    the new function before and after it down with it: it is undone, the files as the
    step before left them, and the next step goes to a fresh coder."""
    bump = subtask("bump", ["a.py"], ["hint"]) | {"title": "Bump", "instructions": "Bump one."}
    scripts = typed_first(
        [HINT_STEP, bump, doc_step("bump")],
        {
            "coder:hint:step2": [edit("a.py", "    return 1", "    return 2"), done()],
            **{f"fixer:hint:step2:{n}": [done("could not")] for n in (1, 2, 3)},
            "coder:hint:step3:afresh": [DOCUMENTED, done()],
        },
    )
    report = await solve(request(tmp_path, repo, None), source=scripts)
    assert report.status == "done", report
    assert "coder:hint:step3" not in scripts.models  # its conversation held the undone step
    a_py = git(repo, "show", f"{report.branch}:a.py")
    assert a_py == 'def one() -> int:\n    """One."""\n    return 1'
    warning = next(s.warning for s in report.subtasks) or ""
    assert warning.startswith(
        "step 2 of 3 (Bump. Bump one.) was undone: `python check.py` stayed red"
    )
    assert_untouched(repo)


@pytest.mark.parametrize("coder", ["finished", "stuck"])
async def test_a_coder_sent_back_for_a_name_who_turns_the_check_red_is_undone(
    tmp_path: Path, repo: Path, coder: str
) -> None:
    """Sent back for the `low_stock` it had not added, a small model renamed what was
    there, its fixers could not make the check green, and the subtask started afresh
    without the green rename it had: now that send-back is undone instead, whether the
    coder finished (sent back at once) or got stuck (sent back once its change is green)."""
    add = subtask("s1", ["a.py"]) | {"instructions": "Type one and add `first_name()` to a.py."}
    typed = edit("a.py", "def one():", "def one() -> int:")
    stuck = "I have typed one."
    fixers = [f"fixer:s1:{n}" if coder == "finished" else f"fixer:s1:missing{n}" for n in (1, 2, 3)]
    scripts = ScriptedSource(
        {
            "coder:s1": [typed, done()] if coder == "finished" else [typed, stuck, stuck],
            "coder:s1:up": [stuck],
            "coder:s1:missing": [edit("a.py", "    return 1", "    return 2"), done()],
            **{fixer: [done("could not")] for fixer in fixers},
            "coder:complete": [done("could not")],
        }
    )
    plan = write_plan(tmp_path, [add])
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert [s.status for s in report.subtasks] == ["merged"], report
    assert git(repo, "show", f"{report.branch}:a.py") == "def one() -> int:\n    return 1"
    warning = report.subtasks[0].warning or ""
    assert warning.endswith("asked for first_name; no file has it"), warning
    assert ("what the coder was sent back for was undone" in warning) == (coder == "finished")
    assert "coder:s1:afresh1" not in scripts.models


async def test_a_coder_stuck_on_its_first_step_with_nothing_changed_starts_over(
    tmp_path: Path, repo: Path
) -> None:
    """Stuck on step 1 with no change made, the coder is not given step 2 in that
    conversation: it starts over, fresh, from step 1."""
    steps = [
        HINT_STEP,
        doc_step("hint"),
    ]
    scripts = ScriptedSource(
        {
            "planner": [json.dumps({"subtasks": steps})],
            "coder:hint": ["I will type it."] * 2,
            "coder:hint:up": ["I will type it."],
            "coder:hint:again1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:hint:again1:step2": [DOCUMENTED, done("documented")],
        }
    )
    report = await solve(request(tmp_path, repo, None), source=scripts)
    assert report.status == "done", report
    assert "coder:hint:step2" not in scripts.models
    a_py = git(repo, "show", f"{report.branch}:a.py")
    assert "def one() -> int:" in a_py and '"""One."""' in a_py
    assert next(s.warning for s in report.subtasks) is None


@pytest.mark.parametrize("puts_it_back", [True, False])
async def test_a_name_a_merged_subtask_added_is_kept_by_the_ones_after_it(
    tmp_path: Path, repo: Path, puts_it_back: bool
) -> None:
    add = subtask("s1", ["a.py"]) | {"instructions": "Add first_name() to a.py."}
    readme = subtask("s2", ["b.py"], ["s1"]) | {"instructions": "Tidy b.py."}
    rename_back = edit("a.py", "def other_name():", "def first_name():")
    added = edit("a.py", "def one():", "def first_name():\n    return 1\n\n\ndef one():")
    scripts = ScriptedSource(
        {
            "coder:s1": [added, done()],
            "coder:s2": [
                edit("b.py", "def two():", "def two() -> int:"),
                edit("a.py", "def first_name():", "def other_name():"),
                done(),
            ],
            "coder:s2:kept": [rename_back, done()] if puts_it_back else [done("it is better")],
            "coder:complete": [done("it is better")],  # first_name is gone at the end
            "coder:complete:missing": [done("it is better")],
        }
    )
    plan = write_plan(tmp_path, [add, readme])
    # the task names first_name (as the demo's names order_total): no unasked removal
    task = tmp_path / "task.md"
    task.write_text(f"---\ncheck: {CHECK}\n---\n# Tidy\n\nAdd first_name() and tidy b.py.\n")
    report = await solve(request(tmp_path, repo, plan, task=task), source=scripts)
    told = first_told(scripts, "coder:s2:kept")
    assert told.startswith("Your change takes away `first_name` (added by s1): the task needs it")
    s2 = {s.id: s for s in report.subtasks}["s2"]
    a_py = git(repo, "show", f"{report.branch}:a.py")
    if puts_it_back:
        assert "def first_name():" in a_py and s2.warning is None
    else:
        assert "def other_name():" in a_py
        assert s2.warning == "takes away first_name, which s1 added"
        shown = Path(str(report.report)).read_text()
        assert "- status: **done**, with 2 warnings (below)" in shown  # not all done
        assert report.missing == ["first_name"]


@pytest.mark.parametrize("renaming", [False, True])
async def test_the_rename_tool_is_offered_only_when_the_task_speaks_of_renaming(
    tmp_path: Path, repo: Path, renaming: bool
) -> None:
    """Asked to add a test, a small model renamed `clamp` to `clamp_test` and back."""
    task = tmp_path / "task.md"
    words = "Type one(), renaming nothing." if renaming else "Type one()."
    task.write_text(f"---\ncheck: {CHECK}\n---\n# Tidy\n\n{words}\n")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]}
    )
    report = await solve(request(tmp_path, repo, plan, task=task), source=scripts)
    assert report.status == "done", report
    model = scripts.models["coder:s1"]
    assert isinstance(model, ScriptedModel)
    first = model.requests[0]
    offered = {spec.name for spec in first.tools}
    assert ("rename" in offered) is renaming and {"edit_file", "write_file"} <= offered
    system = first.messages[0].content or ""
    assert ("rename changes a Python name" in system) is renaming
    assert "edit_file needs an exact, unique match of the old text)." in system or renaming


@pytest.mark.parametrize("adds_it", [True, "sent back", False, None])
async def test_a_name_the_task_asks_for_and_no_subtask_added_goes_to_one_coder_at_the_end(
    tmp_path: Path, repo: Path, adds_it: bool | str | None
) -> None:
    """`adds_it` None: the coder changes something else, which is dropped; "sent back": it
    says it added the name, is told it did not, and adds it."""
    task = tmp_path / "task.md"
    task.write_text(f"---\ncheck: {CHECK}\n---\n# Tidy\n\nType one() and add `first_name()`.\n")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])  # the planner left it out
    added = edit("b.py", "def two():", "def first_name():\n    return 1\n\n\ndef two():")
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:complete": (
                [added, done()]
                if adds_it is True
                else [done("Added first_name")]
                if adds_it == "sent back"
                else [done("nothing to add")]
                if adds_it is False
                else [edit("b.py", "def two():", "# tidied\ndef two():"), done("tidied it")]
            ),
            "coder:complete:missing": [added, done()] if adds_it == "sent back" else [done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan, task=task), source=scripts)
    assert report.status == "done", report
    told = first_told(scripts, "coder:complete")
    assert "Every subtask of this task has merged and the tests pass.\n\n" in told
    assert "The task asks for `first_name`, and no file has it." in told
    assert "> Type one() and add `first_name()`." in told  # the task itself
    b_py = git(repo, "show", f"{report.branch}:b.py")
    shown = Path(str(report.report)).read_text()
    sent_back = first_told(scripts, "coder:complete:missing") if adds_it is not True else None
    assert sent_back is None or sent_back.startswith("Your subtask asks for `first_name`")
    if adds_it:
        assert "def first_name():" in b_py and report.missing == []
        assert "swarm: what the task asks for" in git(
            repo, "log", "-1", "--format=%s", report.branch or ""
        )
    else:
        assert report.missing == ["first_name"] and "# tidied" not in b_py
        assert "- status: **done**, with 1 warning (below)" in shown
        assert "- warning: the task asks for `first_name`; no file of the branch has it" in shown


@pytest.mark.parametrize("finishes_it", [True, False])
async def test_a_rename_the_branch_has_not_made_everywhere_goes_to_one_coder_at_the_end(
    tmp_path: Path, repo: Path, finishes_it: bool
) -> None:
    """A small model's README coder changed one of the two lines naming the old name."""
    (repo / "pricing.py").write_text("def calc_total():\n    return 3\n")
    (repo / "README.md").write_text("# Shop\n\nCall calc_total() for the total.\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pricing")
    task = tmp_path / "task.md"
    task.write_text(
        f"---\ncheck: {CHECK}\n---\n# Rename\n\nRename `calc_total` to `order_total` everywhere.\n"
    )
    plan = write_plan(tmp_path, [subtask("s1", ["pricing.py"])])
    readme = edit("README.md", "Call calc_total()", "Call order_total()")
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("pricing.py", "def calc_total", "def order_total"), done()],
            "coder:complete": [readme, done()] if finishes_it else [done("it is fine")],
        }
    )
    report = await solve(request(tmp_path, repo, plan, task=task), source=scripts)
    assert report.status == "done", report
    told = first_told(scripts, "coder:complete")
    assert "The task renames `calc_total` to `order_total`, and these lines still have " in told
    assert "README.md:3: Call calc_total() for the total." in told
    shown = Path(str(report.report)).read_text()
    if finishes_it:
        assert "order_total()" in git(repo, "show", f"{report.branch}:README.md")
        assert report.left_behind == {}
    else:
        assert report.left_behind == {
            "calc_total": ["README.md:3: Call calc_total() for the total."]
        }
        assert (
            "- warning: the task renames `calc_total`; the branch still has it at README.md:3"
            in shown
        )


def test_renames_are_read_from_the_task_s_words() -> None:
    text = (
        "Rename `calc_total` to `order_total` everywhere. Also renaming old_name into "
        "new_name, and rename `a` to `a`. Renames X as Y."
    )
    assert renames(text) == [("calc_total", "order_total"), ("old_name", "new_name"), ("X", "Y")]


async def test_a_name_the_task_asks_for_goes_to_one_coder_at_the_end_when_a_subtask_failed(
    tmp_path: Path, repo: Path
) -> None:
    task = tmp_path / "task.md"
    task.write_text(f"---\ncheck: {CHECK}\n---\n# Tidy\n\nType one() and add `first_name()`.\n")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    added = edit("b.py", "def two():", "def first_name():\n    return 1\n\n\ndef two():")
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            **red_to_the_end("s2", edit("b.py", "return 2", "return 3")),
            "coder:complete": [added, done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan, task=task), source=scripts)
    assert report.status == "failed", report  # s2's own change did not merge
    assert {s.id: s.status for s in report.subtasks} == {"s1": "merged", "s2": "failed"}
    told = first_told(scripts, "coder:complete")
    assert 'pass the tests, but "do s2" did not merge, so its changes are not here.' in told
    assert "The task asks for `first_name`, and no file has it." in told
    assert report.branch is None and report.patch  # a failed run keeps its patch
    assert "+def first_name():" in Path(report.patch).read_text()
    assert report.missing == []


async def test_a_fresh_start_drops_the_warnings_of_the_attempt_it_threw_away(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py", "b.py"])])
    typed = [
        edit("a.py", "def one():", "def one() -> int:"),
        edit("b.py", "def two():", "def two() -> int:"),
    ]
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "return 1", "return 2"), done()],  # red, b.py untouched
            "coder:s1:untouched": [done("b.py needs nothing")],
            **{f"fixer:s1:{n}": [done("could not")] for n in (1, 2, 3)},
            "coder:s1:afresh1": [*typed, done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert report.status == "done", report
    s1 = report.subtasks[0]
    assert s1.status == "merged" and s1.warning is None  # "leaves b.py as it was" went too
    assert "def two() -> int:" in git(repo, "show", f"{report.branch}:b.py")


async def test_a_failing_check_is_fixed_by_a_fixer(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "return 1", "return 2"), done("oops")],
            "fixer:s1:1": [call("run_tests"), edit("a.py", "return 2", "return 1"), done("fixed")],
        }
    )
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert report.status == "done"
    (s1,) = report.subtasks
    # the fixer undid the coder's change: a green patch with nothing in it is "empty"
    assert s1.status == "empty" and s1.fix_rounds == 1
    fixer = scripts.models["fixer:s1:1"]
    assert isinstance(fixer, ScriptedModel)
    assert "one is wrong" in (fixer.requests[0].messages[-1].content or "")
    assert scripts.escalated == []


async def test_a_fix_loop_that_gives_up_escalates_then_fails(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"], ["s1"])])
    scripts = ScriptedSource(
        {
            **red_to_the_end("s1", edit("a.py", "return 1", "return 2")),
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert report.status == "failed"
    states = {s.id: s.status for s in report.subtasks}
    # s2 depends on s1 for order (the default): it runs on what merged, and lands
    assert states == {"s1": "failed", "s2": "merged"}
    escalated = ["fixer:s1:2", "fixer:s1:3"]
    assert scripts.escalated == [*escalated, *(f"{f}:afresh1" for f in escalated)]
    assert_untouched(repo)


async def test_the_fixer_escalates_after_the_configured_red_rounds(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "return 1", "return 2"), done()],
            **{f"fixer:s1:{n}": [done("could not")] for n in (1, 2, 3)},
        }
    )
    config = tmp_path / "swarm.toml"
    config.write_text("[routing]\nescalate_after = 2\nfresh_starts = 0\n", encoding="utf-8")
    report = await solve(request(tmp_path, repo, plan, config_path=str(config)), source=scripts)
    assert report.status == "failed"
    assert scripts.escalated == ["fixer:s1:3"]


async def test_a_merge_conflict_is_rebased_by_a_fixer(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    both = 'NAMES = ["one", "two", "three", "four"]\n'
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("shared.py", '"two"]', '"two", "three"]'), done()],
            "coder:s2": [edit("shared.py", '"two"]', '"two", "four"]'), done()],
            "fixer:s1:rebase1": [call("write_file", path="shared.py", content=both), done()],
            "fixer:s2:rebase1": [call("write_file", path="shared.py", content=both), done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan, max_agents=2), source=scripts)
    assert report.status == "done", report
    assert sorted(s.rebases for s in report.subtasks) == [0, 1]
    assert git(repo, "show", f"{report.branch}:shared.py") == both.strip()
    assert_untouched(repo)


async def test_step_budget_stops_cleanly_and_keeps_merged_work(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"], ["s1"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
        }
    )
    report = await solve(
        request(tmp_path, repo, plan, budget=BudgetLimits(steps=3)), source=scripts
    )
    assert report.status == "stopped"
    assert report.stop_reason == "steps"
    assert {s.id: s.status for s in report.subtasks} == {"s1": "merged", "s2": "skipped"}
    assert "def one() -> int" in git(repo, "show", f"{report.branch}:a.py")
    assert_untouched(repo)


async def test_usd_budget_stops_the_run(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"], ["s1"])])

    def pricey(item: Scripted) -> Scripted:
        return reply(item, cost_usd=0.3)

    scripts = ScriptedSource(
        {
            "coder:s1": [pricey(edit("a.py", "def one():", "def one() -> int:")), pricey(done())],
            "coder:s2": [pricey(done())],
        }
    )
    report = await solve(
        request(tmp_path, repo, plan, budget=BudgetLimits(usd=0.5)), source=scripts
    )
    assert report.status == "stopped" and report.stop_reason == "usd"
    assert report.cost_usd == pytest.approx(0.6)


async def test_deadline_stops_the_run_and_leaves_no_worktrees(tmp_path: Path, repo: Path) -> None:
    async def slow(request: ChatRequest) -> Scripted:
        await anyio.sleep(30)
        return done()

    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    scripts = ScriptedSource({}, default=FunctionModel(slow))
    report = await solve(
        request(tmp_path, repo, plan, budget=BudgetLimits(deadline=1.0)), source=scripts
    )
    assert report.status == "stopped" and report.stop_reason == "deadline"
    assert report.wall_s < 20
    assert_untouched(repo)


async def test_cancellation_mid_run_leaves_no_worktrees(tmp_path: Path, repo: Path) -> None:
    started = anyio.Event()

    async def hang(request: ChatRequest) -> Scripted:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError

    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    scripts = ScriptedSource({}, default=FunctionModel(hang))
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(solve, request(tmp_path, repo, plan), source=scripts))
        with anyio.fail_after(20):
            await started.wait()
        await anyio.sleep(0.2)
        tg.cancel_scope.cancel()
    assert_untouched(repo)
    from swarm.run.journal import Journal

    with Journal.open(tmp_path / "state" / "journal.db") as journal:
        (run,) = journal.list_runs()
    assert run.status == "interrupted"


RUNNER = textwrap.dedent(
    """
    import json, sys, anyio
    from pathlib import Path
    from swarm.run._solve import SolveRequest, solve
    from swarm.testing import FunctionModel, call

    log = Path(sys.argv[1])
    request = SolveRequest(**json.loads(sys.argv[2]))

    async def play(req):
        agent = req.metadata["agent"]
        step = sum(1 for m in req.messages if m.role == "assistant")
        with log.open("a") as f:
            f.write(f"{agent} {step}\\n")
        await anyio.sleep(0.15)
        if step == 0:
            names = {"coder:s1": "a.py", "coder:s2": "b.py", "coder:s3": "shared.py"}
            return call("write_file", path=names[agent] + ".txt", content=agent)
        return call("finish", summary="done")

    class Source:
        def model(self, role, *, agent_id, escalate=False):
            return FunctionModel(play, name=agent_id)

    report = anyio.run(lambda: solve(request, source=Source()))
    print(report.model_dump_json())
    """
)


def test_kill_9_then_resume_finishes_without_repeating_calls(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(
        tmp_path,
        [
            subtask("s1", ["a.py.txt"]),
            subtask("s2", ["b.py.txt"], ["s1"]),
            subtask("s3", ["shared.py.txt"], ["s2"]),
        ],
    )
    req = request(tmp_path, repo, plan)
    log = tmp_path / "calls.log"
    args = json.dumps(dict(req.__dict__))
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    errors = tmp_path / "first.err"
    with errors.open("w") as err:
        first = subprocess.Popen(
            [sys.executable, str(script), str(log), args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        deadline = time.monotonic() + 30
        while not (log.exists() and len(log.read_text().splitlines()) >= 3):
            assert time.monotonic() < deadline, errors.read_text()
            assert first.poll() is None, errors.read_text()
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    before = log.read_text().splitlines()

    from swarm.run.journal import Journal

    with Journal.open(tmp_path / "state" / "journal.db") as journal:
        (run,) = journal.list_runs()
    resume = json.dumps({**json.loads(args), "run_id": run.run_id, "plan_path": None})
    second = subprocess.run(
        [sys.executable, str(script), str(log), resume],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    report = RunReport.model_validate_json(second.stdout.strip().splitlines()[-1])
    assert report.status == "done", report
    assert report.run_id == run.run_id
    calls = log.read_text().splitlines()
    after = calls[len(before) :]
    # the call in flight at the kill may be made again; no completed call is repeated
    assert len(set(before) & set(after)) <= 1, (before, after)
    assert sorted(set(calls)) == sorted(
        f"coder:{s} {n}" for s in ("s1", "s2", "s3") for n in (0, 1)
    )
    for name in ("a.py.txt", "b.py.txt", "shared.py.txt"):
        assert git(repo, "show", f"{report.branch}:{name}").startswith("coder:")
    assert_untouched(repo)


@pytest.mark.parametrize("keep", [False, True])
async def test_a_failed_run_leaves_no_branch_unless_asked(
    tmp_path: Path, repo: Path, keep: bool
) -> None:
    """The merged work of a failed run is in its patch; its `swarm/<id>` branch is gone
    unless `--keep-branch`, and resuming it then is refused with the reason."""
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"], ["s1"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            **red_to_the_end("s2", edit("b.py", "return 2", "return 3")),
        }
    )
    report = await solve(request(tmp_path, repo, plan, keep_branch=keep), source=scripts)
    assert report.status == "failed"
    assert {s.id: s.status for s in report.subtasks} == {"s1": "merged", "s2": "failed"}
    branches = git(repo, "branch", "--list", "swarm/*", "--format=%(refname:short)")
    assert branches == (f"swarm/{report.run_id}" if keep else "")
    assert report.branch == (f"swarm/{report.run_id}" if keep else None)
    assert report.patch is not None
    assert "def one() -> int:" in Path(report.patch).read_text()
    if not keep:
        from swarm.errors import ConfigError

        with pytest.raises(ConfigError, match="branch was deleted"):
            await solve(request(tmp_path, repo, None, run_id=report.run_id), source=scripts)


async def test_the_root_span_is_named_by_the_task_and_every_wait_by_its_kind(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"], ["s1"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert report.status == "done", report
    tr = load_trace(Path(str(report.trace)))
    root = tr.attributes(tr.root)
    assert tr.name[tr.root] == "invoke_workflow Tidy up"
    assert root[sc.WORKFLOW_NAME] == "swarm" and root[sc.RUN_ID] == report.run_id
    kinds = [(tr.name[i], tr.attributes(i).get(sc.WAIT_KIND)) for i in range(len(tr))]
    waits = [(name, kind) for name, kind in kinds if name.startswith(sc.WAIT_SPAN)]
    assert ("swarm.wait dependency", "dependency") in waits
    assert all(name == f"{sc.WAIT_SPAN} {kind}" for name, kind in waits), waits


async def test_a_cluster_asked_for_without_an_opener_is_refused_before_the_run(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    from swarm.errors import ConfigError

    with pytest.raises(ConfigError, match="cluster opener"):
        await solve(request(tmp_path, repo, plan, cluster="auto"), source=ScriptedSource({}))
    assert not (tmp_path / "state" / "runs").exists()
    assert_untouched(repo)


def _stuck(text: str) -> list[Scripted]:
    """Twice from the agent's model; warned, it moves to its fallback (`ID:up`) once."""
    return [text, text]


async def test_a_coder_stuck_without_a_change_starts_over_once_then_fails(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": _stuck("I will now read a.py."),
            "coder:s1:up": ["I will now read a.py."],
            "coder:s1:again1": _stuck("I will now read a.py!"),
            "coder:s1:again1:up": ["I will now read a.py!"],
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
        }
    )
    report = await solve(request(tmp_path, repo, plan, max_agents=1), source=scripts)
    assert report.status == "failed"
    s1 = next(s for s in report.subtasks if s.id == "s1")
    assert s1.status == "failed"
    assert s1.error is not None and "got stuck, changing nothing" in s1.error
    assert {s.id: s.status for s in report.subtasks}["s2"] == "merged"  # the run went on


async def test_a_stuck_coder_starts_over_more_while_the_deadline_leaves_room(
    tmp_path: Path, repo: Path
) -> None:
    """Beyond the one fresh start it always gets, a coder stuck without a change starts
    over again while the run's deadline has room for a few more attempts like the last."""
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": _stuck("I will now read a.py."),
            "coder:s1:up": ["I will now read a.py."],
            "coder:s1:again1": _stuck("I will now read a.py!"),
            "coder:s1:again1:up": ["I will now read a.py!"],
            "coder:s1:again2": [edit("a.py", "def one():", "def one() -> int:"), done()],
        }
    )
    limits = BudgetLimits(deadline=600.0)
    report = await solve(request(tmp_path, repo, plan, budget=limits), source=scripts)
    assert report.status == "done", report
    assert {s.id: s.status for s in report.subtasks} == {"s1": "merged"}
    assert set(report.stuck) == {"coder:s1", "coder:s1:again1"}
    assert set(report.stuck) == {"coder:s1", "coder:s1:again1"}
    assert "I will now read a.py" in report.stuck["coder:s1"]
    text = Path(str(report.report)).read_text()
    assert "- stuck: coder:s1 kept sending: I will now read a.py." in text
    assert scripts.escalated == ["coder:s1:up", "coder:s1:again1:up"]  # once each
    assert_untouched(repo)


async def test_a_coder_stuck_after_its_change_still_merges(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), *_stuck("All done.")],
            "coder:s1:up": ["All done."],
        }
    )
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert report.status == "done" and report.count("merged") == 1
    assert list(report.stuck) == ["coder:s1"]


async def test_a_rebase_that_re_applies_nothing_is_not_an_empty_success(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("shared.py", '"two"]', '"two", "three"]'), done()],
            "coder:s2": [edit("shared.py", '"two"]', '"two", "four"]'), done()],
            "fixer:s1:rebase1": [done("nothing to do")],
            "fixer:s2:rebase1": [done("nothing to do")],
            "fixer:s1:rebase2": [done("nothing to do")],
            "fixer:s2:rebase2": [done("nothing to do")],
        }
    )
    report = await solve(request(tmp_path, repo, plan, max_agents=2), source=scripts)
    statuses = sorted(s.status for s in report.subtasks)
    assert statuses == ["failed", "merged"], report.subtasks
    failed = next(s for s in report.subtasks if s.status == "failed")
    assert failed.error is not None and "the rebase left no change" in failed.error
    assert report.status == "failed"


RUFF = f"{Path(sys.executable).parent / 'ruff'} check --isolated --select ANN201 a.py b.py"
"""A done condition that is red before the work: public functions without return types."""


def _typed(repo: Path) -> ScriptedSource:
    return ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
        },
        # a red final check is not expected: the report (in the assertion) says why it was
        default=FunctionModel(lambda r: call("finish", summary="cannot")),
    )


async def test_ruff_as_accept_red_before_green_after_is_done(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    task = write_task(tmp_path, extra=f"accept: {RUFF}\n")
    report = await solve(request(tmp_path, repo, plan, task=task), source=_typed(repo))
    assert report.status == "done", report
    assert report.final_check == "passed"
    assert report.baseline[RUFF].startswith("failed (exit 1) (accept"), report.baseline
    assert report.baseline[CHECK] == "passed"


async def test_ruff_as_accept_still_red_after_is_failed(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])  # b.py keeps its untyped def
    task = write_task(tmp_path, extra=f"accept: {RUFF}\n")
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]},
        default=FunctionModel(lambda r: call("finish", summary="cannot")),
    )
    report = await solve(request(tmp_path, repo, plan, task=task), source=scripts)
    assert report.status == "failed" and report.final_check == "failed"
    assert report.count("merged") == 1
    assert report.error is not None
    assert f"the done condition still fails on the final tree: `{RUFF}` exited 1" in report.error


async def test_a_pytest_acceptance_test_red_before_and_unchanged_is_never_done(
    tmp_path: Path, repo: Path
) -> None:
    (repo / "test_accept.py").write_text(
        "from a import one\n\ndef test_one_is_two():\n    assert one() == 2\n"
    )
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    git(repo, "commit", "-qm", "an acceptance test")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    accept = f"{sys.executable} -m pytest -q -p no:cacheprovider test_accept.py"
    task = write_task(tmp_path, extra=f"accept: {accept}\n")
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]},
        default=FunctionModel(lambda r: call("finish", summary="cannot")),
    )
    report = await solve(request(tmp_path, repo, plan, task=task), source=scripts)
    # its FAILED line was on the base commit too: a known failure of `check` would be
    # excused, but `accept` is never excused
    assert report.status == "failed" and report.final_check == "failed"
    assert "the done condition still fails" in str(report.error)
    assert "1 failed" in str(report.error)


async def test_a_subtask_still_red_after_its_fix_rounds_starts_afresh_from_its_base(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "return 1", "return 5"), done()],  # breaks the check
            "coder:s1:afresh1": [edit("a.py", "def one():", "def one() -> int:"), done()],
        },
        default=FunctionModel(lambda r: call("finish", summary="cannot fix it")),
    )
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert report.status == "done", report
    (s1,) = report.subtasks
    assert (s1.status, s1.fix_rounds) == ("merged", 3)
    assert s1.started_afresh == ["started afresh: check still failing after 3 fix rounds"]
    # the red change went with its worktree: the fresh coder started from the base
    assert git(repo, "show", f"{report.branch}:a.py") == "def one() -> int:\n    return 1"
    fresh = scripts.models["coder:s1:afresh1"]
    assert isinstance(fresh, ScriptedModel)
    told = str(fresh.requests[0].messages[-1].content)
    assert "thrown away" in told and "one is wrong" in told and "def one():" in told
    assert "started afresh" in Path(str(report.report)).read_text()
    assert_untouched(repo)


async def test_a_rebase_fixer_that_gives_up_fails_its_subtask_not_the_run(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(
        tmp_path, [subtask("s1", ["shared.py"]), subtask("s2", ["b.py"]), subtask("s3", ["a.py"])]
    )
    both = 'NAMES = ["one", "two", "three", "four"]\n'
    broken = [
        call("write_file", path="shared.py", content=both),
        edit("a.py", "return 1", "return 5"),  # the rebase breaks the check
        done(),
    ]
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("shared.py", '"two"]', '"two", "three"]'), done()],
            "coder:s2": [edit("shared.py", '"two"]', '"two", "four"]'), done()],
            "coder:s3": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "fixer:s1:rebase1": broken,
            "fixer:s2:rebase1": broken,
        },
        default=FunctionModel(lambda r: call("finish", summary="cannot fix it")),
    )
    report = await solve(request(tmp_path, repo, plan, max_agents=2), source=scripts)
    statuses = {s.id: s.status for s in report.subtasks}
    assert statuses["s3"] == "merged"
    assert sorted([statuses["s1"], statuses["s2"]]) == ["failed", "merged"], report.subtasks
    failed = next(s for s in report.subtasks if s.status == "failed")
    assert failed.error is not None and "fix rounds" in failed.error
    assert report.status == "failed" and report.error is None  # a subtask's end, not a crash
    assert_untouched(repo)


async def test_a_flaky_test_is_rerun_named_and_never_blamed(tmp_path: Path, repo: Path) -> None:
    """A test that fails once per tree and then passes (a race, a port, a clock)."""
    (repo / ".gitignore").write_text(".flaky-seen\n")
    (repo / "test_flaky.py").write_text(
        "import pathlib\n\n\ndef test_sometimes():\n"
        "    seen = pathlib.Path('.flaky-seen')\n"
        "    if not seen.exists():\n"
        "        seen.write_text('x')\n"
        "        raise AssertionError('failed this time')\n"
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a flaky test")
    check = f"{sys.executable} -m pytest -q -p no:cacheprovider"
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    task = tmp_path / "flaky.md"
    task.write_text(f"---\ncheck: {check}\n---\n# Type a\n\nType a.py.\n")
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]},
    )
    report = await solve(request(tmp_path, repo, plan, task=task), source=scripts)
    assert report.status == "done", report
    assert report.count("merged") == 1
    assert report.flaky == ["test_flaky.py::test_sometimes"]
    assert (
        "flaky tests (excused): test_flaky.py::test_sometimes"
        in Path(str(report.report)).read_text()
    )


async def test_one_subtask_on_a_green_tree_is_checked_once(tmp_path: Path, repo: Path) -> None:
    """The coder's own `run_tests` is the tree's check: neither the coordinator nor the
    merge queue runs the suite on that tree again."""
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [
                edit("a.py", "def one():", "def one() -> int:"),
                call("run_tests"),
                done(),
            ]
        }
    )
    report = await solve(request(tmp_path, repo, plan), source=scripts)
    assert report.status == "done" and report.count("merged") == 1
    trace = load_trace(Path(str(report.trace)))
    checks = [i for i in range(len(trace)) if trace.name[i] == "execute_tool run_tests"]
    by_whom = sorted(
        "checker" if sc.CHECK_COMMAND in trace.attributes(i) else "agent" for i in checks
    )
    # the checker's one run is the baseline, on the base commit; the agent's is the tree's
    assert by_whom == ["agent", "checker"]
    assert report.merge is not None and report.merge.checks_run == 0
