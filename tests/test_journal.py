"""The run journal: runs, plans, subtask states, replayable calls, and surviving kill -9."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from swarm.errors import ConfigError
from swarm.messages import ChatRequest, ChatResult, Message, ToolCall, ToolSpec, Usage
from swarm.model import ChatModel, Model
from swarm.run._plan import validate_plan
from swarm.run._replay import ReplayModel, request_hash
from swarm.run._task import parse_task
from swarm.run.journal import Journal


class CountingModel(ChatModel):
    """Answers `answer <n>` and counts the calls that reached it."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    async def chat(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        await anyio.lowlevel.checkpoint()
        return ChatResult(
            message=Message.assistant(f"answer {self.calls}"),
            usage=Usage(input_tokens=100, output_tokens=5),
            provider="counting",
            cost_usd=0.01,
        )


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal.open(tmp_path / ".swarm" / "journal.db") as j:
        j.create_run("r1", task={"title": "Fix it"}, repo="/repo", config={"max_agents": 4})
        yield j


def ask(text: str, **kwargs: object) -> ChatRequest:
    return ChatRequest(messages=[Message.system("be brief"), Message.user(text)], **kwargs)


def test_runs(journal: Journal) -> None:
    task = parse_task("---\ncheck: pytest\n---\n# Second task\nbody\n")
    journal.create_run("r2", task=task, repo="/other", config={"path": Path("/x")})
    runs = journal.list_runs()
    assert [r.run_id for r in runs] == ["r1", "r2"]
    assert runs[1].task_title == "Second task"
    assert runs[0].status == "running" and runs[0].cost_usd == 0 and runs[0].branch is None
    assert journal.run_task("r2")["check"] == "pytest"
    assert journal.run_config("r2") == {"path": "/x"}
    journal.set_run_status(
        "r1", "stopped", detail="deadline", branch="swarm/r1", cost_usd=1.25, tokens=900
    )
    row = journal.get_run("r1")
    assert row is not None
    assert (row.status, row.detail, row.branch, row.cost_usd, row.tokens) == (
        "stopped",
        "deadline",
        "swarm/r1",
        1.25,
        900,
    )
    assert row.updated_at >= row.created_at
    assert journal.get_run("nope") is None


def test_run_mistakes(journal: Journal) -> None:
    with pytest.raises(ValueError, match="already in the journal"):
        journal.create_run("r1", task={}, repo="", config={})
    with pytest.raises(ValueError, match="unknown run status 'exploded'"):
        journal.set_run_status("r1", "exploded")
    with pytest.raises(TypeError, match="unknown run field 'colour'"):
        journal.set_run_status("r1", "done", colour="red")
    with pytest.raises(KeyError, match="no run 'r9'"):
        journal.set_run_status("r9", "done")
    with pytest.raises(KeyError, match="no run 'r9'"):
        journal.run_config("r9")


def test_plan_round_trip(journal: Journal) -> None:
    assert journal.load_plan("r1") is None
    plan = validate_plan(
        {
            "subtasks": [
                {"id": "a", "title": "A", "instructions": "a", "files": ["x.py"]},
                {"id": "b", "title": "B", "instructions": "b", "files": ["x.py"]},
            ]
        }
    )
    journal.save_plan("r1", plan)
    assert journal.load_plan("r1") == plan
    journal.save_plan("r1", plan)  # saving again replaces
    loaded = journal.load_plan("r1")
    assert loaded is not None and loaded.added_dependencies == (("b", "a"),)
    with pytest.raises(KeyError, match="no run 'r9'"):
        journal.save_plan("r9", plan)


