"""The plan contract: a DAG of subtasks with file scopes, its validation and its order.

```json
{"subtasks": [{"id": "a", "title": "...", "instructions": "...",
               "files": ["src/log.py", "src/util/"], "depends_on": []}]}
```

`validate_plan` turns untrusted JSON (a planner model's reply, `--plan plan.json`) into a
`Plan`, reporting every problem at once so the planner can fix them in one go. Two
subtasks that could run at the same time and whose file scopes overlap are not an error:
the later one (in plan order) is made to depend on the earlier one, and the added edge is
recorded in `Plan.added_dependencies`. Scopes overlap when they name the same path, one is
a directory prefix of the other, or a glob may match the other (checked conservatively).

`Plan.ready` hands out runnable subtasks longest-remaining-chain first, the classic
critical-path list-scheduling rule, so the makespan is not set by a chain started late.
"""

from __future__ import annotations

import functools
import itertools
import json
import posixpath
import re
from collections.abc import Iterator, Mapping, Set
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, PrivateAttr, model_validator

from swarm.errors import PlanError
from swarm.run._plan_graph import chain_lengths, graph_problems, overlap_masks, serialise_overlaps

__all__ = [
    "Plan",
    "PlanError",
    "Subtask",
    "fold_contained",
    "fold_steps",
    "load_plan",
    "parse_plan_reply",
    "validate_plan",
]

_KEYS = ("id", "title", "instructions", "files", "depends_on")
_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?!\.))*")
"""A subtask id: it names a git branch, a worktree directory and journal rows."""
MAX_ID_CHARS = 64
_THEN = "\n\nThen: "
"""Where a folded subtask's part begins in the instructions of the one it joined."""


class Subtask(BaseModel, frozen=True):
    """One unit of work for one coder agent."""

    id: str
    """Unique within the plan; used in branch names, traces and the journal."""
    title: str
    instructions: str
    """What the coder is asked to do."""
    files: tuple[str, ...] = ()
    """The subtask's file scope: paths, directories (`src/util/`) or globs (`tests/*.py`)."""
    depends_on: tuple[str, ...] = ()
    """Ids that must be merged before this one starts (overlap edges included)."""


