"""The merge queue on a real git repository: batches, splits, speculation, conflicts,
timeouts, and the same final tree as merging one patch at a time."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._tracing import semconv as sc
from swarm.config import BatchSize, MergeConfig
from swarm.run._check import Checker, CheckResult
from swarm.run._environment import CheckEnvironment
from swarm.run._merge import MergeQueue, MergeResult, MergeStats, QueueSettings
from swarm.run._merge._trees import Patch
from swarm.run._workspace import worktree_diff

CHECK = f"{sys.executable} check.py"
MODULES = "abcdefgh"
CHECK_PY = """\
import importlib, time
values = {m: importlib.import_module(m).X for m in "abcdefgh"}
if 99 in values.values():
    time.sleep(60)  # a patch that makes the suite hang
unlucky = [m for m, v in values.items() if v == 13]
assert not unlucky, f"unlucky modules: {unlucky}"
"""
BATCHES = MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=2)
ONE_AT_A_TIME = MergeConfig(batch_size=BatchSize(min=1, max=1), max_parallel_checks=1)


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(
        command, cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def make_repo(repo: Path) -> Path:
    """A repository of modules `a`..`h` (`X = 1` each) and `check.py`, committed."""
    repo.mkdir(parents=True)
    for name in MODULES:
        (repo / f"{name}.py").write_text("X = 1\n")
    (repo / "check.py").write_text(CHECK_PY)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    return repo


async def patch_setting(repo: Path, name: str, value: int) -> str:
    """The patch that sets `name.X = value` on the base, made as a workspace makes one."""
    (repo / f"{name}.py").write_text(f"X = {value}\n")
    try:
        return await worktree_diff(repo, "HEAD", untracked=())
    finally:
        git(repo, "checkout", "--", f"{name}.py")


class CountingChecker:
    """The real `Checker`, at the seam the queue calls, noting where each check ran."""

    def __init__(self, repo: Path, timeout_s: float = 30.0) -> None:
        env = CheckEnvironment.resolve(repo, python=sys.executable)
        self.checker = Checker(env, timeout_s=timeout_s, max_concurrent=4)
        self.places: list[str] = []

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
        result = await self.checker(path, command, key=key, priority=priority, commit=commit)
        if not result.reused:
            self.places.append(path.name)
        return result


@dataclass
class Merged:
    results: dict[str, MergeResult]
    stats: MergeStats
    subjects: list[str]
    tree: str
    checks: list[str]

    def kinds(self) -> dict[str, str]:
        return {name: r.kind for name, r in self.results.items()}


async def merge_all(
    repo: Path,
    values: dict[str, int],
    config: MergeConfig = BATCHES,
    *,
    timeout_s: float = 30.0,
    patches: dict[str, str] | None = None,
) -> Merged:
    """Every patch arrives at once (as a wave of agents finishing), in plan order."""
    patches = patches or {n: await patch_setting(repo, n[0], v) for n, v in values.items()}
    checker = CountingChecker(repo, timeout_s)
    settings = QueueSettings(checker, batch_check=CHECK, config=config)
    results: dict[str, MergeResult] = {}
    async with MergeQueue.open(repo, run_id="r1", base="main", settings=settings) as queue:

        async def merge(order: int, name: str) -> None:
            results[name] = await queue.merge(
                name, f"set {name}", patches[name], check=CHECK, order=order
            )

        async with anyio.create_task_group() as tg:
            for order, name in enumerate(patches):
                tg.start_soon(merge, order, name)
        stats = queue.stats
    subjects = git(repo, "log", "--format=%s", "--reverse", "main..swarm/r1").splitlines()
    tree = git(repo, "rev-parse", "swarm/r1^{tree}")
    return Merged(results, stats, subjects, tree, checker.places)


async def merge_waves(
    repo: Path, patches: dict[str, str], waves: tuple[str, ...], config: MergeConfig
) -> tuple[dict[str, MergeResult], MergeStats]:
    """Each wave's patches (named by one letter each) arrive at once, once the wave
    before is decided; ranked in alphabetical order."""
    settings = QueueSettings(CountingChecker(repo), batch_check=CHECK, config=config)
    results: dict[str, MergeResult] = {}
    async with MergeQueue.open(repo, run_id="r1", base="main", settings=settings) as queue:

        async def merge(name: str) -> None:
            order = MODULES.index(name)
            results[name] = await queue.merge(name, name, patches[name], check=CHECK, order=order)

        for wave in waves:
            async with anyio.create_task_group() as tg:
                for name in wave:
                    tg.start_soon(merge, name)
        return results, queue.stats


def assert_clean(repo: Path) -> None:
    """No worktree of the queue's left behind, and no lock."""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    assert not list(common.rglob("*.lock"))


async def test_waiting_patches_land_as_one_batch_one_check_one_commit_each(repo: Path) -> None:
    one_batch = MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=1)
    merged = await merge_all(repo, dict.fromkeys("abcde", 2), one_batch)
    assert merged.kinds() == dict.fromkeys("abcde", "merged")
    assert merged.subjects == [f"swarm: {m}: set {m}" for m in "abcde"]  # attribution kept
    assert merged.checks == ["_check-0"]
    assert (merged.stats.batches, merged.stats.checks_run, merged.stats.merged) == (1, 1, 5)
    commits = {r.commit for r in merged.results.values()}
    assert len(commits) == 5
    assert_clean(repo)


async def test_a_red_batch_is_split_and_its_culprit_found(repo: Path) -> None:
    one_batch = MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=2)
    values = dict.fromkeys(MODULES, 2) | {"f": 13}
    merged = await merge_all(repo, values, one_batch)
    assert merged.kinds() == {m: "red" if m == "f" else "merged" for m in MODULES}
    assert "unlucky modules: ['f']" in merged.results["f"].output
    # the patches behind the red part go back at once: they may land before those in it
    assert sorted(merged.subjects) == [f"swarm: {m}: set {m}" for m in MODULES if m != "f"]
    assert merged.stats.splits >= 1
    assert merged.stats.checks_run < len(MODULES)  # one at a time checks each patch
    assert_clean(repo)


