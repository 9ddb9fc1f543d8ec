"""The merge queue's breakdown (`swarm._analysis.merges`), on the trace of a real `solve()`
on a real git repository whose merge queue batches patches, finds a culprit by splitting
and speculates; and on a hand-built trace whose figures are known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from swarm._analysis import load_trace, summarize
from swarm._analysis.known import SpanSpec, write_spans
from swarm._analysis.merges import merge_batches, merge_breakdown
from swarm._tracing import semconv as sc
from swarm.cli import main
from swarm.messages import ChatRequest
from swarm.model import Model
from swarm.run._report import RunReport
from swarm.run._solve import SolveRequest, solve
from swarm.testing import FunctionModel, Scripted, call

N = 6
VALUES = [2, 2, 2, 2, 2, 3]
"""What each subtask sets its module's X to: 13 together (red), less in any smaller set."""
CHECK_PY = """\
import importlib, os, pathlib, sys, time
sys.path.insert(0, os.getcwd())
here = os.path.basename(os.getcwd())
gate = pathlib.Path(sys.argv[1])
total = sum(importlib.import_module(f"m{i}").X for i in range(6))
if here.startswith("_check-"):
    # the queue's first check waits until the last subtask's own check is done: by then
    # the other patches wait too, so the queue batches them (as it would a backlog)
    try:
        (gate / "first").mkdir()
        deadline = time.monotonic() + 30
        while not (gate / "done-s5").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
    except FileExistsError:
        pass
    time.sleep(0.3)  # the merge queue's checks take a while
# a subtask's own check names its files (m<i>.py): its worktree's name says nothing
for name in [f"s{a[1:-3]}" for a in sys.argv[2:]] or [here]:
    (gate / f"done-{name}").touch()
assert total != 13, f"unlucky total: {total}"
"""


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(
        command, cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


class Culprits:
    """Coders set their module's X, the last one (s5) once the others' checks are done;
    the rebase fixer moves the culprit's X to 4."""

    def __init__(self, gate: Path) -> None:
        self.gate = gate
        self.fixers: list[str] = []
        self.final_told = ""
        """What the final check's fixer was told (why the final check was red)."""

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        if role == "fixer":
            self.fixers.append(agent_id)
        return FunctionModel(self._play, name=agent_id)

    async def _play(self, request: ChatRequest) -> Scripted:
        if request.metadata.get("subtask") == "final":  # a red final check: the report says why
            self.final_told = self.final_told or str(request.messages[-1].content)
            return call("finish", summary="not mine to fix")
        k = int(str(request.metadata.get("subtask", "s0"))[1:])
        fixer = str(request.metadata.get("agent", "")).startswith("fixer")
        if not any(m.role == "tool" for m in request.messages):
            old, new = (VALUES[k], 4) if fixer else (0, VALUES[k])
            return call("edit_file", path=f"m{k}.py", old=f"X = {old}", new=f"X = {new}")
        if k == N - 1 and not fixer:
            for _ in range(3000):  # the others' checks write these (other processes)
                if all((self.gate / f"done-s{i}").exists() for i in range(N - 1)):
                    break
                await anyio.sleep(0.01)
        return call("finish", summary="set")


def _setup(root: Path) -> SolveRequest:
    repo, gate = root / "repo", root / "gate"
    repo.mkdir()
    gate.mkdir()
    for i in range(N):
        (repo / f"m{i}.py").write_text("X = 0\n")
    (repo / "check.py").write_text(CHECK_PY)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    (root / "task.md").write_text(
        f"---\ncheck: python check.py {gate} {{files}}\n"
        f"python: {sys.executable}\nmerge: {{max_parallel_checks: 2, check_slots: 4}}\n---\n"
        "# Set\n\nSet every X.\n"
    )
    subtasks = [
        {"id": f"s{i}", "title": f"set {i}", "instructions": "set X", "files": [f"m{i}.py"]}
        for i in range(N)
    ]
    (root / "plan.json").write_text(json.dumps({"subtasks": subtasks}))
    # the gate is outside the worktree: writable in the sandbox because the config says so
    (root / "swarm.toml").write_text(f'[sandbox]\nwritable = ["{gate}"]\n')
    return SolveRequest(
        task_path=str(root / "task.md"),
        repo=str(repo),
        config_path=str(root / "swarm.toml"),
        plan_path=str(root / "plan.json"),
        state_dir=str(root / "state"),
        traces_dir=str(root / "traces"),
        quiet=True,
        max_agents=N,
    )


def run_with_a_culprit(root: Path) -> tuple[RunReport, Culprits]:
    """A real run whose merge queue batches four patches, one a culprit (see `Culprits`)."""
    source = Culprits(root / "gate")

    async def go() -> RunReport:
        return await solve(_setup(root), source=source)

    return anyio.run(go), source


@pytest.fixture(scope="module")
def merged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunReport, Culprits]:
    return run_with_a_culprit(tmp_path_factory.mktemp("merges"))


