"""A subtask failed by its provider calls (not by red checks) is tried again later in the
same run, a bounded number of times."""

from __future__ import annotations

from pathlib import Path

from swarm.errors import ProviderError
from swarm.messages import ChatRequest
from swarm.run._solve import SolveRequest, solve
from swarm.testing import FunctionModel, Scripted, ScriptedSource
from tests.test_solve import done, edit, repo, request, subtask, write_plan

__all__ = ["repo"]  # the fixture, used by name


def quick(tmp_path: Path, repo: Path, plan: Path) -> SolveRequest:
    """A run waits 5 s before a subtask's first retry, 10 s before its second: here a
    twentieth of a second each (`[routing] subtask_retry_after_s`)."""
    config = tmp_path / "swarm.toml"
    config.write_text("[routing]\nsubtask_retry_after_s = 0.05\n")
    return request(tmp_path, repo, plan, config_path=str(config))


def flaky_coder(failures: int) -> FunctionModel:
    """A coder whose provider fails its first `failures` calls (after every retry the
    router made), then edits a.py and finishes."""
    script = [edit("a.py", "def one():", "def one() -> int:"), done()]
    calls: list[int] = []

    def answer(request: ChatRequest) -> Scripted:
        calls.append(1)
        if len(calls) <= failures:
            raise ProviderError("server error (500)", provider="p", status=500, retryable=True)
        return script[len(calls) - failures - 1]

    return FunctionModel(answer, name="coder:s1")


async def test_a_subtask_failed_by_its_provider_is_retried_in_the_run(
    tmp_path: Path, repo: Path
) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    coder = flaky_coder(failures=1)
    scripts = ScriptedSource(
        {"coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()]},
        default=coder,
    )
    report = await solve(quick(tmp_path, repo, plan), source=scripts)
    assert {s.id: s.status for s in report.subtasks} == {"s1": "merged", "s2": "merged"}
    assert report.status == "done"
    assert len(coder.requests) == 3  # the failed call, then the retried subtask's two


async def test_retries_are_bounded(tmp_path: Path, repo: Path) -> None:
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    coder = flaky_coder(failures=100)
    scripts = ScriptedSource(
        {"coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()]},
        default=coder,
    )
    report = await solve(quick(tmp_path, repo, plan), source=scripts)
    status = {s.id: s.status for s in report.subtasks}
    assert status == {"s1": "failed", "s2": "merged"}
    assert len(coder.requests) == 3  # the first try and two retries (RunOptions.subtask_retries)