async def test_two_culprits_in_one_batch_are_both_found(repo: Path) -> None:
    values = dict.fromkeys(MODULES, 2) | {"b": 13, "g": 13}
    merged = await merge_all(repo, values)
    assert merged.kinds() == {m: "red" if m in "bg" else "merged" for m in MODULES}
    assert "['b']" in merged.results["b"].output and "['g']" in merged.results["g"].output
    assert len(merged.subjects) == len(MODULES) - 2


async def test_the_patches_behind_a_red_part_land_while_the_split_goes_on(repo: Path) -> None:
    """[a..h] is red (`b`). The first round finds [a b c d] red and hands [e f g h] back
    at once; they land while the next round checks [a b] slowly."""
    slow = "if values['b'] == 13 and values['c'] == 1:\n    time.sleep(3)\n"
    (repo / "check.py").write_text(CHECK_PY.replace("unlucky = ", slow + "unlucky = "))
    git(repo, "commit", "-qam", "a slow prefix")
    one_batch = MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=1)
    values = dict.fromkeys(MODULES, 2) | {"b": 13}
    merged = await merge_all(repo, values, one_batch)
    assert merged.kinds() == {m: "red" if m == "b" else "merged" for m in MODULES}
    order = [s.split(":")[1].strip() for s in merged.subjects]
    assert order[:4] == ["e", "f", "g", "h"] and sorted(order[4:]) == ["a", "c", "d"]
    assert merged.stats.batches > 1  # handed back, batched again
    assert_clean(repo)


async def test_a_conflict_inside_a_batch_goes_back_alone(repo: Path) -> None:
    patches = {
        "a1": await patch_setting(repo, "a", 2),
        "b": await patch_setting(repo, "b", 2),
        "a2": await patch_setting(repo, "a", 3),  # the same line as a1, from the same base
        "c": await patch_setting(repo, "c", 2),
    }
    merged = await merge_all(repo, {}, patches=patches)
    assert merged.kinds() == {"a1": "merged", "b": "merged", "a2": "conflict", "c": "merged"}
    assert "a.py" in merged.results["a2"].output
    assert git(repo, "show", "swarm/r1:a.py") == "X = 2"


async def test_a_speculative_batch_is_rebuilt_when_the_one_ahead_turns_red(
    repo: Path, spans: InMemorySpanExporter
) -> None:
    values = {"a": 13, "b": 2, "c": 2, "d": 2}  # two batches: [a b] on the head, [c d] on it
    merged = await merge_all(repo, values)
    assert merged.kinds() == {"a": "red", "b": "merged", "c": "merged", "d": "merged"}
    assert merged.stats.rebuilds == 1
    batches = [s for s in spans.get_finished_spans() if s.name == f"{sc.MERGE_SPAN} batch"]
    attrs = [dict(s.attributes or {}) for s in batches]
    speculative = [a for a in attrs if a[sc.MERGE_SPECULATIVE_DEPTH] == 1]
    # [c d] on [a b] is cancelled when [a b] turns red first; its own check (as red: it
    # holds `a`) may end first on a loaded machine, as in one CI run: rebuilt either way
    assert speculative and speculative[0][sc.MERGE_OUTCOME] in ("cancelled", "red")
    assert {a[sc.MERGE_OUTCOME] for a in attrs} >= {"red", "green"}
    assert [s for s in spans.get_finished_spans() if s.name == f"{sc.MERGE_SPAN} split"]
    assert_clean(repo)


ALWAYS_ALTERNATES = {"alternate_odds": 0.0, "alternates_before_red": True, "probes": 0}
"""Alternates however likely green, as if reds had shown before; every batch in the line,
none probed."""


async def test_the_batch_behind_a_red_one_goes_on_with_its_alternate(
    repo: Path, spans: InMemorySpanExporter
) -> None:
    """[a b c d] is red (`c`); [e f g h] behind it was also built without it, on the head,
    in case: that build lands, nothing is checked again, and the tree is the one merging
    one at a time gives."""
    values = dict.fromkeys(MODULES, 2) | {"c": 13}
    merged = await merge_all(repo, values, BATCHES.model_copy(update=ALWAYS_ALTERNATES))
    assert merged.kinds() == {m: "red" if m == "c" else "merged" for m in MODULES}
    assert (merged.stats.rebuilds, merged.stats.alternates) == (0, 1)
    batches = [s for s in spans.get_finished_spans() if s.name == f"{sc.MERGE_SPAN} batch"]
    attrs = [dict(s.attributes or {}) for s in batches]
    green = [a for a in attrs if a.get(sc.MERGE_ALTERNATE) and a[sc.MERGE_OUTCOME] == "green"]
    # the one that landed; under load the split of [a b c d] may also have built `d` alone
    # as an alternate by the time it was judged (a build checked, not landed: stats say 1)
    assert tuple("efgh") in [a[sc.MERGE_SUBTASKS] for a in green]
    alone = make_repo(repo.parent / "alone")
    one = await merge_all(alone, values, ONE_AT_A_TIME)
    assert merged.tree == one.tree
    assert_clean(repo)


