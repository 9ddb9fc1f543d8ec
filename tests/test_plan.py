"""Plans: validation reports every problem, overlaps become edges, ready() orders work."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from swarm.errors import ConfigError
from swarm.run._plan import (
    Plan,
    PlanError,
    Subtask,
    fold_contained,
    fold_steps,
    load_plan,
    parse_plan_reply,
    validate_plan,
)


def st(id: str, files: list[str] | None = None, deps: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": id,
        "title": f"title {id}",
        "instructions": f"do {id}",
        "files": files or [],
        "depends_on": deps or [],
    }


def problems_of(data: object) -> list[str]:
    with pytest.raises(PlanError) as info:
        validate_plan(data)
    return info.value.problems


def test_valid_dag() -> None:
    plan = validate_plan(
        {"subtasks": [st("a", ["a.py"]), st("b", ["b.py"], ["a"]), st("c", ["c.py"], ["a"])]}
    )
    assert [s.id for s in plan.subtasks] == ["a", "b", "c"]
    assert plan.by_id()["b"] == Subtask(
        id="b", title="title b", instructions="do b", files=("b.py",), depends_on=("a",)
    )
    assert plan.added_dependencies == ()
    assert [s.id for s in plan.ready(set())] == ["a"]
    assert [s.id for s in plan.ready({"a"})] == ["b", "c"]
    assert [s.id for s in plan.ready({"a"}, running={"b"})] == ["c"]
    assert plan.ready({"a", "b", "c"}) == []


def test_a_guessed_path_is_taken_as_the_one_file_it_means() -> None:
    known = {"mathutil/__init__.py", "tests/test_mathutil.py", "pkg/a/util.py", "pkg/b/util.py"}
    plan = validate_plan(
        {
            "subtasks": [
                st("clamp", ["app/mathutil/__init__.py", "test_mathutil.py"]),
                st("new", ["mathutil/clamp.py", "util.py", "tests/"]),
            ]
        },
        known_files=known,
    )
    clamp, new = plan.subtasks
    assert clamp.files == ("mathutil/__init__.py", "tests/test_mathutil.py")
    assert new.files == ("mathutil/clamp.py", "util.py", "tests/")  # new, two fit, a dir
    assert plan.added_dependencies == (("new", "clamp"),)  # overlap seen on the real paths


def test_a_path_under_a_directory_the_repository_lacks_is_placed_where_it_fits() -> None:
    """As the real 1.5B planner wrote them, copying its prompt's `app/` example."""
    known = {"inventory/pricing.py", "inventory/__init__.py", "README.md"}
    wrote = ["app/pricing.py", "app/inventory/item.py", "app/x.py", "docs/README.md"]
    plan = validate_plan({"subtasks": [st("a", wrote)]}, known_files=known)
    assert plan.subtasks[0].files == (
        "inventory/pricing.py",
        "inventory/item.py",
        "app/x.py",
        "README.md",
    )


def test_plan_error_is_a_config_error_listing_all_problems() -> None:
    data = {
        "subtasks": [
            st("a", deps=["b"]),
            st("b", deps=["c"]),
            st("c", deps=["a"]),
            st("a"),
            st("d", deps=["d", "x", "bb"]),
            {"id": 3, "title": "", "files": "x", "colour": 1},
            st("z", ["/etc/passwd", "../up"]),
            "not an object",
            st(" "),
        ]
    }
    with pytest.raises(ConfigError) as info:
        validate_plan(data, source="plan.json")
    assert isinstance(info.value, PlanError)
    problems = info.value.problems
    expected = [
        "subtasks[5]: unknown key 'colour'",
        "subtasks[5].id must be a non-empty string (not text)",
        "subtasks[5].title must be a non-empty string (empty)",
        "subtasks[5].instructions must be a non-empty string (missing)",
        "subtasks[5].files must be a list of strings",
        "subtasks[6].files: '/etc/passwd' must be a path inside the repository",
        "subtasks[6].files: '../up' must be a path inside the repository",
        "subtasks[7] must be an object",
        "subtasks[8].id must be a non-empty string (empty)",
        "duplicate id 'a': subtasks[0] ('a') and subtasks[3] ('a')",
        "subtasks[4] ('d') depends on itself",
        "subtasks[4] ('d') depends on unknown id 'x'",
        "subtasks[4] ('d') depends on unknown id 'bb' (did you mean 'b'?)",
        "dependency cycle: a -> b -> c -> a",
    ]
    for words in expected:
        assert any(words in p for p in problems), (words, problems)
    assert len(problems) == len(expected)
    message = str(info.value)
    assert message.startswith(f"plan.json: {len(expected)} problems:\n- ")


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ([], 'a plan is a JSON object {"subtasks": [...]}'),
        ({"tasks": []}, 'a plan is a JSON object {"subtasks": [...]}'),
        ({"subtasks": []}, "subtasks must be a non-empty list"),
        ({"subtasks": {"a": 1}}, "subtasks must be a non-empty list"),
    ],
)
def test_not_a_plan(data: object, words: str) -> None:
    problems = problems_of(data)
    assert len(problems) == 1
    assert words in problems[0]


