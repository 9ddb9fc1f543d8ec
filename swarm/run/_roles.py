"""The swarm's roles: what each sub-agent is told, which tools it gets, and its prompts.

Roles are low-cardinality names (`planner`, `coder`, `fixer`) that config maps to tiers;
agent ids (`coder:<subtask>`, `fixer:<subtask>:<round>`) are stable across a resumed run
so journaled model calls replay to the same agent.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Sequence

from swarm.agent._confined import read_confined
from swarm.agent._tool import ToolContext
from swarm.errors import ToolError
from swarm.run._check import failing_part
from swarm.run._plan import Subtask
from swarm.run._task import Task

__all__ = [
    "CODER",
    "FIXER",
    "PLANNER",
    "PLANNER_TOOLS",
    "coder_prompt",
    "completion_prompt",
    "first_step",
    "fix_prompt",
    "later_step",
    "mentions_text",
    "named_symbols",
    "planner_prompt",
    "rebase_prompt",
    "shown_files",
    "step_prompt",
    "unchanged_prompt",
]

PLANNER_TOOLS = ("read_file", "list_dir", "search")

PLANNER = """You are the planner of a swarm of coding agents. Explore the repository with
the read-only tools, then answer with ONLY a JSON object listing the subtasks. Its shape,
with made-up content (name your own subtasks after their work, with your own files):
{"subtasks": [
  {"id": "parse-config", "title": "Add parse_config", "instructions": "Write
   parse_config(text) in app/config.py and test it in tests/test_config.py.",
   "files": ["app/config.py", "tests/test_config.py"], "depends_on": []},
  {"id": "use-config", "title": "Load the config at start", "instructions": "Call
   parse_config from app/main.py.", "files": ["app/main.py"], "depends_on": ["parse-config"]}]}
Make subtasks small and independent where possible: they run in parallel, each in its own
copy of the repository, and are merged one by one. Subtasks whose files overlap run in
order. Every subtask must leave the repository's check passing."""

RENAME_NOTE = "; rename changes a Python name in every file at once"
"""What the coder's instructions say of the `rename` tool (left out where it is not
offered: `swarm.run._agent_factory`)."""

CODER = (
    "You are a coder in a swarm. You work in your own git worktree of the repository.\n"
    "Make the change your subtask asks for, confined to its files where you can, using the\n"
    f"tools (edit_file needs an exact, unique match of the old text{RENAME_NOTE}).\n"
    "Run the tests with run_tests. When the change is complete and the tests pass, call\n"
    "finish(summary)."
)

FIXER = """You are a fixer in a swarm. A change in your worktree fails the repository's
check, or no longer applies on the integration branch. Read the failure, find the cause,
fix it with the tools, run run_tests, and call finish(summary) when the check passes."""


LISTED_FILES = 200
"""How many of the repository's files the planner is shown by name."""


def planner_prompt(task: Task, errors: list[str] | None = None, files: Sequence[str] = ()) -> str:
    text = f"# {task.title}\n\n{task.instructions}"
    if task.check:
        text += f"\n\nThe check that must pass: `{task.check}`"
    if files:  # a small planner that lists nothing guesses paths (`app/pricing.py`)
        shown = sorted(files)[:LISTED_FILES]
        more = (
            f"\n... and {len(files) - len(shown)} more (list_dir)"
            if len(files) > len(shown)
            else ""
        )
        listing = "\n".join(shown) + more
        text += f"\n\nThe repository's files (use these paths):\n```\n{listing}\n```"
    if errors:
        listed = "\n".join(f"- {e}" for e in errors)
        text += f"\n\nYour previous plan was invalid:\n{listed}\nAnswer with a corrected plan."
    return text


TASK_CHARS = 2_000
"""How much of the task's own text a coder is shown beside its subtask."""


def _quoted(task: Task) -> str:
    """The task's instructions as a quote (cut at `TASK_CHARS`), or "" when it has none."""
    body = task.instructions.strip()
    if len(body) > TASK_CHARS:
        body = body[:TASK_CHARS].rsplit("\n", 1)[0] + "\n..."
    return "\n".join(f"> {line}" if line else ">" for line in body.splitlines())


def coder_prompt(task: Task, subtask: Subtask, shown: str = "") -> str:
    files = ", ".join(subtask.files) or "(not specified)"
    # the task's words beside the planner's: a small planner's subtask said "Write
    # clamp(x, lo, hi)" and lost what clamp must return
    quoted = _quoted(task)
    whole = (
        f"\n\nThe whole task (other agents do the parts that are not yours):\n{quoted}"
        if quoted
        else ""
    )
    return (
        # no subtask id: a small model took one (`create-item-class`) for a tool and called it
        f"Overall task: {task.title}{whole}\n\nYour subtask: {subtask.title}\n\n"
        f"{subtask.instructions}\n\nFiles in scope: {files}{shown}"
    )


SHOWN_CHARS = 12_000
"""How much of its files' text an agent is shown with its subtask (about 3k tokens)."""


def shown_files(ctx: ToolContext, files: Sequence[str], budget: int = SHOWN_CHARS) -> str:
    """The current text of a subtask's files, for its agent's first prompt.

    An agent that has not read a file guesses its text: a small model's first edit_file
    names an `old` that is not there, or it writes over a file it never saw. Shown the
    files, it copies from them, and saves the read_file round trips. A file that does
    not fit in what is left of `budget` is named, to read with read_file."""
    parts: list[str] = []
    for name in files:
        try:
            _, data = read_confined(ctx, name, budget)
        except ToolError as exc:
            if str(exc).startswith("no such file"):
                parts.append(f"{name}: (not there yet: create it with write_file)")
            elif "too large" in str(exc):
                parts.append(f"{name}: (too long to show here: read it with read_file)")
            continue
        if b"\0" in data:
            continue  # binary: nothing to copy from
        if len(data) > budget:
            parts.append(f"{name}: (too long to show here: read it with read_file)")
            continue
        text = data.decode("utf-8", errors="replace")
        budget -= len(data)
        ending = "" if text.endswith("\n") or not text else "\n"
        parts.append(f"{name}:\n```\n{text}{ending}```")
    if not parts:
        return ""
    return "\n\nThe files as they are now:\n\n" + "\n\n".join(parts)


_BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*)(?:\([^`]*\))?`")
_SNAKE = re.compile(r"\b[A-Za-z][a-z0-9]*(?:_[A-Za-z0-9]+)+\b")
_COMMON = frozenset(dir(builtins)) | {"self", "cls", "None", "True", "False"}
MENTIONED_NAMES = 6
MENTION_LINES = 40


def named_symbols(subtask: Subtask) -> list[str]:
    """The code names a subtask's title and instructions use (in backticks, or
    snake_case): where they appear in the repository tells its agent which files a
    rename or a new call reaches, beyond the ones the planner listed."""
    text = f"{subtask.title}\n{subtask.instructions}"
    found: list[str] = []
    for token in [*_BACKTICKED.findall(text), *_SNAKE.findall(text)]:
        if "/" in token or re.search(r"\.(py|md|txt|toml|json|cfg|ini|ya?ml|js|ts)$", token):
            continue  # a file, shown with the files
        found += [p for p in token.split(".") if len(p) > 2 and p not in _COMMON]
    named = [n for n in dict.fromkeys(found) if not keyword.iskeyword(n)]
    return named[:MENTIONED_NAMES]


def mentions_text(lines: Sequence[str], names: Sequence[str]) -> str:
    """`git grep` hits (`path:line:text`) of `names`, for an agent's first prompt."""
    if not lines:
        return ""
    shown = [line if len(line) < 160 else line[:157] + "..." for line in lines[:MENTION_LINES]]
    more = len(lines) - len(shown)
    tail = f"\n... and {more} more (use search)" if more > 0 else ""
    listed = ", ".join(f"`{n}`" for n in names)
    body = "\n".join(shown) + tail
    return f"\n\nWhere {listed} appear in other files now:\n```\n{body}\n```"


def completion_prompt(
    task: Task,
    missing: Sequence[str],
    failed: Sequence[str] = (),
    renamed: Sequence[tuple[str, str, Sequence[str]]] = (),
) -> str:
    """What the coder that adds what the task asks for and no subtask added is told;
    `failed`: the titles of the subtasks that did not merge (failed, or not run);
    `renamed`: (old, new, lines still holding old) of the renames not done everywhere."""
    titles = ", ".join(f'"{title}"' for title in failed)
    merged = (
        f"The subtasks of this task that merged pass the tests, but {titles} did not "
        f"merge, so {'its' if len(failed) == 1 else 'their'} changes are not here."
        if failed
        else "Every subtask of this task has merged and the tests pass."
    )
    asked: list[str] = []
    if missing:
        listed = ", ".join(f"`{name}`" for name in missing)
        it = "it" if len(missing) == 1 else "them"
        asked.append(
            f"The task asks for {listed}, and no file has {it}. Add {it} where the task "
            "says, as it says, keeping what is there."
        )
    for old, new, lines in renamed:
        shown = "\n".join(lines)
        asked.append(
            f"The task renames `{old}` to `{new}`, and these lines still have `{old}`:\n"
            f"```\n{shown}\n```\nChange `{old}` to `{new}` there (edit_file), where it "
            "means the renamed name."
        )
    return (
        f"The task: {task.title}\n{_quoted(task)}\n\n{merged}\n\n"
        + "\n\n".join(asked)
        + "\n\nread_file shows a file; search finds a name. Run run_tests, then call finish."
    )


def first_step(subtask: Subtask, steps: Sequence[str]) -> Subtask:
    """`subtask` as its coder is first given it: its first step alone, when parts were
    folded into it (`swarm.run._plan.fold_steps`)."""
    if len(steps) < 2:
        return subtask
    now = f"Step 1 of {len(steps)}: do this step, then call finish; the next step comes then."
    told = f"{steps[0]}\n\n({now})"
    return subtask.model_copy(update={"instructions": told})


def later_step(subtask: Subtask, steps: Sequence[str], number: int) -> Subtask:
    """`subtask` as a fresh coder is given its step `number` (from 1), the ones before it
    done: for a coder that got stuck on it in the conversation of the earlier steps. Its
    title is the step's number."""
    done = f"steps 1 to {number - 1} of this subtask are" if number > 2 else "step 1 is"
    now = (
        f"Step {number} of {len(steps)}: {done} done in your worktree (keep what they "
        "changed); do this step, then call finish."
    )
    # not the subtask's title, which is its first step's: a small model given "Rename
    # calc_total to order_total" over the type-hint step renamed it again, twice
    return subtask.model_copy(
        update={
            "title": f"step {number} of {len(steps)}",
            "instructions": f"{steps[number - 1]}\n\n({now})",
        }
    )


def step_prompt(step: str, number: int, count: int) -> str:
    """What a coder that finished a step of its subtask is told next."""
    last = "" if number < count else " It is the last one."
    return (
        f"Step {number} of {count} of your subtask: {step}\n\nKeep what you changed in "
        f"the earlier steps. Make this change with edit_file or write_file, then call "
        f"finish; if your earlier changes did it already, call finish and say so.{last}"
    )


def unchanged_prompt(subtask: Subtask) -> str:
    """What a coder that finished without changing anything is told, once."""
    files = ", ".join(subtask.files) or "the files it needs"
    return (
        "Your worktree has no changes, but your subtask asks for one: "
        f"{subtask.title}. Make it in {files} with edit_file or write_file "
        "(read_file shows a file's current text), run run_tests, then call finish. If no "
        "change is needed, call finish and say why."
    )


def fix_prompt(task: Task, subtask: Subtask, check: str, output: str, shown: str = "") -> str:
    files = ", ".join(subtask.files) or "(not specified)"
    # what the code should do: the 1.5B model's fixers, shown only a failing assert of a
    # test it had just written wrong, changed the expected value three times, each wrong
    asked = "\n".join(part for part in (subtask.instructions.strip(), _quoted(task)) if part)
    return (
        f"The check failed for your subtask: {subtask.title}.\n"
        f"Command: `{check}`\n\nWhat failed:\n{failing_part(output)}\n\n"
        f"Your files: {files}. Fix the cause within them; change another file only if "
        "the failure is there, and say so in your summary. What the code should do, as "
        "your subtask and the task say (the code or a test may be what is wrong):\n"
        f"{asked}{shown}"
    )


AFRESH_OUTPUT_CHARS = 1500
"""How much of the red check a subtask's fresh coder is told (the cause, not every line)."""


def afresh_note(check: str, output: str) -> str:
    """What the coder that starts a subtask afresh is told of the attempt thrown away."""
    return (
        "\n\nAn earlier attempt at this subtask was thrown away: after its fix rounds, "
        f"`{check}` still failed:\n{failing_part(output, AFRESH_OUTPUT_CHARS)}\n"
        "The files above are as they were before it. Make the change again, another way, "
        "and run the tests before you finish."
    )


def rebase_prompt(subtask: Subtask, patch: str, reason: str, shown: str = "") -> str:
    return (
        f"Your subtask, {subtask.title}, was done on an older version of the "
        f"integration branch and {reason}. Your worktree is at the new head.\n\n"
        f"Instructions: {subtask.instructions}\n\nThe earlier patch:\n```diff\n{patch}\n```\n"
        "Re-apply every part of the change on top of the current code (check each file "
        f"the earlier patch touched), run the tests, and finish.{shown}"
    )