async def test_the_batch_behind_two_red_ones_goes_on_with_the_build_that_left_both_out(
    repo: Path, spans: InMemorySpanExporter
) -> None:
    """Three batches, [a b c] red (`b`) and [d e f] red (`e`): [g h] was also built
    leaving out both, on the head. It lands with nothing checked again, as the builds
    leaving out only one of them would not have; the tree is the one-at-a-time one. The
    check takes a while, so every batch is in the line before the first is judged."""
    alone = make_repo(repo.parent / "alone")
    for r in (repo, alone):
        (r / "check.py").write_text(CHECK_PY.replace("unlucky = ", "time.sleep(0.3)\nunlucky = "))
        git(r, "commit", "-qam", "a check that takes a while")

    values = dict.fromkeys(MODULES, 2) | {"b": 13, "e": 13}
    three = MergeConfig(
        batch_size=BatchSize(min=1, max=32), max_parallel_checks=3, **ALWAYS_ALTERNATES
    )
    merged = await merge_all(repo, values, three)
    assert merged.kinds() == {m: "red" if m in "be" else "merged" for m in MODULES}
    assert merged.stats.rebuilds == 0
    batches = [s for s in spans.get_finished_spans() if s.name == f"{sc.MERGE_SPAN} batch"]
    attrs = [dict(s.attributes or {}) for s in batches]
    used = [a for a in attrs if a.get(sc.MERGE_ALTERNATE) and a[sc.MERGE_OUTCOME] == "green"]
    # on the head, both batches ahead left out; the split of [d e f] may also have built
    # `f` alone as an alternate by the time it was judged (it failed so once, quiet or not)
    built = [(a[sc.MERGE_SUBTASKS], a[sc.MERGE_SPECULATIVE_DEPTH]) for a in used]
    assert (tuple("gh"), 0) in built
    # the three checks run side by side, so [d e f] may be judged before [a b c]
    reds = [b for b, a in zip(batches, attrs, strict=True) if a[sc.MERGE_OUTCOME] == "red"]
    assert {dict(b.attributes or {})[sc.MERGE_SUBTASKS] for b in reds} >= {tuple("abc")}
    # (that it was built before either red was known is a matter of timing: under load a
    # red came back before the alternate's build started, once in 8 runs)
    one = await merge_all(alone, values, ONE_AT_A_TIME)
    assert merged.tree == one.tree
    assert_clean(repo)


async def test_the_likeliest_alternates_come_first_a_batch_shown_red_above_all() -> None:
    from swarm.run._merge._line import Line, RedRate, Request, Slot

    rate = RedRate(judged=64, culprits=4)
    line = Line(alternates=2)
    line.slots = [Slot([Request(Patch(f"s{k}", "t", ""), None, (0, k))]) for k in range(4)]
    first = line.start(rate)
    assert [b.alternate for b in first] == [False] * 4
    assert line.start(rate) == []  # a lone patch is rarely red: no alternate is worth it
    shown = line.slots[1].main
    assert shown is not None
    shown.result = CheckResult(passed=False, exit_code=1, output="red", duration_s=1.0)
    shown.finished.set()
    later = line.start(rate)
    left_out = [k for b in later for k, s in enumerate(line.slots) if s in _left_out(b)]
    assert [b.slot for b in later] == line.slots[2:] and left_out == [1, 1]


def _left_out(build: Any) -> frozenset[Any]:
    return next(key for key, b in build.slot.builds.items() if b is build)


async def test_a_check_that_times_out_is_red_and_the_others_land(repo: Path) -> None:
    values = {"a": 2, "b": 99, "c": 2}
    merged = await merge_all(repo, values, timeout_s=2.0)
    assert merged.kinds() == {"a": "merged", "b": "red", "c": "merged"}
    assert "timed out" in merged.results["b"].output
    assert_clean(repo)


async def test_batches_give_the_tree_one_at_a_time_merging_gives(
    repo: Path, tmp_path: Path
) -> None:
    other = tmp_path / "copy"
    shutil.copytree(repo, other)
    patches = {
        "a": await patch_setting(repo, "a", 2),
        "b": await patch_setting(repo, "b", 13),
        "c1": await patch_setting(repo, "c", 2),
        "c2": await patch_setting(repo, "c", 3),
        "d": await patch_setting(repo, "d", 2),
        "e": await patch_setting(repo, "e", 13),
        "f": await patch_setting(repo, "f", 2),
    }
    batched = await merge_all(repo, {}, BATCHES, patches=patches)
    serial = await merge_all(other, {}, ONE_AT_A_TIME, patches=patches)
    assert batched.kinds() == serial.kinds()
    assert batched.kinds()["b"] == "red" and batched.kinds()["c2"] == "conflict"
    assert batched.tree == serial.tree
    # patches on other files may land while a red batch is split beside the line
    assert sorted(batched.subjects) == sorted(serial.subjects)
    assert serial.stats.checks_run == len(patches) - 1  # all but the conflict


async def test_the_branch_says_what_landed(repo: Path) -> None:
    """What a resumed run trusts when the journal missed a landing."""
    merged = await merge_all(repo, {"a": 2, "b": 2})
    settings = QueueSettings(CountingChecker(repo), batch_check=CHECK)
    async with MergeQueue.open(repo, run_id="r1", base="main", settings=settings) as queue:
        landed = await queue.landed()
        assert queue.head == git(repo, "rev-parse", "swarm/r1")
    assert landed == {"a": merged.results["a"].commit, "b": merged.results["b"].commit}


async def test_the_line_goes_on_while_a_red_batch_is_split(repo: Path) -> None:
    """[a b c] is red and [d a2] behind it starts again without `a2`: it touches a file of
    the red batch, so it waits for the verdict and lands on `a`'s file once `a` is out.
    `d` lands beside the split, which checks `a` alone (slowly) and [a b] at once: `a`
    is the culprit, and `b` and `c` are handed back after that round."""
    slow = "if values['a'] == 13 and values['b'] == 1:\n    time.sleep(3)\n"
    (repo / "check.py").write_text(CHECK_PY.replace("unlucky = ", slow + "unlucky = "))
    git(repo, "commit", "-qam", "a slow prefix")
    patches = {
        "a": await patch_setting(repo, "a", 13),
        "b": await patch_setting(repo, "b", 2),
        "c": await patch_setting(repo, "c", 2),
        "d": await patch_setting(repo, "d", 2),
        "a2": await patch_setting(repo, "a", 3),
    }
    merged = await merge_all(repo, {}, BATCHES, patches=patches)
    assert merged.kinds() == {"a": "red", "b": "merged", "c": "merged", "d": "merged"} | {
        "a2": "merged"
    }
    order = [s.split(":")[1].strip() for s in merged.subjects]
    assert order == ["d", "b", "c", "a2"]
    assert git(repo, "show", "swarm/r1:a.py") == "X = 3"
    assert_clean(repo)