def test_field_type_paths() -> None:
    bad = st("b")
    bad["depends_on"] = "a"
    bad["files"] = ["ok.py", 3]
    problems = problems_of({"subtasks": [st("a"), bad]})
    assert problems == [
        "subtasks[1].files must be a list of strings",
        "subtasks[1].depends_on must be a list of strings",
    ]


def test_each_cycle_is_named_once() -> None:
    problems = problems_of(
        {
            "subtasks": [
                st("a", deps=["b"]),
                st("b", deps=["a"]),
                st("x", deps=["y"]),
                st("y", deps=["z"]),
                st("z", deps=["x", "a"]),
            ]
        }
    )
    assert sorted(problems) == [
        "dependency cycle: a -> b -> a (each depends on the next)",
        "dependency cycle: x -> y -> z -> x (each depends on the next)",
    ]


def test_direct_construction_checks_the_graph() -> None:
    a = Subtask(id="a", title="a", instructions="a", depends_on=("b",))
    b = Subtask(id="b", title="b", instructions="b", depends_on=("a",))
    with pytest.raises(ValidationError, match="dependency cycle: a -> b -> a"):
        Plan(subtasks=(a, b))


@pytest.mark.parametrize(
    ("first", "second", "overlap"),
    [
        ("src/a.py", "src/a.py", True),
        ("./src/a.py", "src//a.py", True),
        ("src/", "src/pkg/a.py", True),
        ("src", "src/pkg/a.py", True),
        ("src/pkg/a.py", "src/pkg", True),
        ("src/a.py", "src/b.py", False),
        ("src/a", "src/ab.py", False),
        ("tests/*.py", "tests/test_x.py", True),
        ("tests/*.py", "tests/data.json", False),
        ("tests/*.py", "tests", True),
        ("tests/*.py", "tests/*.md", False),
        ("src/*.py", "src/a*", True),
        ("src/*.py", "docs/*.py", False),
        ("*", "anything/at/all.txt", True),
        (".", "README.md", True),
    ],
)
def test_scope_overlap(first: str, second: str, overlap: bool) -> None:
    plan = validate_plan({"subtasks": [st("a", [first]), st("b", [second])]})
    assert plan.added_dependencies == ((("b", "a"),) if overlap else ())
    assert plan.by_id()["b"].depends_on == (("a",) if overlap else ())


def test_overlap_already_ordered_adds_nothing_and_never_makes_a_cycle() -> None:
    # b is listed first but depends on a (listed later): overlap already ordered
    plan = validate_plan({"subtasks": [st("b", ["x.py"], ["m"]), st("m"), st("a", ["x.py"])]})
    assert plan.added_dependencies == (("a", "b"),)
    # now a precedes b transitively: no edge may be added the other way
    plan = validate_plan({"subtasks": [st("b", ["x.py"], ["a"]), st("a", ["x.py"])]})
    assert plan.added_dependencies == ()


def test_a_file_shared_by_many_becomes_one_chain() -> None:
    plan = validate_plan({"subtasks": [st(f"s{i}", ["README.md", f"f{i}.py"]) for i in range(6)]})
    assert plan.added_dependencies == tuple((f"s{i}", f"s{i - 1}") for i in range(1, 6))
    assert plan.chain_length("s0") == 6


def test_longest_chain_first() -> None:
    plan = validate_plan(
        {
            "subtasks": [
                st("z"),
                st("m"),
                st("long1"),
                st("long2", deps=["long1"]),
                st("long3", deps=["long2"]),
                st("mid", deps=["m"]),
            ]
        }
    )
    assert plan.chain_length("long1") == 3
    assert plan.chain_length("m") == 2
    assert plan.chain_length("z") == 1
    assert [s.id for s in plan.ready(set())] == ["long1", "m", "z"]
    # the merge queue lands first what the longest chains wait for, wherever it is
    # planned; equal chains in plan order
    line = sorted(plan.subtasks, key=lambda s: plan.merge_rank(s.id))
    assert [s.id for s in line] == ["long1", "m", "long2", "z", "long3", "mid"]