def test_the_breakdown_adds_up_and_matches_the_report(
    merged_run: tuple[RunReport, Culprits],
) -> None:
    report, source = merged_run
    assert report.status == "done", report
    assert report.trace is not None
    m = merge_breakdown(load_trace(report.trace))
    assert m is not None
    stats = report.merge
    assert stats is not None
    assert m.checking_s + m.slot_wait_s + m.git_s == pytest.approx(m.busy_s)
    assert 0 < m.checking_s < m.busy_s
    # the gate makes a batch of the waiting patches; the culprit makes one red
    assert m.by_outcome["red"] >= 1 and m.by_outcome["green"] >= 1
    assert sum(m.by_outcome.values()) == m.batches
    assert (m.batches, m.splits) == (stats.batches, stats.splits)
    assert m.rebuilt <= stats.rebuilds  # a batch dropped before it was built has no span
    assert m.size_max >= 2  # (splits: see tests/test_merge_queue.py)
    assert m.checks == stats.checks_run  # a reused result runs nothing: no span, not counted
    # the spans also hold each check's set-up (environment, launch line), which the report's
    # durations leave out: a few ms a check, 80 ms over 8 checks once under load
    assert m.check_sum_s == pytest.approx(stats.check_s, abs=0.05 * max(1, m.checks))
    assert m.waits == N + 1 and m.wait_s > 0  # the culprit waited twice
    assert len(source.fixers) == 1, source.final_told  # one culprit, one rebase


def test_the_culprits_wait_links_to_its_red_batch(merged_run: tuple[RunReport, Culprits]) -> None:
    report, source = merged_run
    assert report.trace is not None
    trace = load_trace(report.trace)
    batches = {b.index: b for b in merge_batches(trace)}
    culprit = source.fixers[0].split(":")[1]
    decided_by = [
        batches[t]
        for i in range(len(trace))
        if trace.wait_kind[i] == sc.WAIT_MERGE and trace.attributes(i).get(sc.SUBTASK_ID) == culprit
        for t in trace.links.get(i, ())
        if t in batches
    ]
    assert decided_by, "the culprit's merge waits link to no batch"
    first = decided_by[0]
    assert first.outcome == "red" and culprit in first.subtasks
    assert decided_by[-1].outcome == "green"  # after its rebase it landed


def test_trace_summary_prints_the_merge_queue(
    merged_run: tuple[RunReport, Culprits], capsys: pytest.CaptureFixture[str]
) -> None:
    report, _ = merged_run
    assert report.trace is not None
    assert main(["trace", "summary", report.trace]) == 0
    out = capsys.readouterr().out
    assert "merge queue:" in out and "waiting for a check slot" in out
    assert main(["trace", "summary", report.trace, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["merge_queue"]
    assert data["batches"] >= 1 and data["busy_s"] >= data["checking_s"] > 0
    assert summarize(load_trace(report.trace))["merge_queue"] == data


def write_merge_trace(path: Path) -> None:
    """Two overlapping batches (the second speculative, then cancelled) and a split."""
    batch = f"{sc.MERGE_SPAN} batch"
    check = f"{sc.OP_TOOL} run_tests"
    slot = f"{sc.WAIT_SPAN} check"
    tool = {sc.OPERATION: sc.OP_TOOL, sc.TOOL_NAME: "run_tests"}
    specs = [
        SpanSpec("invoke_workflow swarm", 0, 20, attrs={sc.OPERATION: sc.OP_WORKFLOW}),
        SpanSpec(batch, 1, 5, 0, {**_batch(3, 0, "red"), sc.MERGE_SUBTASKS: ["a", "b", "c"]}),
        SpanSpec(check, 2, 5, 1, tool),  # 1 s git, 3 s checking
        SpanSpec(batch, 3, 5, 0, _batch(2, 1, "cancelled")),
        SpanSpec(slot, 3, 4.5, 3, {sc.WAIT_KIND: sc.WAIT_CHECK}),  # under a check: checking
        SpanSpec(
            f"{sc.MERGE_SPAN} split", 6, 9, 0, {sc.MERGE_SPLIT_DEPTH: 1, sc.MERGE_BATCH_SIZE: 3}
        ),
        SpanSpec(slot, 6, 7, 5, {sc.WAIT_KIND: sc.WAIT_CHECK}),  # 1 s waiting for a slot
        SpanSpec(check, 7, 8.5, 5, tool),  # 1.5 s checking, 0.5 s git
        SpanSpec(f"{sc.WAIT_SPAN} merge", 0.5, 10, 0, {sc.WAIT_KIND: sc.WAIT_MERGE}),
    ]
    write_spans(path, specs)


def test_known_figures_on_a_hand_built_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_merge_trace(path)
    m = merge_breakdown(load_trace(path, cache=False))
    assert m is not None
    assert (m.batches, m.speculative, m.rebuilt, m.splits, m.checks) == (2, 1, 1, 1, 2)
    assert m.by_outcome == {"green": 0, "red": 1, "cancelled": 1}
    assert (m.size_mean, m.size_max) == (2.5, 3)
    assert m.busy_s == pytest.approx(7.0)
    assert m.checking_s == pytest.approx(4.5)
    assert m.slot_wait_s == pytest.approx(1.0)
    assert m.git_s == pytest.approx(1.5)
    assert m.waits == 1 and m.wait_s == pytest.approx(9.5)
    assert [b.label for b in merge_batches(load_trace(path))] == [
        "batch of 3 · red",
        "batch of 2 · cancelled · ahead 1",
    ]


def test_a_trace_without_merges_has_no_breakdown(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_spans(path, [SpanSpec("invoke_workflow swarm", 0, 1, attrs={sc.OPERATION: "x"})])
    trace = load_trace(path, cache=False)
    assert merge_breakdown(trace) is None
    assert summarize(trace)["merge_queue"] is None


def _batch(size: int, depth: int, outcome: str) -> dict[str, object]:
    return {
        sc.MERGE_BATCH_SIZE: size,
        sc.MERGE_SPECULATIVE_DEPTH: depth,
        sc.MERGE_OUTCOME: outcome,
    }