def test_a_patch_names_the_files_it_touches() -> None:
    edit = 'diff --git "a/x y.py" "b/x y.py"\n--- "a/x y.py"\n+++ "b/x y.py"\n@@ -1 +1 @@\n'
    plain = "diff --git a/m/x.py b/m/x.py\nindex 1..2\n--- a/m/x.py\n+++ b/m/x.py\n@@ -1 +1 @@\n"
    moved = "diff --git a/x.py b/z.py\nsimilarity index 100%\nrename from x.py\nrename to z.py\n"
    new = "diff --git a/n.bin b/n.bin\nnew file mode 100644\nBinary files /dev/null and b/n.bin\n"
    assert Patch("p", "t", plain).files == {"m/x.py"}
    assert Patch("p", "t", moved).files == {"x.py", "z.py"}
    assert Patch("p", "t", new).files == {"n.bin"}
    assert Patch("p", "t", edit).files == {"x y.py"}


async def test_alternates_wait_for_a_first_red() -> None:
    """Before any batch has turned red, the line builds only its main builds (the prior's
    odds would give big batches alternates, each a build and a check thrown away when the
    batch lands); once one has, the slots behind a likely red one get them."""
    from swarm.run._merge._line import Line, RedRate, Request, Slot

    def slot(k: int) -> Slot:
        names = [f"s{k}{j}" for j in range(32)]
        return Slot([Request(Patch(n, n, ""), None, (0, k)) for n in names])

    line, rate = Line(alternates=4), RedRate()
    line.slots = [slot(k) for k in range(3)]
    assert rate.red_odds(32) > line.odds
    first = line.start(rate)
    assert [b.alternate for b in first] == [False] * 3
    rate.red(32)
    assert rate.seen_red
    later = line.start(rate)
    assert later and all(b.alternate for b in later)


def test_batches_shrink_as_culprits_show_and_stay_big_while_none_do() -> None:
    from swarm.run._merge._line import RedRate

    assert RedRate().cap() >= 32  # before any verdict: as big as the config allows
    assert RedRate(judged=300, culprits=0).cap() > 100
    five_percent = RedRate(judged=300, culprits=15).cap()
    assert 8 <= five_percent <= 14  # about 60 % of such batches come back green
    assert RedRate(judged=100, culprits=100).cap() == 1
    # five batches of 25 red (not split yet) after 64 green patches: mostly culprits
    # more than once each
    assert RedRate(judged=64, reds=[25] * 5).cap() <= 16  # one culprit each: 21
    rate = RedRate(judged=64, reds=[25])
    rate.corrected(25, culprits=2, unjudged=5)
    assert (rate.judged, rate.culprits, rate.reds) == (84, 2, [])


async def test_a_culprit_is_red_at_once_and_fixed_on_top_of_what_it_was_red_on(
    repo: Path,
) -> None:
    """`b` is red only on top of `a`; the split that finds it is slow, so `c` and `d` land
    meanwhile and `a` waits again. `b` is red at once, with the split's commit holding `a`
    to fix it on, and its fixed patch lands only after `a`."""
    pair = "if values['a'] == 2 and values['b'] == 2:\n    raise SystemExit('b on a')\n"
    slow = "if values['a'] == 2 and values['b'] == 1:\n    time.sleep(3)\n"
    (repo / "check.py").write_text(CHECK_PY.replace("unlucky = ", pair + slow + "unlucky = "))
    git(repo, "commit", "-qam", "b is red on top of a")
    patches = {name: await patch_setting(repo, name, 2) for name in "abcd"}
    fixed = await patch_setting(repo, "b", 3)
    settings = QueueSettings(CountingChecker(repo), batch_check=CHECK, config=BATCHES)
    decided: list[tuple[str, str]] = []
    async with MergeQueue.open(repo, run_id="r1", base="main", settings=settings) as queue:

        async def merge(order: int, name: str) -> None:
            result = await queue.merge(name, f"set {name}", patches[name], check=CHECK, order=order)
            decided.append((name, result.kind))
            if name == "b":
                assert "b on a" in result.output and result.base is not None
                assert git(repo, "show", f"{result.base}:a.py") == "X = 2"
                assert git(repo, "show", f"{result.base}:b.py") == "X = 1"
                again = await queue.merge("b", "fix b", fixed, check=CHECK, order=-1)
                decided.append(("b", again.kind))

        async with anyio.create_task_group() as tg:
            for order, name in enumerate(patches):
                tg.start_soon(merge, order, name)
    assert decided.index(("b", "red")) < decided.index(("a", "merged"))
    assert decided.index(("a", "merged")) < decided.index(("b", "merged"))
    subjects = git(repo, "log", "--format=%s", "--reverse", "main..swarm/r1").splitlines()
    assert [s.split(":")[1].strip() for s in subjects] == ["c", "d", "a", "b"]
    assert git(repo, "show", "swarm/r1:b.py") == "X = 3"
    assert_clean(repo)


def _pipeline(config: MergeConfig) -> Any:
    """A `Pipeline` that is never run: its bookkeeping, tested alone."""
    from swarm.run._merge._pipeline import Pipeline, Rules

    async def never(*_args: object, **_kwargs: object) -> CheckResult:
        raise AssertionError("not checked here")

    async def land(_tip: str) -> None:
        raise AssertionError("nothing lands here")

    return Pipeline(Rules(never, None, config, land), None, "head", MergeStats())  # type: ignore[arg-type]


def _requests(n: int) -> list[Any]:
    from swarm.run._merge._line import Request

    diff = "diff --git a/f{0} b/f{0}\n"
    return [Request(Patch(f"s{i}", "t", diff.format(i)), None, (0, i)) for i in range(n)]