def _overlaps(x: str, y: str) -> bool:
    return x == y or x.startswith(y + "/") or y.startswith(x + "/")


def _reaches(plan: Plan, src: str, dst: str) -> bool:
    seen, stack = set(), [src]
    by_id = plan.by_id()
    while stack:
        v = stack.pop()
        if v == dst:
            return True
        if v not in seen:
            seen.add(v)
            stack.extend(by_id[v].depends_on)
    return False


def test_random_plans_never_run_overlapping_subtasks_together() -> None:
    rng = random.Random(7)
    paths = ["a", "a/x.py", "a/y.py", "b", "b/c", "b/c/z.py", "d.py", "e.py", "f/g.py"]
    for _ in range(40):
        n = rng.randint(2, 25)
        subs = [
            st(
                f"t{i}",
                rng.sample(paths, rng.randint(0, 2)),
                # dependencies in both directions of plan order, acyclic by a hidden rank
                [
                    f"t{j}"
                    for j in range(n)
                    if (j * 7919) % n < (i * 7919) % n and rng.random() < 0.1
                ],
            )
            for i in range(n)
        ]
        plan = validate_plan({"subtasks": subs})
        by_id = plan.by_id()
        for a in plan.subtasks:
            for b in plan.subtasks:
                if a.id < b.id and any(_overlaps(x, y) for x in a.files for y in b.files):
                    assert _reaches(plan, a.id, b.id) or _reaches(plan, b.id, a.id)
        for later, earlier in plan.added_dependencies:
            assert earlier in by_id[later].depends_on
        # schedule it with up to 3 at once; overlapping subtasks are never together
        done: set[str] = set()
        running: list[str] = []
        while len(done) < n:
            for s in plan.ready(done, set(running))[: 3 - len(running)]:
                running.append(s.id)
            assert running, "a valid plan always has something ready"
            for x in running:
                for y in running:
                    if x != y:
                        assert not any(
                            _overlaps(f, g) for f in by_id[x].files for g in by_id[y].files
                        )
            done.add(running.pop(rng.randrange(len(running))))


def test_thousand_subtasks_validate_quickly() -> None:
    n = 1000
    subs = [
        st(
            f"s{i:04d}",
            [f"pkg{i % 50}/mod{i}.py", "README.md" if i % 7 == 0 else f"pkg{i % 50}/"],
            [f"s{j:04d}" for j in (i - 1, i - 13) if j >= 0 and i % 5 == 0],
        )
        for i in range(n)
    ]
    subs += [st("glob1", ["pkg1/*.py"]), st("glob2", ["**/*.md"])]
    started = time.perf_counter()
    plan = validate_plan({"subtasks": subs})
    order = plan.ready(set())
    elapsed = time.perf_counter() - started
    assert len(plan.subtasks) == n + 2
    assert order and all(plan.chain_length(s.id) >= plan.chain_length(order[-1].id) for s in order)
    assert elapsed < 5.0  # ~0.05 s here; the bound only catches quadratic blow-ups
    assert Plan.model_validate_json(plan.to_json()) == plan


def test_to_json_round_trip_keeps_added_dependencies() -> None:
    plan = validate_plan({"subtasks": [st("a", ["x.py"]), st("b", ["x.py"])]})
    again = Plan.model_validate_json(plan.to_json())
    assert again == plan
    assert again.added_dependencies == (("b", "a"),)
    assert json.loads(plan.to_json())["subtasks"][1]["depends_on"] == ["a"]


REPLY_PLAN = '{"subtasks": [{"id": "a", "title": "A", "instructions": "do a"}]}'


@pytest.mark.parametrize(
    "reply",
    [
        REPLY_PLAN,
        f"Here is the plan:\n```json\n{REPLY_PLAN}\n```\nGood luck!",
        f"```\n{REPLY_PLAN}\n```",
        f"First run:\n```bash\npytest -q\n```\nthen\n```json\n{REPLY_PLAN}\n```",
        f"Sure. {REPLY_PLAN} That is all.",
        'Example: {"note": 1}. Plan: ' + REPLY_PLAN,
        '[{"id": "a", "title": "A", "instructions": "do a"}]',
    ],
)
def test_parse_plan_reply(reply: str) -> None:
    plan = parse_plan_reply(reply)
    assert [s.id for s in plan.subtasks] == ["a"]


