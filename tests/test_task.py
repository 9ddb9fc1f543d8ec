"""Task files: front matter, title and instructions; every mistake names its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm.budget import BudgetLimits
from swarm.config._duration import format_duration, parse_duration
from swarm.errors import ConfigError
from swarm.run._task import Task, load_task, parse_task

GOOD = """\
---
repo: ../app
check: pytest -q
max_agents: 8
budget: {usd: 2.5, deadline: 1h30m, steps: 40}
roles: {fixer: reasoning}
tiers:
  speed:
    max_in_flight: 32
---
# Replace the logger with structlog

Every module under `src/` uses a homegrown logger.

```bash
# run the tests like this
pytest -q
```
"""


def test_good_file(tmp_path: Path) -> None:
    path = tmp_path / "refactor.md"
    path.write_text(GOOD)
    task = load_task(path)
    assert task.title == "Replace the logger with structlog"
    assert task.instructions.startswith("Every module under `src/`")
    assert "# run the tests like this" in task.instructions
    assert task.repo == "../app"
    assert task.check == "pytest -q"
    assert task.max_agents == 8
    assert task.budget == BudgetLimits(usd=2.5, deadline=5400.0, steps=40)
    assert task.roles == {"fixer": "reasoning"}
    assert task.tiers == {"speed": {"max_in_flight": 32}}
    assert task.source == str(path)


def test_no_front_matter_and_defaults() -> None:
    task = parse_task("# Fix the build\n\nMake `make` pass.\n")
    assert task == Task(title="Fix the build", instructions="Make `make` pass.")
    assert task.source is None and task.roles == {} and task.budget is None


def test_heading_inside_a_code_fence_is_not_the_title() -> None:
    text = "---\ncheck: make\n---\n```\n# not a title\n```\n# The title\nDo it.\n"
    task = parse_task(text)
    assert task.title == "The title"
    assert task.instructions.startswith("```\n# not a title")


def test_empty_front_matter_and_numeric_deadline() -> None:
    assert parse_task("---\n---\n# T\nbody\n").check is None
    budget = parse_task("---\nbudget: {deadline: 90}\n---\n# T\nbody\n").budget
    assert budget is not None and budget.deadline == 90.0


def test_task_is_frozen_and_forbids_extra_fields() -> None:
    task = parse_task("# T\nbody\n")
    with pytest.raises(ValueError, match="frozen"):
        task.title = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="extra"):
        Task(title="t", instructions="i", colour="red")  # type: ignore[call-arg]


BAD = [
    # (front matter lines after the opening ---, expected line, expected words)
    ("repo: ../app\ncheck: pytest\nmax_agents: many\n", 4, "max_agents must be a whole number"),
    ("repo: x\nmax_agents: 2.5\n", 3, "max_agents must be a whole number"),
    ("max_agents: true\n", 2, "max_agents must be a whole number"),
    ("max_agents: 0\n", 2, "max_agents must be at least 1"),
    ("budget: {usd: lots}\n", 2, "budget.usd: Input should be a valid number"),
    ("budget: {usd: -1}\n", 2, "budget.usd: Input should be greater than 0"),
    ("budget: 5\n", 2, "budget must be a mapping of limits"),
    ("budget_usd: 1\n", 2, "'budget_usd' is now `budget: {usd: ...}`"),
    ("check: [pytest]\n", 2, "check must be a string"),
    ("repo: x\nbogus: 1\n", 3, "unknown key 'bogus'"),
    ("max_agent: 3\n", 2, "did you mean max_agents?"),
    ("check: x\nbudget:\n  deadline: soon\n", 4, 'is not a duration like "15m"'),
    ("budget: {deadline: 1h30}\n", 2, "is not a duration"),
    ("budget: {deadline: 0s}\n", 2, "budget.deadline: Input should be greater than 0"),
    ("deadline: 15m\n", 2, "'deadline' is now `budget: {deadline: 15m}`"),
    ("roles:\n  coder: speed\n  fixer: 3\n", 4, "roles.fixer must be a tier name"),
    ("roles: [fixer]\n", 2, "roles must be a mapping of role to tier"),
    ("repo: a\ncheck: b\nrepo: c\n", 4, "repo is given twice (first on line 2)"),
    ("repo: [a\ncheck: x\n", 3, "front matter is not valid YAML"),
    ("repo: a\n  check: x\n", 3, "front matter is not valid YAML"),
    ("- a\n- b\n", 2, "front matter must be a mapping"),
]


@pytest.mark.parametrize(("front", "line", "words"), BAD)
def test_malformed_front_matter_names_file_and_line(front: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_task(f"---\n{front}---\n# Title\nbody\n", source="tasks/t.md")
    message = str(info.value)
    assert message.startswith(f"tasks/t.md:line {line}: "), message
    assert words in message
    assert info.value.path == "tasks/t.md"
    assert info.value.key == f"line {line}"


def test_unknown_key_lists_the_allowed_keys() -> None:
    with pytest.raises(
        ConfigError,
        match=(
            "allowed: accept, allow, baseline, budget, check, dependencies, env, hooks, impact, "
            "include, max_agents"
        ),
    ):
        parse_task("---\ncolour: red\n---\n# T\nbody\n")


def test_unterminated_front_matter() -> None:
    with pytest.raises(ConfigError, match=r"^t\.md:line 1: .*no closing '---'"):
        parse_task("---\nrepo: x\n# Title\nbody\n", source="t.md")


def test_missing_title() -> None:
    with pytest.raises(ConfigError, match=r"^t\.md:line 4: missing title"):
        parse_task("---\nrepo: x\n---\nJust prose, no heading.\n## Not level one\n", source="t.md")
    with pytest.raises(ConfigError, match="missing title"):
        parse_task("")


def test_empty_instructions() -> None:
    with pytest.raises(ConfigError, match=r"^t\.md:line 4: .*no instructions"):
        parse_task("---\nrepo: x\n---\n# Title\n\n   \n", source="t.md")


def test_load_task_missing_or_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such task file"):
        load_task(tmp_path / "nope.md")
    bad = tmp_path / "bin.md"
    bad.write_bytes(b"# T\n\xff\xfe body")
    with pytest.raises(ConfigError, match="cannot read task file"):
        load_task(bad)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15m", 900),
        ("90s", 90),
        ("1h30m", 5400),
        ("2m 30s", 150),
        ("1.5h", 5400),
        ("250ms", 0.25),
        ("1d", 86400),
        ("45", 45),
        (12, 12),
        (0.5, 0.5),
    ],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1h30", "m", "-5m", "5 minutes", True, -1])
def test_parse_duration_refuses(text: str | float) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0.25, 0, 90, 5400, 3601)] == [
        "250ms",
        "0ms",
        "1m30s",
        "1h30m",
        "1h1s",
    ]