def test_a_fixed_culprit_waits_for_the_green_patches_it_was_fixed_on_top_of() -> None:
    """Its fix waits until they are decided, or in a batch of the line ahead of its own."""
    pipeline = _pipeline(BATCHES)
    green, culprit, other = _requests(3)
    pipeline.pending = [green]
    pipeline._after[culprit.patch.name] = [green]  # as a split's verdict leaves it
    pipeline.submit(culprit)
    pipeline.submit(other)
    assert [r.patch.name for r in pipeline._free()] == ["s0", "s2"]
    from swarm.run._merge._line import Slot

    ahead = Slot([green])  # in the line: the fix may take a batch behind it, once final
    pipeline.pending = [culprit, other]
    pipeline.line.slots.append(ahead)
    assert [r.patch.name for r in pipeline._free()] == ["s2"]
    ahead.fixed.set()
    assert [r.patch.name for r in pipeline._free()] == ["s1", "s2"]
    pipeline.line.slots.clear()
    pipeline.pending = [green, culprit, other]
    green.settle(MergeResult("merged", "c0"))
    assert [r.patch.name for r in pipeline._free()] == ["s0", "s1", "s2"]
    pipeline.submit(_requests(2)[1])  # its next patch (another round) waits for nothing
    assert pipeline.pending[-1].after == []


async def test_a_batch_about_to_be_built_takes_the_patches_that_arrived_meanwhile() -> None:
    """As a wave of agents finishes, the batches formed from its first patches hold one or
    two: each takes the patches that queued while it waited for the one ahead (to its cap)."""
    from swarm.run._merge._line import Slot

    pipeline = _pipeline(MergeConfig(batch_size=BatchSize(min=1, max=3), max_parallel_checks=2))
    first, *later = _requests(5)
    slot = Slot([first])
    pipeline.pending = list(later)
    pipeline._top_up(slot)
    assert [r.patch.name for r in slot.requests] == ["s0", "s1", "s2"]  # to its cap of 3
    assert [r.patch.name for r in pipeline.pending] == ["s3", "s4"]


async def test_the_queue_starts_no_garbage_collection_in_the_users_repository(
    repo: Path,
) -> None:
    """A repository at git's gc thresholds: every `git am` or `commit` would run a whole
    `gc` (here in the foreground) in the queue's path, and its `pack-refs` would hold the
    lock branch deletions need. swarm's git commands run none."""
    git(repo, "config", "gc.auto", "1")  # two loose objects in objects/17 start a gc
    git(repo, "config", "gc.autoDetach", "false")
    loose = 0
    for i in range(10_000):
        content = f"x{i}\n".encode()
        if hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest().startswith("17"):
            subprocess.run(
                ["git", "hash-object", "-w", "--stdin"], cwd=repo, input=content, check=True
            )
            loose += 1
            if loose == 2:
                break
    merged = await merge_all(repo, {"a": 2, "b": 3})
    assert merged.kinds() == {"a": "merged", "b": "merged"}
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    assert not list((common / "objects" / "pack").glob("*.pack"))
    assert not (common / "packed-refs").exists()


def test_there_is_a_check_tree_for_every_check_slot() -> None:
    """A red batch's split checks its prefixes at once, each in a tree of its own: the
    pool must not hold them back while check slots are free."""
    from swarm.run._merge import _trees_needed

    assert _trees_needed(MergeConfig(check_slots=100, max_parallel_checks=4)) == 104
    assert _trees_needed(MergeConfig(check_slots=2, max_parallel_checks=2)) == 6
    assert _trees_needed(ONE_AT_A_TIME) >= 3


async def test_a_rebased_patch_keeps_the_place_its_first_patch_had() -> None:
    """A culprit's fix comes back long after others queued behind its first patch; it
    goes where that one stood, not to the back of the line. It was checked green on a
    head where its clash had landed: it is not probed again."""
    queue = MergeQueue(Path("."), "swarm/r1", QueueSettings(CountingChecker(Path("."))))
    queue._pipeline = pipeline = _pipeline(BATCHES)
    diff = "diff --git a/{0} b/{0}\n"

    async def merge(name: str) -> None:
        await queue.merge(name, "t", diff.format(name), check=None)

    async with anyio.create_task_group() as tg:
        for name in ("first", "second", "third"):
            tg.start_soon(merge, name)
            await anyio.sleep(0.001)  # each arrives after the one before
        await anyio.sleep(0.01)
        first = next(r for r in pipeline.pending if r.patch.name == "first")
        first.settle(MergeResult("red", output="red on top of second"))
        pipeline.pending.remove(first)
        tg.start_soon(merge, "first")  # its fixed patch
        await anyio.sleep(0.01)
        assert [r.patch.name for r in pipeline.pending] == ["first", "second", "third"]
        assert [r.probed for r in pipeline.pending] == [True, False, False]
        tg.cancel_scope.cancel()


