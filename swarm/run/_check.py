"""Running a repository's check command (its tests) in a worktree, and judging the result.

The check must test the worktree's own code with the repository's own environment: see
`swarm.run._environment` (the worktree and its `src/` first on PYTHONPATH, the repository's
interpreter first on PATH, never swarm's).
The command runs through the tools' own runner: its own process group, killed on timeout
or cancellation, secrets scrubbed, `TRACEPARENT` set so a test run can join the trace.

The baseline: a suite already red at the start would burn every fix round and blame every
subtask. So before planning, the checks run once on the base commit (see `swarm.run._run`).
Failures it can name (pytest's `FAILED`/`ERROR` summary lines) become `KnownFailures`, and
a later check passes when it fails only on those (`baseline: record`, the default).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from swarm._routing.limits import ConcurrencyLimiter
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._toolbox import run_command
from swarm.run._environment import SIGKILLED, CheckEnvironment
from swarm.run._task import Task

__all__ = [
    "NOTHING_TO_TEST",
    "Baseline",
    "CheckFn",
    "CheckPlace",
    "CheckResult",
    "Checker",
    "KnownFailures",
    "commit_key",
    "failing_part",
    "failures_in",
    "plain",
    "rerun_command",
    "run_baseline",
    "run_check",
    "tree_key",
]


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    exit_code: int | None
    """None when the check was killed on timeout."""
    output: str
    """Combined stdout and stderr, cut in the middle when long."""
    duration_s: float
    timed_out: bool = False
    reused: bool = False
    """The result of an earlier run of the same command on the same tree."""


async def run_check(
    command: str,
    cwd: Path,
    *,
    timeout_s: float = 600.0,
    environment: CheckEnvironment | None = None,
    max_output: int = 40_000,
) -> CheckResult:
    """Run `command` in a shell in `cwd`; a span records its exit code.

    `environment` is the repository's (default: `cwd`'s own, found as for a checkout)."""
    attrs = {sc.OPERATION: sc.OP_TOOL, sc.TOOL_NAME: "run_tests", sc.CHECK_COMMAND: command}
    with tracer().start_as_current_span(f"{sc.OP_TOOL} run_tests", attributes=attrs) as span:
        environment = environment or CheckEnvironment.resolve(cwd)
        ctx = environment.context(cwd, timeout_s=timeout_s)
        result = await run_command(command, ctx, max_output_chars=max_output)
        passed = result.exit_code == 0 and not result.timed_out
        output = result.output
        if result.timed_out:
            output += f"\n[check timed out after {timeout_s:g} s]"
        span.set_attribute(sc.TOOL_EXIT_CODE, -1 if result.exit_code is None else result.exit_code)
        span.set_attribute(sc.CHECK_PASSED, passed)
        return CheckResult(passed, result.exit_code, output, result.duration_s, result.timed_out)


class CheckPlace(Protocol):
    """Where a worktree's checks run when it is not on this machine (`swarm._cluster`)."""

    def runner(self, path: Path) -> Callable[[str, float], Awaitable[CheckResult]] | None:
        """How a check runs in `path` elsewhere (command, timeout), or None: here."""
        ...

    def commit_runner(self, commit: str) -> Callable[[str, float], Awaitable[CheckResult]] | None:
        """How a check of the repository's `commit` (a clean tree: a merge batch's tip)
        runs elsewhere (command, timeout), or None: here."""
        ...


class CheckFn(Protocol):
    """Runs a check command in a worktree; `key` names its tree (`tree_key`) for reuse;
    `commit`: the worktree is that commit, clean (the merge queue's batches), so the check
    may run on a copy of it elsewhere."""

    async def __call__(
        self,
        path: Path,
        command: str,
        *,
        key: str | None = None,
        priority: bool = False,
        commit: str | None = None,
        excuse: bool = True,
    ) -> CheckResult: ...


def commit_key(commit: str) -> str:
    """A name for the tree of `commit` (a merge batch's tip, the integration head)."""
    return f"commit:{commit}"


def tree_key(base: str, patch: str) -> str:
    """A name for the tree `patch` makes of commit `base`: equal trees, equal keys."""
    return f"{base}:{hashlib.sha256(patch.encode('utf-8', 'surrogateescape')).hexdigest()}"