def test_subtask_states(journal: Journal) -> None:
    journal.set_subtask("r1", "b", "pending")
    journal.set_subtask("r1", "a", "running", attempts=1)
    journal.set_subtask("r1", "a", "fixing", attempts=2, error="tests failed", cost_usd=0.5)
    journal.set_subtask("r1", "a", "merged", patch="diff --git", commit="abc123", error=None)
    rows = journal.subtasks("r1")
    assert list(rows) == ["b", "a"]
    a = rows["a"]
    assert (a.status, a.attempts, a.patch, a.commit, a.error, a.cost_usd) == (
        "merged",
        2,
        "diff --git",
        "abc123",
        None,
        0.5,
    )
    assert rows["b"].status == "pending" and rows["b"].attempts == 0
    assert journal.subtasks("other") == {}
    with pytest.raises(ValueError, match="unknown subtask status 'done'"):
        journal.set_subtask("r1", "a", "done")
    with pytest.raises(TypeError, match="unknown subtask field 'sha'"):
        journal.set_subtask("r1", "a", "merged", sha="x")
    with pytest.raises(KeyError, match="no run 'r9'"):
        journal.set_subtask("r9", "a", "running")


def test_record_and_find_calls(journal: Journal) -> None:
    assert journal.find_call("r1", "coder:a#0", "h1") is None
    journal.record_call("r1", "coder:a#0", "h1", '{"x": 1}')
    journal.record_call("r1", "coder:a#0", "h2", '{"x": 2}')
    assert journal.find_call("r1", "coder:a#0", "h1") == '{"x": 1}'
    assert journal.find_call("r1", "coder:a#0", "h2") == '{"x": 2}'
    assert journal.find_call("r1", "coder:a#1", "h1") is None
    assert journal.find_call("r2", "coder:a#0", "h1") is None


def test_request_hash() -> None:
    base = ask("hi", max_tokens=100)
    assert request_hash(base) == request_hash(ask("hi", max_tokens=100))
    assert len(request_hash(base)) == 64
    # labels and transport choices do not change what the model answers
    assert request_hash(base) == request_hash(ask("hi", max_tokens=100, metadata={"role": "x"}))
    assert request_hash(base) == request_hash(ask("hi", max_tokens=100, stream=False))
    constructed = ChatRequest.model_construct(
        messages=[Message.system("be brief"), Message.user("hi")], tools=[], max_tokens=100
    )
    assert request_hash(constructed) == request_hash(base)
    different = [
        ask("hello", max_tokens=100),
        ask("hi", max_tokens=101),
        ask("hi", max_tokens=100, tools=[ToolSpec(name="run")]),
        ChatRequest(
            messages=[
                *base.messages,
                Message.assistant(None, [ToolCall(id="c1", name="run", arguments="{}")]),
            ],
            max_tokens=100,
        ),
    ]
    hashes = {request_hash(r) for r in [base, *different]}
    assert len(hashes) == 5