async def test_once_a_batch_is_red_patches_are_probed_on_the_head_before_the_line(
    repo: Path, spans: InMemorySpanExporter
) -> None:
    """After [a b] is red (`b`), the line's front takes [c d], and the patches behind are
    first checked alone on the head, in probes of two, outside the line: the probe of
    [e f] is red and split there, so no batch of the line is red; the others join the
    line probed and land. The tree is the one merging one at a time gives."""
    values = dict.fromkeys(MODULES, 2) | {"b": 13, "f": 13}
    patches = {n: await patch_setting(repo, n, v) for n, v in values.items()}
    pairs = MergeConfig(batch_size=BatchSize(min=1, max=2), max_parallel_checks=2)
    results, stats = await merge_waves(repo, patches, ("ab", "cdefgh"), pairs)
    assert {n: r.kind for n, r in results.items()} == {
        m: "red" if m in "bf" else "merged" for m in MODULES
    }
    assert stats.probes >= 1
    attrs = [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    batches = [(a, _names(a)) for a in attrs if sc.MERGE_OUTCOME in a]
    probes = [(a, names) for a, names in batches if a.get(sc.MERGE_PROBE)]
    red_probe, names = next((a, names) for a, names in probes if a[sc.MERGE_OUTCOME] == "red")
    assert "f" in names and red_probe[sc.MERGE_SPECULATIVE_DEPTH] == 0
    line = [(a, names) for a, names in batches if not a.get(sc.MERGE_PROBE)]
    second_wave = [a for a, names in line if not set(names) & {"a", "b"}]
    assert second_wave and all(a[sc.MERGE_OUTCOME] == "green" for a in second_wave)
    one = await merge_all(make_repo(repo.parent / "alone"), values, ONE_AT_A_TIME)
    assert git(repo, "rev-parse", "swarm/r1^{tree}") == one.tree
    assert one.stats.probes == 0  # the baseline never probes
    assert_clean(repo)


def _names(attrs: dict[str, Any]) -> tuple[str, ...]:
    """A merge span's subtasks."""
    return tuple(str(n) for n in attrs[sc.MERGE_SUBTASKS])


NAMING_CHECK = CHECK_PY.replace(
    "assert not unlucky",
    # as pytest reports each failure, with the file it is in
    "for m in unlucky:\n    print(f'{m}.py:1: AssertionError: unlucky')\nassert not unlucky",
)


async def test_a_check_naming_the_culprits_files_finds_them_all_in_one_round(
    repo: Path, tmp_path: Path
) -> None:
    """The red batch's output names `b.py` and `g.py`: the batch without `b` and `g` is
    checked, and each of them alone on top of it, at once. It is green, they are red on
    it: one round finds both culprits and lands the six others, in four checks."""
    (repo / "check.py").write_text(NAMING_CHECK)
    git(repo, "commit", "-qam", "a check that names what failed")
    other = tmp_path / "copy"
    shutil.copytree(repo, other)
    values = dict.fromkeys(MODULES, 2) | {"b": 13, "g": 13}
    one_batch = MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=1)
    merged = await merge_all(repo, values, one_batch)
    assert merged.kinds() == {m: "red" if m in "bg" else "merged" for m in MODULES}
    assert "b.py:1" in merged.results["b"].output and "g.py:1" in merged.results["g"].output
    assert merged.stats.splits == 1  # one round
    assert merged.stats.checks_run == 4  # the batch, the rest, b and g alone on it
    serial = await merge_all(other, values, ONE_AT_A_TIME)
    assert merged.tree == serial.tree
    assert_clean(repo)


async def test_a_suspect_the_output_names_wrongly_does_not_hide_the_culprit(
    repo: Path,
) -> None:
    """A red check that names `a.py` whatever failed: the batch without `a` is red too
    and names nothing new, so the split goes on by prefixes and finds `f`."""
    blame = "if unlucky:\n    print('see a.py')\nassert not unlucky"
    (repo / "check.py").write_text(CHECK_PY.replace("assert not unlucky", blame))
    git(repo, "commit", "-qam", "a check that blames a")
    values = dict.fromkeys(MODULES, 2) | {"f": 13}
    one_batch = MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=1)
    merged = await merge_all(repo, values, one_batch)
    assert merged.kinds() == {m: "red" if m == "f" else "merged" for m in MODULES}
    assert merged.stats.splits >= 2  # the round apart from `a`, then prefixes
    assert_clean(repo)


def test_a_check_output_names_a_file_by_its_path_alone_or_at_the_end_of_one() -> None:
    from swarm.run._merge._split import _paths_in

    assert "src/pkg/mod.py" in _paths_in('  File "/tmp/w/_check-3/src/pkg/mod.py", line 3')
    assert "src/pkg/mod.py" in _paths_in("src/pkg/mod.py:12: AssertionError")
    assert "tests/test_x.py" in _paths_in("\x1b[31mFAILED\x1b[0m tests/test_x.py::test_y")
    assert "a.py" in _paths_in("see a.py.")
    assert "mod.py" not in _paths_in("xmod.py:1: AssertionError")
    assert "mod.py" not in _paths_in("mod.pyc")
    assert not _paths_in("")


async def test_a_green_probe_lands_when_the_head_has_not_moved_and_the_line_is_empty() -> None:
    """Checked on the head, nothing ahead of it: it lands as it is, not checked again in
    the line; had the head moved, its patches join the line, probed."""
    from swarm.run._merge._line import Build, Slot
    from swarm.run._merge._pipeline import Pipeline, Rules
    from swarm.run._merge._trees import Step

    landed: list[str] = []

    async def land(tip: str) -> None:
        landed.append(tip)

    async def never(*_args: object, **_kwargs: object) -> CheckResult:
        raise AssertionError("not checked here")

    rules = Rules(never, None, BATCHES, land)
    for head, moved in (("base", False), ("elsewhere", True)):
        pipeline = Pipeline(rules, None, head, MergeStats())  # type: ignore[arg-type]
        requests = _requests(2)
        probe = Build(Slot(requests), None, 0, probe=True, base="base")
        probe.steps = [Step("committed", "c1"), Step("committed", "c2")]
        async with anyio.create_task_group() as tg:
            await pipeline._judged(probe, tg)
        if moved:
            assert pipeline.pending == requests and all(r.probed for r in requests)
        else:
            assert pipeline.head == "c2" and [r.result.kind for r in requests] == ["merged"] * 2
    assert landed == ["c2"]


async def test_the_queue_keeps_check_trees_ready_and_removes_them_all(repo: Path) -> None:
    """Made in the background before a burst of checks asks for them (each made then
    waited for the lock the one before held), up to the pool's size; all removed when
    the queue closes."""
    from swarm.run._merge import _spare_trees, _trees_needed

    config = MergeConfig(check_slots=4, max_parallel_checks=2)
    assert _spare_trees(config) == 16 and _trees_needed(config) == 6
    settings = QueueSettings(CountingChecker(repo), batch_check=CHECK, config=config)
    root = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    async with MergeQueue.open(repo, run_id="r1", base="main", settings=settings):
        with anyio.fail_after(30):
            # the trees on disk are what is awaited: nothing signals them
            while len(list((root / "swarm-worktrees" / "r1").glob("_check-*/"))) < 6:  # noqa: ASYNC110
                await anyio.sleep(0.05)
    assert_clean(repo)