def _killed(result: CheckResult) -> bool:
    """Whether the check's process was killed by SIGKILL (its cluster node lost, the
    machine's OOM killer): no verdict on the tree, so not remembered for it. A subtask
    started again after its node was lost met the dying node's 137 as its tree's result,
    and its fixers could not make it pass."""
    return result.exit_code in SIGKILLED


class Checker:
    """Runs a repository's checks: its environment, a few at once, identical trees once.

    At most `max_concurrent` checks run at the same time (a suite uses the cores; two dozen
    at once on two cores are slower than eight); the time spent waiting for a place is a
    `swarm.wait check` span, and the merge queue's checks (serial, and on every subtask's
    way to done) take the next free place before the workspaces'. A result is reused for
    the same command on the same tree (`key`: the base commit and the patch), so the
    coordinator's check and the merge queue's do not run the same suite twice. Results are
    judged against the baseline's known failures once those are recorded.
    """

    def __init__(
        self,
        environment: CheckEnvironment,
        *,
        timeout_s: float = 600.0,
        max_concurrent: int | None = None,
        place: CheckPlace | None = None,
    ) -> None:
        self.environment, self.timeout_s = environment, timeout_s
        self.place = place
        """Where checks of worktrees on other machines run (their node's cores, not a
        place here); None: every check runs here."""
        self._slots = ConcurrencyLimiter(
            max_concurrent or os.cpu_count() or 2, wait_kind=sc.WAIT_CHECK
        )
        self._results: dict[tuple[str, str], CheckResult] = {}
        self.known = KnownFailures()
        """Failures the base commit already had (set by `run_baseline`)."""
        self.flaky: set[str] = set()
        """Tests seen to fail and pass on the same tree: never blamed on a change."""

    async def __call__(
        self,
        path: Path,
        command: str,
        *,
        key: str | None = None,
        priority: bool = False,
        commit: str | None = None,
        excuse: bool = True,
    ) -> CheckResult:
        """`command`'s result in `path`; `priority` (the merge queue: one at a time, and on
        every subtask's path to done) takes the next free place before the workspaces';
        `commit` (the tree is that commit, clean) lets a cluster check it on a node;
        `excuse=False` (the task's `accept`) judges it by itself, no known failure excused."""
        if not excuse:
            return await self._run(path, command, priority, commit)
        if key is not None and (hit := self._results.get((command, key))) is not None:
            if commit:
                self._results.setdefault((command, commit_key(commit)), hit)
            return replace(hit, reused=True)
        result = self.known.judge(await self._run(path, command, priority, commit))
        if not result.passed:
            result = await self._unless_flaky(path, command, result, priority, commit)
        if _killed(result):  # no verdict on the tree: checked again next time
            return result
        if key is not None:
            self._results[(command, key)] = result
        if commit:  # the same tree, once that commit lands: the final check reuses it
            self._results[(command, commit_key(commit))] = result
        return result

    async def _run(
        self, path: Path, command: str, priority: bool, commit: str | None
    ) -> CheckResult:
        elsewhere = self._elsewhere(path, commit)
        if elsewhere is not None:  # its node's reserved cores bound it, not a place here
            result = await elsewhere(command, self.timeout_s)
        else:
            async with self.slot(priority=priority):
                result = await run_check(
                    command, path, timeout_s=self.timeout_s, environment=self.environment
                )
        return result

    def result(self, command: str, key: str) -> CheckResult | None:
        """The result of `command` on the tree `key`, if it ran (or was remembered)."""
        return self._results.get((command, key))

    def remember(self, command: str, key: str, result: CheckResult) -> None:
        """`result` of `command` on the tree `key`, run by someone else (an agent's own
        `run_tests`): a later check of that tree reuses it."""
        if not _killed(result):
            self._results.setdefault((command, key), result)

    async def _unless_flaky(
        self, path: Path, command: str, result: CheckResult, priority: bool, commit: str | None
    ) -> CheckResult:
        """`result`, passed when its new failures pass on a rerun of only those tests: a
        failure that does not repeat is flaky, not the change's (it is named in the report)."""
        if result.exit_code != PYTEST_TESTS_FAILED:
            return result
        new = failures_in(result.output) - self.known.ids
        rerun = rerun_command(command, sorted(new)) if new else None
        if rerun is None:
            return result
        again = await self._run(path, rerun, priority, commit)
        still = failures_in(again.output) if again.exit_code == PYTEST_TESTS_FAILED else new
        if again.exit_code != 0 and (again.exit_code != PYTEST_TESTS_FAILED or still):
            self.flaky.update(new - still)
            return result
        self.flaky.update(new)
        note = f"\n[swarm: flaky, passed on a rerun of only them: {', '.join(sorted(new))}]"
        return replace(result, passed=True, output=result.output + note)

    def _elsewhere(
        self, path: Path, commit: str | None
    ) -> Callable[[str, float], Awaitable[CheckResult]] | None:
        if self.place is None:
            return None
        runner = self.place.runner(path)
        if runner is None and commit:
            runner = self.place.commit_runner(commit)
        return runner

    @asynccontextmanager
    async def slot(self, *, priority: bool = False) -> AsyncIterator[None]:
        """One of the places checks share (an agent's own `run_tests` takes one too); the
        time spent waiting for it is a `swarm.wait check` span."""
        await self._slots.acquire(priority=1 if priority else 0)
        try:
            yield
        finally:
            self._slots.release()