async def test_replay_model_replays_without_calling_the_inner_model(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    questions = ["one", "two", "three"]
    inner = CountingModel()
    with Journal.open(path) as journal:
        journal.create_run("r1", task={"title": "t"}, repo="", config={})
        first = ReplayModel(inner, journal, run_id="r1", key="coder:a")
        assert isinstance(first, Model)
        answers = [(await first.chat(ask(q))).text for q in questions]
    assert answers == ["answer 1", "answer 2", "answer 3"]
    assert (inner.calls, first.recorded, first.replayed) == (3, 3, 0)

    with Journal.open(path) as journal:  # a resumed run, after a restart
        again = ReplayModel(inner, journal, run_id="r1", key="coder:a")
        results = [await again.chat(ask(q)) for q in questions]
        assert [r.text for r in results] == answers
        assert all(r.extras["swarm.replayed"] for r in results)
        assert results[0].cost_usd == 0.01 and results[0].usage.output_tokens == 5
        assert (inner.calls, again.recorded, again.replayed) == (3, 0, 3)
        assert again.name == "counting"

        # the conversation diverges at the second call: from there, the model is asked
        diverged = ReplayModel(inner, journal, run_id="r1", key="coder:a")
        assert (await diverged.chat(ask("one"))).text == "answer 1"
        assert (await diverged.chat(ask("TWO?"))).text == "answer 4"
        assert (diverged.replayed, diverged.recorded, inner.calls) == (1, 1, 4)

        # another agent's key, or another run, never sees these answers
        other = ReplayModel(inner, journal, run_id="r1", key="coder:b")
        assert (await other.chat(ask("one"))).text == "answer 5"


async def test_replay_models_in_a_task_group(journal: Journal) -> None:
    inner = CountingModel()
    models = [ReplayModel(inner, journal, run_id="r1", key=f"coder:{i}") for i in range(20)]

    async def agent(model: ReplayModel) -> None:
        for step in range(5):
            await model.chat(ask(f"{model.key} step {step}"))

    async with anyio.create_task_group() as tg:
        for m in models:
            tg.start_soon(agent, m)
    assert inner.calls == 100
    replays = [ReplayModel(inner, journal, run_id="r1", key=f"coder:{i}") for i in range(20)]
    async with anyio.create_task_group() as tg:
        for m in replays:
            tg.start_soon(agent, m)
    assert inner.calls == 100
    assert sum(m.replayed for m in replays) == 100


def test_writes_from_threads(journal: Journal) -> None:
    def write(n: int) -> None:
        for i in range(100):
            journal.record_call("r1", f"t{n}#{i}", "h", "{}")
            journal.set_subtask("r1", f"t{n}", "running", attempts=i)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(journal.find_call("r1", f"t{n}#99", "h") == "{}" for n in range(4))
    assert {row.attempts for row in journal.subtasks("r1").values()} == {99}


def test_file_setup(tmp_path: Path) -> None:
    path = tmp_path / "repo" / ".swarm" / "journal.db"
    with Journal.open(path):
        pass
    assert (path.parent / ".gitignore").read_text() == "*\n"
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    finally:
        conn.close()
    with Journal.open(path) as journal:  # reopening an existing journal is fine
        assert journal.list_runs() == []


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(ConfigError, match="schema version 99 is newer"):
        Journal.open(path)


def test_not_a_journal(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("these are not the tables you are looking for\n" * 100)
    with pytest.raises(ConfigError, match="not a swarm journal"):
        Journal.open(text)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigError, match="not a swarm journal"):
        Journal.open(other)
    with pytest.raises(ConfigError, match="cannot create the journal"):
        Journal.open(text / "journal.db")  # its "directory" is a file


WRITER = textwrap.dedent(
    """
    import json
    import sys
    from pathlib import Path
    from swarm.run.journal import Journal
    from swarm.run._plan import validate_plan

    j = Journal.open(Path(sys.argv[1]))
    j.create_run("crash", task={"title": "t"}, repo="/r", config={})
    plan = validate_plan({"subtasks": [{"id": "a", "title": "A", "instructions": "a"}]})
    j.save_plan("crash", plan)
    j.set_subtask("crash", "a", "merged", commit="c0ffee")
    i = 0
    while True:  # write until killed, reporting each committed write
        j.record_call("crash", f"coder:a#{i}", "h", json.dumps({"n": i}))
        print(i, flush=True)
        i += 1
    """
)


def test_everything_committed_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        acknowledged = [int(proc.stdout.readline()) for _ in range(200)]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    with Journal.open(path) as journal:
        run = journal.get_run("crash")
        assert run is not None and run.status == "running"
        plan = journal.load_plan("crash")
        assert plan is not None and [s.id for s in plan.subtasks] == ["a"]
        assert journal.subtasks("crash")["a"].commit == "c0ffee"
        for i in acknowledged:
            assert journal.find_call("crash", f"coder:a#{i}", "h") == json.dumps({"n": i})
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def test_a_workspace_starts_where_it_first_did(journal: Journal) -> None:
    assert journal.base_of("r1", "a", "head1") == "head1"
    assert journal.base_of("r1", "a", "head2") == "head1"  # resumed: the recorded base
    assert journal.base_of("r1", "a-rebase1", "head2") == "head2"


def test_a_version_1_journal_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as journal:
        journal.create_run("r1", task={"title": "t"}, repo="", config={})
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE bases")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with Journal.open(path) as journal:
        assert journal.base_of("r1", "a", "h") == "h"
        assert journal.get_run("r1") is not None