async def test_a_culprit_whose_clash_landed_first_is_found_by_what_the_landed_file_imports(
    repo: Path,
) -> None:
    """`a` landed needing `c` at 1; then [b c d e] is red in `a.py`, which none of them
    touches. `a.py` imports `c`: `c` is the suspect, and one round finds it."""
    needs_c = "X = 2\nimport c\nassert c.X == 1, 'a needs c at 1'\n"
    (repo / "a.py").write_text(needs_c)
    patches = {"a": await worktree_diff(repo, "HEAD", untracked=())}
    git(repo, "checkout", "--", "a.py")
    patches |= {n: await patch_setting(repo, n, 2) for n in "bcde"}
    one_batch = MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=1)
    results, stats = await merge_waves(repo, patches, ("a", "bcde"), one_batch)
    assert {n: r.kind for n, r in results.items()} == {
        n: "red" if n == "c" else "merged" for n in "abcde"
    }
    assert "a needs c at 1" in results["c"].output
    assert stats.splits == 1  # one round
    assert stats.checks_run == 4  # `a`; the batch; [b d e], and `c` alone on it
    assert_clean(repo)


async def test_patches_others_wait_for_are_batched_apart_from_the_rest() -> None:
    """A red patch no one waits for must not hold the heads of chains back: the line and
    the probes take either kind, not both, and a batch about to be built tops up with
    its own kind only."""
    from swarm.run._merge._line import Slot

    pipeline = _pipeline(MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=1))
    heads, leaves = _requests(2), _requests(5)[2:]
    for r in heads:
        r.waited_on = True
    pipeline.pending = [*heads, *leaves]
    pipeline._take(pipeline._free())
    assert pipeline.line.slots[0].requests == heads
    assert pipeline._probe(pipeline._free()).requests == leaves
    late_head, late_leaf = _requests(7)[5:]
    late_head.waited_on = True
    pipeline.pending = [late_head, late_leaf]
    slot = Slot([leaves[0]])
    pipeline._top_up(slot)
    assert slot.requests == [leaves[0], late_leaf]
    assert pipeline.pending == [late_head]


def _naming(name: str, path: str, added: str) -> Any:
    """A request whose patch changes `path`, adding `added`."""
    from swarm.run._merge._line import Request

    diff = (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-X = 1\n+{added}\n"
    )
    return Request(Patch(name, "t", diff), None, (0, int(name[1:])))


async def test_a_patch_links_to_the_modules_its_added_lines_name() -> None:
    """`s0` imports `pkg/c.py`'s module: linked to the patch changing it, both ways; not to
    one changing a module it does not name, nor through a package's `__init__`."""
    s0 = _naming("s0", "b.py", "from pkg.c import X  # def __init__")
    s1, s2 = _naming("s1", "pkg/c.py", "X = 2"), _naming("s2", "d.py", "X = 2")
    s3 = _naming("s3", "pkg/__init__.py", "X = 2")
    assert s0.patch.modules == {"b"} and {"pkg", "c", "X", "__init__"} <= s0.patch.named
    pipeline = _pipeline(BATCHES)
    for r in (s0, s1, s2, s3):
        pipeline.submit(r)
    assert s0.links == [s1] and s1.links == [s0] and s2.links == s3.links == []


async def test_linked_patches_are_batched_together() -> None:
    """A probe of two takes `s0` with the patch it names, not the next in order; the line
    likewise; a group that does not fit waits for the next batch."""
    pipeline = _pipeline(MergeConfig(batch_size=BatchSize(min=1, max=2), max_parallel_checks=1))
    s0, s1 = _naming("s0", "a.py", "import c"), _naming("s1", "b.py", "X = 2")
    s2 = _naming("s2", "c.py", "X = 2")
    for r in (s0, s1, s2):
        pipeline.submit(r)
    assert pipeline._probe(pipeline._free()).requests == [s0, s2]
    assert pipeline.pending == [s1]
    from swarm.run._merge._links import Links

    s3 = _naming("s3", "d.py", "import e, f")
    s4, s5 = _naming("s4", "e.py", "X = 2"), _naming("s5", "f.py", "X = 2")
    for r in (s3, s4, s5):
        pipeline.submit(r)
    assert Links.batch([s1, s3, s4, s5], [s1, s3, s4, s5], 2) == [s1]
    assert Links.batch([s1, s3, s4, s5], [s1, s3, s4, s5], 4) == [s1, s3, s4, s5]


async def test_a_patch_judged_green_apart_from_one_it_names_is_judged_again() -> None:
    """Judged green while a patch it is linked to waited apart: probed again (then with
    it, and they stay probed). Judged on a head from before that patch landed: it
    is probed again, on the head; on a later head it stays. Once per link, at most."""
    pipeline = _pipeline(BATCHES)
    a, c = _naming("s0", "a.py", "import c"), _naming("s1", "c.py", "X = 2")
    pipeline.submit(a)
    pipeline.submit(c)
    links = pipeline.links
    links.judged([c], "head", pipeline.pending)  # apart from `a`, which waits
    assert not c.probed
    links.judged([a, c], "head", pipeline.pending)
    assert a.probed and c.probed and not a.doubtful
    links.judged([a], "head", pipeline.pending)  # apart from `c`, which waits
    assert not a.probed
    links.judged([a], "head", pipeline.pending)  # apart again: not a second time
    assert a.probed and a.doubtful

    pipeline = _pipeline(BATCHES)
    a, c = _naming("s0", "a.py", "import c"), _naming("s1", "c.py", "X = 2")
    pipeline.submit(a)
    pipeline.submit(c)
    pipeline.pending.remove(c)
    c.settle(MergeResult("merged", "c1"))
    pipeline.links.landed([c], "c1", pipeline.pending)
    pipeline.links.judged([a], "c1", pipeline.pending)  # on `c`: stays probed
    assert a.probed
    pipeline.links.judged([a], "head", pipeline.pending)  # from before `c` landed
    assert not a.probed