_FAILED = re.compile(
    r"^(?:FAILED|ERROR) (\S+?::[^\s\[]+(?:\[.*?\](?= - |$))?)(?: - .*)?$", re.MULTILINE
)
"""pytest's short summary line: the test id (a parametrized one may hold spaces), then
` - ` and the message, when there is one."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PYTEST_TESTS_FAILED = 1
"""pytest's exit code when tests ran and some failed; 2-4 mean it could not run them."""
NOTHING_TO_TEST = (4, 5)
"""pytest's exit codes for "no tests ran" and "file or directory not found": a check scoped
to a subtask's files (`{files}`) that have no tests of their own."""


_PYTEST = re.compile(r"(?:^|\s)(?:\S*/)?(?:pytest|py\.test)(?:\s|$)|-m\s+pytest(?:\s|$)")
_VALUE_OPTIONS = frozenset({"-k", "-m", "-p", "-c", "-o", "--rootdir", "--deselect", "--ignore"})
"""pytest options whose value is the next word (kept with it; `-k`/`-m` are dropped, since
the ids already say which tests)."""


def rerun_command(command: str, ids: Sequence[str]) -> str | None:
    """`command` running only the tests `ids`: its options kept, its paths and test
    selection replaced by the ids (each quoted whole); None when it is not a pytest run."""
    match = _PYTEST.search(command)
    if match is None or "&&" in command or ";" in command or "|" in command:
        return None
    try:
        head = shlex.split(command[: match.end()])
        rest = shlex.split(command[match.end() :])
    except ValueError:
        return None
    options: list[str] = []
    skip = False
    for i, word in enumerate(rest):
        if skip:
            skip = False
            continue
        if word in _VALUE_OPTIONS:
            skip = True
            if word not in ("-k", "-m") and i + 1 < len(rest):
                options += [word, rest[i + 1]]
        elif word.startswith("-") and not word.startswith(("-k=", "-m=")):
            options.append(word)
    return shlex.join([*head, *options, *ids])


def plain(text: str) -> str:
    """`text` without terminal colour codes (`addopts = --color=yes` is common)."""
    return _ANSI.sub("", text)


def failures_in(output: str) -> frozenset[str]:
    """The test ids a check's output names as failed (pytest's short summary lines)."""
    return frozenset(m.group(1) for m in _FAILED.finditer(plain(output)))


@dataclass(frozen=True)
class KnownFailures:
    """Test ids the base commit already failed on."""

    ids: frozenset[str] = frozenset()

    def judge(self, result: CheckResult) -> CheckResult:
        """`result`, passed when it fails only where the baseline already failed."""
        if result.passed or not self.ids or result.exit_code != PYTEST_TESTS_FAILED:
            return result
        now = failures_in(result.output)
        if now and now <= self.ids:
            note = f"\n[swarm: only failures known from the baseline: {', '.join(sorted(now))}]"
            return replace(result, passed=True, output=result.output + note)
        return result