class Plan(BaseModel, frozen=True):
    """A validated DAG of subtasks. Build it with `validate_plan` from untrusted data."""

    subtasks: tuple[Subtask, ...]
    added_dependencies: tuple[tuple[str, str], ...] = ()
    """(subtask, now depends on) edges added because their file scopes overlap."""
    folded: tuple[tuple[str, str], ...] = ()
    """(subtask, folded into) pairs: a planner's subtask that waited on one other and
    worked only on its files became part of it (`fold_contained`)."""

    _by_id: Mapping[str, Subtask] = PrivateAttr(default_factory=dict)
    _chain: dict[str, int] = PrivateAttr(default_factory=dict)
    _index: dict[str, int] = PrivateAttr(default_factory=dict)
    _longest: int = PrivateAttr(default=1)

    @model_validator(mode="after")
    def _check_graph(self) -> Plan:
        ids = [s.id for s in self.subtasks]
        deps = [list(s.depends_on) for s in self.subtasks]
        problems = graph_problems(ids, deps, [f"subtasks[{i}]" for i in range(len(ids))])
        if problems:
            raise ValueError("; ".join(problems))
        # derived once here (O(V+E)), so equal plans stay equal and reads never mutate
        index = {x: i for i, x in enumerate(ids)}
        lengths = chain_lengths([[index[d] for d in ds] for ds in deps])
        self._by_id = MappingProxyType({s.id: s for s in self.subtasks})
        self._chain = dict(zip(ids, lengths, strict=True))
        self._index = index
        self._longest = max(lengths, default=1)
        return self

    def by_id(self) -> Mapping[str, Subtask]:
        """Subtasks by id (read-only)."""
        return self._by_id

    @property
    def _added(self) -> frozenset[tuple[str, str]]:
        return frozenset(self.added_dependencies)

    def chain_length(self, id: str) -> int:
        """Subtasks on the longest path from `id` to one nothing depends on (itself counts)."""
        return self._chain[id]

    def place_priority(self, id: str) -> int:
        """Which waiting subtask gets the next agent place (higher first): the longest
        chain ahead, then plan order, as `ready` lists them. A dependent that becomes ready
        late goes before the leaves planned after it, not behind every one that waits."""
        count = len(self.subtasks)
        return self._chain[id] * (count + 1) + count - self._index[id]

    def merge_rank(self, id: str) -> int:
        """Where `id`'s patch stands in the merge queue's line (lower first): the patches
        others wait for go first, the longest chain ahead (in plan order alone, a chain's
        head planned last waited behind every leaf); then plan order, which batches
        neighbours together: subtasks planned side by side are the likeliest to clash, and
        a clash inside one batch is found by the probe that checks it alone."""
        return (self._longest - self._chain[id]) * len(self.subtasks) + self._index[id]

    def ready(
        self,
        done: Set[str],
        running: Set[str] = frozenset(),
        finished: Set[str] = frozenset(),
        *,
        orders_only: bool = False,
    ) -> list[Subtask]:
        """Subtasks whose dependencies are all done, not done or running themselves;
        longest remaining chain first, ties by id.

        A dependency added only because file scopes overlap orders the work, it is not a
        need: it is met once that subtask has `finished`, merged or not. With
        `orders_only` (a task's `dependencies: order`), every dependency is met so."""
        added = self._added

        def met(s: Subtask, d: str) -> bool:
            return d in done or ((orders_only or (s.id, d) in added) and d in finished)

        out = [
            s
            for s in self.subtasks
            if s.id not in done and s.id not in running and all(met(s, d) for d in s.depends_on)
        ]
        out.sort(key=lambda s: (-self.chain_length(s.id), s.id))
        return out

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def fold_contained(plan: Plan) -> Plan:
    """`plan` with every subtask that waits on exactly one other, and works only on files
    that one names, made part of it (its instructions appended, its dependents waiting on
    the one it joined), when nothing else waits on that one.

    Small planner models split one change into steps ("add clamp", then "test clamp" in
    the same files); run apart, the second coder finds its work done or half-done by the
    first and has nothing it can change, and the run fails on a subtask that had no work.
    One coder doing both steps in order loses no parallelism: the second could not start
    before the first was merged. Applied to planners' replies, not to a user's plan file.
    """
    subtasks = {s.id: s for s in plan.subtasks}
    folded: list[tuple[str, str]] = []
    changed = True
    while changed:
        changed = False
        waiting_on: dict[str, list[str]] = {}
        for s in subtasks.values():
            for d in s.depends_on:
                waiting_on.setdefault(d, []).append(s.id)
        for s in list(subtasks.values()):
            if len(s.depends_on) != 1 or not s.files:
                continue
            into = subtasks[s.depends_on[0]]
            if waiting_on.get(into.id) != [s.id] or not set(s.files) <= set(into.files):
                continue
            then = f"{into.instructions}{_THEN}{s.title}. {s.instructions}"
            subtasks[into.id] = into.model_copy(update={"instructions": then})
            del subtasks[s.id]
            for other in subtasks.values():
                if s.id in other.depends_on:
                    deps = tuple(into.id if d == s.id else d for d in other.depends_on)
                    subtasks[other.id] = other.model_copy(
                        update={"depends_on": tuple(dict.fromkeys(deps))}
                    )
            folded.append((s.id, into.id))
            changed = True
            break
    if not folded:
        return plan
    kept = set(subtasks)
    joined = dict(folded)
    for part, whole in folded:  # a chain folded twice: each part into what remains
        while whole in joined:
            whole = joined[whole]
        joined[part] = whole
    return Plan(
        subtasks=tuple(subtasks[s.id] for s in plan.subtasks if s.id in kept),
        added_dependencies=tuple(
            dict.fromkeys(
                (joined.get(a, a), joined.get(b, b))
                for a, b in plan.added_dependencies
                if joined.get(a, a) != joined.get(b, b)
            )
        ),
        folded=(*plan.folded, *folded),
    )


def fold_steps(plan: Plan, subtask: Subtask) -> list[str]:
    """`subtask`'s instructions as the steps folded into it (`fold_contained`), in order:
    its own first, then each part that joined it. One step when nothing joined it.

    A small model given the parts at once did the first and called `finish`: "Rename
    calc_total ... Then: Add type hints ... Then: Add low_stock" ended with the rename
    alone. Given one at a time in the same conversation, each is the whole of its turn."""
    final = dict(plan.folded)
    joined = 0
    for part in final:
        whole = final[part]
        while whole in final:
            whole = final[whole]
        joined += whole == subtask.id
    if not joined:
        return [subtask.instructions]
    return subtask.instructions.split(_THEN, joined)


