"""`benchmarks.bench_solve_real`'s own parts: the work split into balanced subtasks, and
the scripted policy its simulator server plays (the benchmark itself needs the package
index and minutes: it is run by hand, not here)."""

from __future__ import annotations

import json

from benchmarks.bench_solve_real import Bench, Policy, bound, groups
from swarm.messages import ChatRequest, Message
from swarm.run._roles import CODER, FIXER


def test_files_are_split_into_balanced_groups_each_file_once() -> None:
    changes = {"big.py": "x" * 900, "mid.py": "x" * 500, "a.py": "x" * 300, "b.py": "x" * 200}
    parts = groups(changes, 2)
    assert sorted(f for part in parts for f in part) == sorted(changes)
    assert sorted(sum(len(changes[f]) for f in part) for part in parts) == [900, 1000]
    assert len(groups(changes, 8)) == 4  # never an empty subtask


def test_a_coder_writes_its_files_once_and_everyone_else_finishes() -> None:
    policy = Policy({"pkg/a.py": "A = 1  # noqa: E501\n"})
    prompt = Message.user(
        "Overall task: t\n\nYour subtask: ruff-clean pkg/a.py\n\nr\n\nFiles in scope: pkg/a.py"
    )
    first = policy(ChatRequest(messages=[Message.system(CODER), prompt]))
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("write_file", {"path": "pkg/a.py", "content": "A = 1  # noqa: E501\n"})
    ]
    wrote = Message.assistant(None, list(first.tool_calls))
    again = policy(ChatRequest(messages=[Message.system(CODER), prompt, wrote]))
    fixer = policy(ChatRequest(messages=[Message.system(FIXER), prompt]))
    assert [c.name for c in [*again.tool_calls, *fixer.tool_calls]] == ["finish", "finish"]


def test_the_bound_holds_the_critical_paths_share_of_the_model_time() -> None:
    run = {"subtasks": 24, "agents": 8, "model_s": 48.0, "wall_s": 60.0}
    figures = bound(run, check_s=4.0, final_s=5.0, cores=2)
    assert figures["model_path_s"] == 6.0  # 3 waves of 8, 2 s each
    assert figures["tree_checks_s"] == 48.0  # 24 checks of 4 s on 2 cores
    assert (figures["bound_s"], figures["wall_over_bound"]) == (59.0, 1.02)
    assert Bench().subtasks == 24