@dataclass(frozen=True)
class Baseline:
    """The checks on the base commit: their results, the known failures, or why to stop."""

    results: dict[str, CheckResult] = field(default_factory=dict)
    known: KnownFailures = KnownFailures()
    stop: str | None = None
    """Why the run must stop before any work, or None."""
    accept: tuple[str, CheckResult] | None = None
    """The task's own `accept` and its result on the base commit (recorded only)."""
    flaky: set[str] = field(default_factory=set)
    """Tests seen to fail and pass on one tree, here or later in the run (the checker's)."""

    def summary(self) -> dict[str, str]:
        """Each command's state on the base commit, for the report (known failures named)."""
        out = {}
        if self.accept is not None:
            command, r = self.accept
            state = "passed" if r.passed else f"failed (exit {r.exit_code})"
            out[command] = f"{state} (accept: the done condition, expected red before the work)"
        for command, r in self.results.items():
            named = sorted(failures_in(r.output) & self.known.ids)
            shown = ", ".join(named[:10]) + (
                f" and {len(named) - 10} more" if len(named) > 10 else ""
            )
            out[command] = (
                "passed" if r.passed else f"failed (known failures: {shown or 'none named'})"
            )
        return out


async def run_baseline(checker: Checker, worktree: Path, task: Task) -> Baseline:
    """Run `check` (over everything) and `accept` on the base commit in `worktree`.

    `check` gates: red on the base commit, its named failures become known (excused
    later), or the run stops. `accept` decides "done" and is expected red before the work:
    its result is recorded for the report, never stops the run, never excuses a failure."""
    check = task.check_for(())
    results: dict[str, CheckResult] = {}
    if check:
        results[check] = await checker(worktree, check)
    accept = task.accept
    accepted = None
    if accept and accept != check:
        accepted = (accept, await checker(worktree, accept, excuse=False))
    red = {c: r for c, r in results.items() if not r.passed}
    if not red:
        return Baseline(results, accept=accepted, flaky=checker.flaky)
    named = {
        c: failures_in(r.output) if r.exit_code == PYTEST_TESTS_FAILED else frozenset()
        for c, r in red.items()
    }
    for c in [c for c in red if named[c]]:  # run again: what differs is flaky
        again = await checker(worktree, c)
        second = failures_in(again.output) if again.exit_code == PYTEST_TESTS_FAILED else named[c]
        checker.flaky.update(named[c] ^ second if again.exit_code in (0, 1) else ())
        named[c] = named[c] | second
    known = KnownFailures(frozenset().union(*named.values()))
    unnamed = [c for c in red if not named[c]]
    if task.baseline == "stop" or unnamed:
        command = (unnamed or list(red))[0]
        failed = red[command]
        why = (
            "`baseline: stop` is set"
            if task.baseline == "stop"
            else "swarm cannot name its failures (it needs pytest's FAILED lines and exit 1; "
            "an import or collection error means the suite cannot run here: is a file "
            "the tests need untracked? see `include:`)"
        )
        return Baseline(
            results,
            known,
            accept=accepted,
            flaky=checker.flaky,
            stop=(
                f"the check fails before any change: `{command}` exited {failed.exit_code} "
                f"on the base commit, and {why}. Fix it first, or check something that "
                f"passes today.\n{failing_part(failed.output, 2000)}"
            ),
        )
    checker.known = known
    return Baseline(results, known, accept=accepted, flaky=checker.flaky)


FIX_OUTPUT_CHARS = 12_000
"""How much of a failing check's output a fixer is shown (the failing part first)."""


def failing_part(output: str, limit: int = FIX_OUTPUT_CHARS) -> str:
    """The part of a check's output that says what failed, first; the rest, cut to fit.

    pytest puts the failures (`= FAILURES =`, `= ERRORS =`) and the short summary after a
    long progress log: that section leads, then the tail of the output."""
    output = plain(output)
    starts = [i for marker in _FAILURE_MARKERS if (i := output.find(marker)) >= 0]
    head = output[min(starts) :] if starts else ""
    if len(head) >= limit:
        return head[: limit // 2] + "\n[...]\n" + head[-limit // 2 :]
    rest = output[: min(starts)] if starts else output
    room = limit - len(head)
    tail = rest[-room:] if len(rest) > room else rest
    return (head + ("\n[earlier output]\n" + tail if head and tail.strip() else tail)).strip()


_FAILURE_MARKERS = ("= FAILURES =", "= ERRORS =", "short test summary info")