def load_plan(path: Path) -> Plan:
    """Read and validate a plan file (JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(problems=[f"cannot read plan file: {exc}"], source=str(path)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise PlanError(
            problems=[f"{where}: not valid JSON: {exc.msg}"], source=str(path)
        ) from None
    except RecursionError:
        raise PlanError(problems=[_TOO_DEEP], source=str(path)) from None
    return validate_plan(data, source=str(path))


_TOO_DEEP = "the JSON is nested too deeply to be a plan"


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[^\n]*\n(.*?)```", re.DOTALL)


def parse_plan_reply(text: str, known_files: Set[str] = frozenset()) -> Plan:
    """The plan in a model's reply: bare JSON, a ```json fence, or JSON amid prose.

    Among several JSON values, one with a `subtasks` key wins; a bare list is taken as
    the subtasks list. `known_files`: the repository's files, to place a path the planner
    got wrong (see `validate_plan`).
    """
    source = "planner reply"
    values: list[object] = []
    decode_error: json.JSONDecodeError | None = None
    for block in [*(m.group(2) for m in _FENCE.finditer(text)), text]:
        try:
            values.append(json.loads(block))
        except RecursionError:
            raise PlanError(problems=[_TOO_DEEP], source=source) from None
        except json.JSONDecodeError as exc:
            if block is not text and decode_error is None and block.lstrip()[:1] in ("{", "["):
                decode_error = exc
    fallback: object = None
    for value in itertools.chain(values, _embedded_objects(text)):
        if isinstance(value, dict) and "subtasks" in value:
            return validate_plan(value, source=source, known_files=known_files)
        if fallback is None and isinstance(value, list | dict):
            fallback = value
    if fallback is not None:
        data = {"subtasks": fallback} if isinstance(fallback, list) else fallback
        return validate_plan(data, source=source, known_files=known_files)
    if decode_error is not None:
        where = f"line {decode_error.lineno}, column {decode_error.colno}"
        problem = f"the JSON block is not valid JSON ({where} of the block): {decode_error.msg}"
        raise PlanError(problems=[problem], source=source)
    raise PlanError(
        problems=['the reply contains no JSON plan; answer with {"subtasks": [...]}'], source=source
    )


def _embedded_objects(text: str) -> Iterator[object]:
    """JSON objects found in prose, scanning from each `{` not inside an earlier one."""
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos != -1:
        try:
            value, end = decoder.raw_decode(text, pos)
        except RecursionError:
            raise PlanError(problems=[_TOO_DEEP], source="planner reply") from None
        except json.JSONDecodeError:
            end = pos + 1
        else:
            yield value
        pos = text.find("{", end)


def _surrogates(value: object, where: str) -> list[str]:
    """Where in a parsed JSON value a string cannot be encoded (a lone surrogate)."""
    found: list[str] = []
    stack = [(value, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                found.append(at)
        elif isinstance(v, dict):
            stack.extend((x, f"{at}.{k}") for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, f"{at}[{i}]") for i, x in enumerate(v))
    return sorted(found)


def validate_plan(
    data: object, *, source: str = "plan", known_files: Set[str] = frozenset()
) -> Plan:
    """Check `data` against the plan contract; raise PlanError listing every problem.

    With `known_files` (the repository's files), a file path that names none of them but
    is one of them with directories added or left out (`app/pkg/mod.py` or `mod.py` for
    `pkg/mod.py`) is taken as that file, when exactly one fits: a small planner model
    guesses paths, and its coder would be told to create a file that already exists."""
    if not isinstance(data, dict) or "subtasks" not in data:
        raise PlanError(problems=['a plan is a JSON object {"subtasks": [...]}'], source=source)
    raw = data["subtasks"]
    if not isinstance(raw, list) or not raw:
        raise PlanError(
            problems=["subtasks must be a non-empty list of subtask objects"], source=source
        )
    problems = [f"{where} holds a lone surrogate escape" for where in _surrogates(raw, "subtasks")]
    if problems:  # (`"\ud800"`): no file name, branch or prompt can hold one
        raise PlanError(problems=problems[:5], source=source)
    items = [_read_subtask(i, item, problems, known_files) for i, item in enumerate(raw)]
    ids = [str(item.get("id", "")) for item in items]
    deps = [list(item.get("depends_on", ())) for item in items]
    labels = [f"subtasks[{i}]" + (f" ({x!r})" if x else "") for i, x in enumerate(ids)]
    problems += graph_problems(ids, deps, labels, skip_empty=True)
    if problems:
        raise PlanError(problems=problems, source=source)
    index = {x: i for i, x in enumerate(ids)}
    edges = [[index[d] for d in ds] for ds in deps]
    added = serialise_overlaps(edges, overlap_masks([item["files"] for item in items]))
    for later, earlier in added:
        deps[later].append(ids[earlier])
    subtasks = tuple(
        Subtask(
            id=ids[i],
            title=item["title"],
            instructions=item["instructions"],
            files=tuple(item["files"]),
            depends_on=tuple(deps[i]),
        )
        for i, item in enumerate(items)
    )
    return Plan(
        subtasks=subtasks,
        added_dependencies=tuple((ids[a], ids[b]) for a, b in added),
    )


def _read_subtask(
    i: int, item: object, problems: list[str], known_files: Set[str] = frozenset()
) -> dict[str, Any]:
    """The subtask's fields, normalised; type problems are appended to `problems`."""
    at = f"subtasks[{i}]"
    if not isinstance(item, dict):
        problems.append(f"{at} must be an object with keys {', '.join(_KEYS)}")
        return {"files": []}
    out: dict[str, Any] = {}
    for key in item:
        if key not in _KEYS:
            problems.append(f"{at}: unknown key {key!r} (allowed: {', '.join(_KEYS)})")
    for key in ("id", "title", "instructions"):
        value = item.get(key)
        if not isinstance(value, str) or not value.strip():
            what = "missing" if value is None else "empty" if isinstance(value, str) else "not text"
            problems.append(f"{at}.{key} must be a non-empty string ({what})")
        else:
            out[key] = value.strip() if key == "id" else value
    if "id" in out and (problem := _id_problem(out["id"])):
        problems.append(f"{at}.id {out['id'][:80]!r} {problem}")
    for key in ("files", "depends_on"):
        value = item.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(f"{at}.{key} must be a list of strings")
            value = [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
        out[key] = list(dict.fromkeys(value))
    files = []
    for f in out["files"]:
        norm = _normalise(f)
        if norm is None:
            problems.append(f"{at}.files: {f!r} must be a path inside the repository")
        else:
            files.append(_located(norm, known_files))
    out["files"] = list(dict.fromkeys(files))
    return out


def _located(path: str, known: Set[str]) -> str:
    """The one known file `path` means when it names none (else `path` as it is): with
    directories added or left out; or, when its directory is none of the repository's
    (`app/pricing.py`, a planner copying its prompt's example), the one file of its name,
    or for a new file the path from the first directory the repository has."""
    if not known or path in known or path.endswith("/") or any(c in path for c in "*?["):
        return path
    fits = [f for f in known if path.endswith("/" + f) or f.endswith("/" + path)]
    if len(fits) == 1:
        return fits[0]
    folder, name = posixpath.split(path)
    dirs = _directories(frozenset(known))
    if fits or not folder or folder in dirs:
        return path
    named = [f for f in known if posixpath.basename(f) == name]
    if len(named) == 1:
        return named[0]
    parts = folder.split("/")
    for i in range(1, len(parts)):
        if "/".join(parts[i:]) in dirs:
            return "/".join([*parts[i:], name])
    return path


@functools.lru_cache(maxsize=4)
def _directories(known: frozenset[str]) -> frozenset[str]:
    """Every directory that holds one of `known`'s files, at any depth."""
    out: set[str] = set()
    for f in known:
        folder = posixpath.dirname(f)
        while folder and folder not in out:
            out.add(folder)
            folder = posixpath.dirname(folder)
    return frozenset(out)


def _id_problem(id: str) -> str | None:
    """Why `id` cannot name a subtask, or None."""
    if len(id) > MAX_ID_CHARS:
        return f"is {len(id)} characters long; at most {MAX_ID_CHARS}"
    if not _ID.fullmatch(id) or id.endswith((".", ".lock")):
        return (
            "must be letters, digits, '-', '_' and single dots, starting with a letter or "
            "digit and not ending in '.' or '.lock' (it names a git branch)"
        )
    return None


def _normalise(path: str) -> str | None:
    """Repo-relative POSIX path; a trailing `/` is kept to mark a directory."""
    text = path.strip().replace("\\", "/")
    if not text or text.startswith("/") or re.match(r"^[A-Za-z]:/", text):
        return None
    norm = posixpath.normpath(text)
    if norm == ".." or norm.startswith("../"):
        return None
    if norm == ".":
        return "*"  # the whole repository
    return norm + "/" if text.endswith("/") else norm
