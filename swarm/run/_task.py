"""Task files (`tasks/*.md`): optional YAML front matter, then a `# Title` and instructions.

```markdown
---
repo: ../app
check: pytest -q
max_agents: 8
budget: {usd: 2.50, deadline: 15m}
roles: {fixer: reasoning}
---
# Replace the homegrown logger with structlog

Every module under src/ ...
```

Every mistake becomes a `ConfigError` naming the file, the line and the fix. Pydantic does
the type checks; its errors are translated into sentences, and the line of the key at
fault comes from the YAML node tree (so flow mappings and quoted keys are located too).
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from swarm.budget import BudgetLimits
from swarm.config import MergeConfig
from swarm.config._run import SandboxNetwork, parse_endpoint
from swarm.errors import ConfigError

__all__ = ["Task", "load_task", "parse_task"]


class Task(BaseModel, frozen=True, extra="forbid"):
    """One task for `swarm solve`, as written in a task file."""

    title: str
    """The first `# ` heading."""
    instructions: str
    """Everything else in the markdown body, stripped."""
    repo: str | None = None
    """Repository to work on, as written (relative paths are relative to the task file)."""
    check: str | None = None
    """Shell command that must pass after every subtask (e.g. `pytest -q {files}`; `{files}`
    becomes the subtask's files, shell-quoted)."""
    accept: str | None = None
    """The final "done" condition, run on the integration branch (default: `check` with
    `{files}` left empty)."""
    setup: str | None = None
    """Shell command run in every fresh worktree before work starts (e.g. `npm ci`)."""
    include: tuple[str, ...] = ()
    """Untracked or ignored paths (globs) the checks need, brought from the checkout."""
    python: str | None = None
    """The interpreter checks run with (default: the repository's own venv, if any)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for checks and agents' commands."""
    hooks: Literal["skip", "run"] = "skip"
    """The repository's git hooks: never run (default), or run when swarm commits."""
    sandbox: Literal["bwrap", "none"] | None = None
    """Where commands run: `bwrap` or `none`; None: the config's `[sandbox] kind`."""
    network: SandboxNetwork | None = None
    """The sandbox's network (`off`, `loopback`, `allow`, `host`); None: `[sandbox] network`."""
    allow: tuple[str, ...] | None = None
    """What a `loopback` or `allow` network reaches (`HOST:PORT` each); None: `[sandbox] allow`."""
    baseline: Literal["record", "stop"] = "record"
    """A check already red before any change: judge subtasks against its known failures
    (`record`), or stop before spending anything (`stop`)."""
    impact: bool = True
    """A subtask's check in its worktree runs only the test files its change reaches by
    imports when `check` is a plain pytest run (the merge queue runs the whole check);
    False: the whole check in every worktree."""
    max_agents: int | None = None
    """Sub-agents allowed to run at once."""
    dependencies: Literal["order", "need"] = "order"
    """What a plan's `depends_on` means when the subtask it names fails: `order` (default)
    runs the dependent anyway, on what has merged, and its own check decides whether it
    lands (a planner model declares most of its dependencies for order, not need);
    `need` skips it."""
    budget: BudgetLimits | None = None
    """The run's limits (`budget: {usd: 2, steps: 300, deadline: 15m}`)."""
    merge: MergeConfig | None = None
    """Merge queue settings over the config's `[merge]` (`merge: {batch_size: {max: 8}}`)."""
    roles: dict[str, str] = Field(default_factory=dict)
    """Role -> tier overrides, e.g. `{"fixer": "reasoning"}`."""
    tiers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-tier setting overrides, passed to the config layer as written."""
    source: str | None = None
    """The file the task came from, when it came from a file."""

    def check_for(self, files: Sequence[str] = ()) -> str | None:
        """The check for a subtask's `files` (`{files}` filled in, shell-quoted)."""
        if self.check is None:
            return None
        return self.check.replace(FILES, shlex.join(files)).strip()

    @property
    def accept_command(self) -> str | None:
        """The final condition: `accept`, else the check over everything."""
        return self.accept or self.check_for(())


class _FrontMatter(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    repo: str | None = None
    check: str | None = None
    accept: str | None = None
    setup: str | None = None
    include: list[str] = Field(default_factory=list)
    python: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    hooks: Literal["skip", "run"] = "skip"
    sandbox: Literal["bwrap", "none"] | None = None
    network: SandboxNetwork | None = None
    allow: list[str] | None = None
    baseline: Literal["record", "stop"] = "record"
    impact: bool = True
    max_agents: int | None = Field(default=None, ge=1)
    dependencies: Literal["order", "need"] = "order"
    budget: BudgetLimits | None = None
    merge: MergeConfig | None = None
    roles: dict[str, str] = Field(default_factory=dict)
    tiers: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("allow")
    @classmethod
    def _endpoints(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or ():
            parse_endpoint(entry)
        return value


_ALLOWED = sorted(_FrontMatter.model_fields)
FILES = "{files}"
"""In `check`, the place of the subtask's files."""
_FENCE = re.compile(r"^\s*(```|~~~)")
_MOVED = {
    "budget_usd": "`budget: {usd: ...}`",
    "max_steps": "`budget: {steps: ...}`",
    "deadline": "`budget: {deadline: 15m}`",
}
"""Keys of earlier versions, and their one spelling now."""
# What each top-level key must be, in words, for type errors.
_SHAPES = {
    "repo": "a string (a path to a git repository)",
    "check": "a string (a shell command)",
    "accept": "a string (a shell command)",
    "setup": "a string (a shell command)",
    "include": "a list of paths or globs, e.g. [src/pkg/_version.py, .env]",
    "python": "a string (a path to an interpreter)",
    "env": "a mapping of variable to string value",
    "hooks": "`skip` or `run`",
    "sandbox": "`bwrap` or `none`",
    "network": "`off`, `loopback`, `allow` or `host`",
    "allow": 'a list of HOST:PORT entries, e.g. ["pypi.org:443", "127.0.0.1:5432"]',
    "baseline": "`record` or `stop`",
    "impact": "`true` or `false`",
    "max_agents": "a whole number",
    "dependencies": "`order` or `need`",
    "budget": "a mapping of limits, e.g. {usd: 2, steps: 300, deadline: 15m}",
    "merge": "a mapping of merge queue settings, e.g. {batch_size: {max: 8}, check_timeout: 5m}",
    "roles": "a mapping of role to tier, e.g. {fixer: reasoning}",
    "tiers": "a mapping of tier name to settings, e.g. {speed: {max_in_flight: 32}}",
}


def load_task(path: Path) -> Task:
    """Read and validate a task file; any problem is a ConfigError naming file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such task file", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read task file: {exc}", path=str(path)) from None
    return parse_task(text, source=str(path))


def parse_task(text: str, *, source: str = "<task>") -> Task:
    """Parse task-file text. `source` names it in errors; `<...>` names are not paths."""
    lines = text.removeprefix("\ufeff").splitlines()
    fields = _validate_front({}, None, source)
    body_start = 0  # index of the first body line
    if lines and lines[0].rstrip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
        if end is None:
            raise _error(source, 1, "front matter starts with '---' but has no closing '---' line")
        fields = _validate_front(*_front_matter(lines[1:end], source), source)
        body_start = end + 1
    title, instructions = _body(lines, body_start, source)
    return Task(
        title=title,
        instructions=instructions,
        source=None if source.startswith("<") else source,
        **fields,
    )


def _front_matter(block: list[str], source: str) -> tuple[dict[str, Any], yaml.Node | None]:
    """Parse the YAML between the `---` lines; the node tree is kept for line lookups."""
    text = "\n".join(block)
    try:
        _refuse_aliases(text, source)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 2 if mark is not None else 2  # +1 for 1-based, +1 for '---'
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context_mark", None)
        if context is not None and context.line + 2 != line:
            problem += f" (in what starts on line {context.line + 2})"
        raise _error(source, line, f"front matter is not valid YAML: {problem}") from None
    if data is None:
        return {}, None
    _refuse_surrogates(node, source)
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise _error(source, 2, "front matter must be a mapping of keys like `check: pytest -q`")
    seen: dict[str, int] = {}
    for key_node, _ in node.value:
        key, line = str(key_node.value), key_node.start_mark.line + 2
        if key in seen:
            raise _error(source, line, f"{key} is given twice (first on line {seen[key]})")
        seen[key] = line
    return data, node


def _refuse_aliases(text: str, source: str) -> None:
    """Anchors and aliases have no use in a task file, and nested aliases expand
    exponentially (a dozen lines make gigabytes): refuse them before building anything."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            line = event.start_mark.line + 2 if event.start_mark else 2
            raise _error(source, line, "YAML anchors and aliases (&name, *name) are not allowed")


def _refuse_surrogates(node: yaml.Node | None, source: str) -> None:
    """A `\ud800` escape makes a lone surrogate: a string no file name, command line or
    git can hold (it failed deep inside the sandbox before this check)."""
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if isinstance(n, yaml.ScalarNode):
            try:
                str(n.value).encode("utf-8")
            except UnicodeEncodeError:
                line = n.start_mark.line + 2
                raise _error(
                    source, line, f"{n.value!r} holds a lone surrogate escape, not a character"
                ) from None
        elif isinstance(n, yaml.MappingNode):
            stack.extend(v for pair in n.value for v in pair)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def _line(node: yaml.Node | None, loc: tuple[str | int, ...]) -> int:
    """The 1-based file line of the deepest key of `loc` that exists in the node tree."""
    line = 2
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if str(key_node.value) == str(part):
                line = key_node.start_mark.line + 2
                node = value_node
                break
        else:
            break
    return line


def _validate_front(front: dict[str, Any], node: yaml.Node | None, source: str) -> dict[str, Any]:
    for key in front:
        if key in _MOVED:
            raise _error(source, _line(node, (key,)), f"{key!r} is now {_MOVED[key]}")
        if key not in _FrontMatter.model_fields:
            close = difflib.get_close_matches(str(key), _ALLOWED, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise _error(
                source,
                _line(node, (key,)),
                f"unknown key {key!r} ({hint}allowed: {', '.join(_ALLOWED)})",
            )
    try:
        fm = _FrontMatter.model_validate(front)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        raise _error(source, _line(node, loc), _explain(loc, err)) from None
    return {
        "repo": fm.repo,
        "check": fm.check,
        "accept": fm.accept,
        "setup": fm.setup,
        "include": tuple(fm.include),
        "python": fm.python,
        "env": fm.env,
        "hooks": fm.hooks,
        "sandbox": fm.sandbox,
        "network": fm.network,
        "allow": None if fm.allow is None else tuple(fm.allow),
        "baseline": fm.baseline,
        "impact": fm.impact,
        "max_agents": fm.max_agents,
        "dependencies": fm.dependencies,
        "budget": fm.budget,
        "merge": fm.merge,
        "roles": fm.roles,
        "tiers": fm.tiers,
    }


def _explain(loc: tuple[str | int, ...], err: Any) -> str:
    key = str(loc[0]) if loc else "front matter"
    kind: str = err["type"]
    ctx = err.get("ctx") or {}
    if len(loc) > 1:
        where = ".".join(str(p) for p in loc)
        if key == "roles":
            return f"{where} must be a tier name (a string), e.g. `fixer: reasoning`"
        return f"{where}: {err['msg']}"
    if kind == "greater_than_equal":
        return f"{key} must be at least {ctx.get('ge')}"
    if kind == "greater_than":
        return f"{key} must be more than {ctx.get('gt'):g}"
    got = repr(err.get("input"))
    got = got if len(got) <= 80 else got[:77] + "..."
    return f"{key} must be {_SHAPES.get(key, 'valid')} (got {got})"


def _body(lines: list[str], start: int, source: str) -> tuple[str, str]:
    """Find the title (first `# ` heading outside code fences) and the instructions."""
    in_fence = False
    for i in range(start, len(lines)):
        if _FENCE.match(lines[i]):
            in_fence = not in_fence
            continue
        if not in_fence and lines[i].startswith("# ") and lines[i][2:].strip():
            title = lines[i][2:].strip().rstrip("#").strip()
            rest = [*lines[start:i], *lines[i + 1 :]]
            instructions = "\n".join(rest).strip()
            if not instructions:
                raise _error(source, i + 1, "the task has a title but no instructions below it")
            return title, instructions
    raise _error(
        source, start + 1, "missing title: the task needs a `# Title` line after the front matter"
    )


def _error(source: str, line: int, message: str) -> ConfigError:
    return ConfigError(message, path=source, key=f"line {line}")