async def test_a_doubtful_patch_takes_a_place_in_the_line_alone() -> None:
    """Probed apart from a patch it names that is still undecided (in a batch ahead), it
    may be red on it: the line takes it alone, so that it is its own culprit if red and
    holds no other patch back; its red odds are an unprobed patch's, for the alternates."""
    pipeline = _pipeline(MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=2))
    pipeline.rate.red(1)
    a, c = _naming("s0", "a.py", "import c"), _naming("s1", "c.py", "X = 2")
    others = [_naming(f"s{i}", f"m{i}.py", "X = 2") for i in range(2, 5)]
    for r in (a, c, *others):
        pipeline.submit(r)
    pipeline.pending.remove(c)  # in flight elsewhere
    for r in (a, *others):
        r.probed, r.judged_with = True, frozenset([r])
    assert a.doubtful and not others[0].doubtful
    pipeline._take(pipeline._free())
    pipeline._take(pipeline._free())
    assert [s.requests for s in pipeline.line.slots] == [[a], others]
    alone, rest = pipeline.line.slots
    assert alone.red_odds(pipeline.rate) > rest.red_odds(pipeline.rate) == 0
    c.settle(MergeResult("merged", "c1"))
    assert not a.doubtful


async def test_a_probe_red_with_its_patch_naming_another_and_green_without_finds_it(
    repo: Path, spans: InMemorySpanExporter
) -> None:
    """After `b` is red, the line's front takes [c d] and the rest are probed in pairs.
    `g` imports `h` and needs it at 1, which `h` changes: the probe of [g h] is also built
    without `g`, at once. Red with it, green without: `g` is the culprit, with no split."""
    values = dict.fromkeys(MODULES, 2) | {"b": 13}
    patches = {n: await patch_setting(repo, n, v) for n, v in values.items()}
    (repo / "g.py").write_text("X = 2\nimport h\nassert h.X == 1, 'g needs h at 1'\n")
    patches["g"] = await worktree_diff(repo, "HEAD", untracked=())
    git(repo, "checkout", "--", "g.py")
    pairs = MergeConfig(batch_size=BatchSize(min=1, max=2), max_parallel_checks=2)
    results, stats = await merge_waves(repo, patches, ("ab", "cdefgh"), pairs)
    assert {n: r.kind for n, r in results.items()} == {
        m: "red" if m in "bg" else "merged" for m in MODULES
    }
    assert "g needs h at 1" in results["g"].output
    assert stats.splits == 0  # `b` was red alone, and `g` is found without one
    attrs = [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    probes = {(_names(a), a[sc.MERGE_OUTCOME]) for a in attrs if a.get(sc.MERGE_PROBE)}
    assert {(("g", "h"), "red"), (("h",), "green")} <= probes
    assert_clean(repo)


async def test_a_probe_blames_its_likeliest_culprit_only_when_checked_red_and_green_without() -> (
    None
):
    """Green without `s0` and red with it: `s0` is the culprit. Not if the probe did not
    build (git failed), nor if the build without it is red, nor if a patch did not apply."""
    from swarm.run._merge._probe import build_probe, found_alone
    from swarm.run._merge._trees import Step

    def probe(*, red: bool = True, rest_red: bool = False, failed: bool = False) -> Any:
        s0, s1 = _naming("s0", "a.py", "import c"), _naming("s1", "b.py", "X = 2")
        s2 = _naming("s2", "c.py", "X = 2")
        s0.links, s2.links = [s2], [s0]
        built = build_probe([s0, s1, s2])
        assert built.without is not None and built.without.requests == [s1, s2]
        built.steps = [Step("committed", f"c{i}") for i in range(3)]
        built.without.steps = [Step("committed", f"d{i}") for i in range(2)]
        built.result = CheckResult(not red, int(red), "a.py:3: AssertionError", 1.0)
        built.without.result = CheckResult(not rest_red, int(rest_red), "", 1.0)
        if failed:
            built.failed, built.result = "git failed", None
        return built

    verdict = found_alone(probe())
    assert verdict is not None and [c.request.patch.name for c in verdict.culprits] == ["s0"]
    assert [r.patch.name for r, _ in verdict.green] == ["s1", "s2"]
    assert "a.py:3" in verdict.culprits[0].output
    assert found_alone(probe(failed=True)) is None
    assert found_alone(probe(rest_red=True)) is None
    assert found_alone(probe(red=False)) is None
    conflict = probe()
    conflict.without.steps[0] = Step("conflict", None)
    assert found_alone(conflict) is None


async def test_while_patches_are_coming_the_queue_gathers_them_into_one_batch(
    repo: Path,
) -> None:
    """Patches no one waits for, arriving one by one while others are still coding, wait
    for the rest: one batch, one check, once nothing more is coming."""
    patches = {n: await patch_setting(repo, n, 2) for n in "abc"}
    checker = CountingChecker(repo)
    settings = QueueSettings(checker, batch_check=CHECK, config=BATCHES)
    results: dict[str, MergeResult] = {}
    async with MergeQueue.open(repo, run_id="r1", base="main", settings=settings) as queue:

        async def merge(name: str) -> None:
            results[name] = await queue.merge(name, name, patches[name], check=CHECK)

        queue.expect(3)
        async with anyio.create_task_group() as tg:
            for coming, name in zip((2, 1, 0), "abc", strict=True):
                tg.start_soon(merge, name)
                await anyio.wait_all_tasks_blocked()
                queue.expect(coming)  # as the coordinator says it: once the patch is in
                await anyio.wait_all_tasks_blocked()
                assert queue.stats.batches == (0 if coming else 1), name
                assert checker.places == [] or not coming, name
        stats = queue.stats
    assert {n: r.kind for n, r in results.items()} == dict.fromkeys("abc", "merged")
    assert (stats.batches, stats.checks_run) == (1, 1)