def test_parse_plan_reply_errors() -> None:
    with pytest.raises(PlanError, match="no JSON plan"):
        parse_plan_reply("I could not make a plan.")
    with pytest.raises(PlanError, match=r"not valid JSON \(line 2, column 1 of the block\)"):
        parse_plan_reply('```json\n{"subtasks": [\n,]}\n```')
    with pytest.raises(PlanError) as info:
        parse_plan_reply('```json\n{"subtasks": [{"id": "a"}]}\n```')
    assert info.value.problems == [
        "subtasks[0].title must be a non-empty string (missing)",
        "subtasks[0].instructions must be a non-empty string (missing)",
    ]


def test_load_plan(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"subtasks": [st("a"), st("b", deps=["a"])]}))
    assert [s.id for s in load_plan(path).subtasks] == ["a", "b"]
    path.write_text('{\n  "subtasks": [\n    {"id": "a",}\n  ]\n}\n')
    with pytest.raises(PlanError, match=r"plan\.json: line 3, column 16: not valid JSON"):
        load_plan(path)
    with pytest.raises(PlanError, match="cannot read plan file"):
        load_plan(tmp_path / "missing.json")


def test_plan_error_with_a_summary() -> None:
    err = PlanError("no valid plan after 3 attempts", problems=["x is wrong", "y too"])
    assert str(err) == "plan: no valid plan after 3 attempts:\n- x is wrong\n- y too"
    assert err.problems == ["x is wrong", "y too"]
    assert str(PlanError(problems=["only one"], source="p.json")) == "p.json: only one"


def test_agent_places_go_to_the_longest_chains_then_plan_order() -> None:
    plan = validate_plan(
        {"subtasks": [st("head"), st("leaf1"), st("dep", deps=["head"]), st("leaf2")]}
    )
    priority = {s.id: plan.place_priority(s.id) for s in plan.subtasks}
    # a chain's head first; a dependent ready late still goes before the leaves after it
    assert sorted(priority, key=lambda x: -priority[x]) == ["head", "leaf1", "dep", "leaf2"]


def test_a_step_on_its_dependency_s_files_is_folded_into_it() -> None:
    """A small planner's "add clamp", then "test clamp" in the same files: one coder."""
    plan = fold_contained(
        validate_plan(
            {
                "subtasks": [
                    st("add", ["m.py", "tests/test_m.py"]),
                    st("test", ["tests/test_m.py"], ["add"]),
                    st("docs", ["README.md"], ["test"]),
                ]
            }
        )
    )
    assert [s.id for s in plan.subtasks] == ["add", "docs"]
    add = plan.by_id()["add"]
    assert add.instructions == "do add\n\nThen: title test. do test"
    assert add.files == ("m.py", "tests/test_m.py")
    assert plan.by_id()["docs"].depends_on == ("add",)  # it waited on the folded step
    assert plan.folded == (("test", "add"),)
    assert Plan.model_validate_json(plan.to_json()) == plan  # the journal keeps it


def test_a_chain_of_steps_on_one_file_becomes_one_subtask() -> None:
    plan = fold_contained(
        validate_plan({"subtasks": [st("a", ["m.py"]), st("b", ["m.py"]), st("c", ["m.py"])]})
    )  # the overlap serialises them: a <- b <- c
    assert [s.id for s in plan.subtasks] == ["a"]
    assert plan.folded == (("b", "a"), ("c", "a"))
    assert plan.added_dependencies == ()


def test_a_folded_subtask_is_done_in_steps_its_own_then_each_part() -> None:
    plan = fold_contained(
        validate_plan({"subtasks": [st("a", ["m.py"]), st("b", ["m.py"]), st("c", ["m.py"])]})
    )
    (whole,) = plan.subtasks
    assert fold_steps(plan, whole) == ["do a", "title b. do b", "title c. do c"]
    alone = validate_plan({"subtasks": [st("a", ["m.py"]) | {"instructions": "x\n\nThen: y"}]})
    assert fold_steps(alone, alone.subtasks[0]) == ["x\n\nThen: y"]  # nothing joined it


@pytest.mark.parametrize(
    "subtasks",
    [
        # a file of its own: the step has work the first does not
        [st("add", ["m.py"]), st("test", ["m.py", "tests/test_m.py"], ["add"])],
        # something else waits on the first too: folding would make it wait longer
        [
            st("add", ["m.py", "t.py"]),
            st("test", ["t.py"], ["add"]),
            st("use", ["app.py"], ["add"]),
        ],
        # two dependencies
        [st("a", ["m.py"]), st("b", ["n.py"]), st("c", ["m.py"], ["a", "b"])],
        # no files named
        [st("a", ["m.py"]), st("b", None, ["a"])],
    ],
)
def test_steps_that_are_not_contained_stay_apart(subtasks: list[dict[str, Any]]) -> None:
    plan = validate_plan({"subtasks": subtasks})
    assert fold_contained(plan) is plan
