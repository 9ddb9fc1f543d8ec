"""The merge queue on a real project: batched against one at a time, with real clashes.

    python -m benchmarks.bench_merge_real [--project toolz==1.0.0] [--patches 24]
        [--clashes 2] [--repo-dir DIR] [--venv DIR] [--no-verify] [--json]

The repository is a real PyPI project (toolz, from its sdist: `../shared/tools/real-repo`,
run once when the repository or its venv is missing) and every merge check is the
project's own pytest suite run with that venv's interpreter. `--patches` patches are made
against the baseline commit, each touching files of its own: a small new helper (with a
docstring) at the end of a real module plus a test file for it, or a test file exercising
existing functions. `--clashes` of them are semantic clash pairs that no textual merge
sees: one patch adds a constant and a helper to a module (`toolz.itertoolz`), the other
adds a test that pins that module's public names; each is green alone, together they are
red. A pair's two patches are far apart in the merge order, and every other pair has its
pinning test first, so the culprit is sometimes the pin, sometimes the change.

With `--verify` (the default) every patch is checked alone on the baseline (it must be
green) and every pair together (it must be red, naming the pinning test) before the
benchmark proper. Then the same patches, all arriving at once, go through the batched queue
(`batch_size` 1..32, 2 checks in flight: 2 cores) and the one-at-a-time queue (1..1, 1
check), each on a fresh clone of the baseline. Reported per queue: wall seconds (from
opening the queue until every patch is decided), merge checks run and their summed
seconds, patches merged, red (the culprits), splits, probes, batches, and whether the
outcome is the expected one (each pair one red and one merged, every other patch merged);
then the speedup (one-at-a-time wall / batched wall), whether both queues merged the same
patches and ended on the same tree (informational: which half of a pair is red may
differ between the queues). Checks share the machine's cores with whatever else runs on
it: the numbers are noisy on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchmarks._toolz_patches import EXISTING, HELPERS, LIMITS, Feature
from swarm.config import BatchSize, MergeConfig
from swarm.run._check import Checker, CheckResult
from swarm.run._environment import CheckEnvironment
from swarm.run._merge import MergeQueue, MergeResult, MergeStats, QueueSettings
from swarm.run._workspace import worktree_diff

REAL_REPO = Path(__file__).resolve().parents[2] / "shared" / "tools" / "real-repo"
TESTS = "toolz/tests"
QUEUES: dict[str, MergeConfig] = {
    "batched": MergeConfig(batch_size=BatchSize(min=1, max=32), max_parallel_checks=2),
    "one_at_a_time": MergeConfig(batch_size=BatchSize(min=1, max=1), max_parallel_checks=1),
}


@dataclass(frozen=True)
class PatchSpec:
    """One patch to make: whole new contents of the files it touches."""

    name: str
    title: str
    files: dict[str, str]
    pair: int | None = None
    """The clash pair it belongs to."""
    pins: bool = False
    """It is the pair's pinning test (red once the other half has landed)."""


@dataclass(frozen=True)
class Patch:
    spec: PatchSpec
    order: int
    diff: str


@dataclass
class QueueRun:
    """What one queue did with the patches."""

    wall_s: float
    stats: MergeStats
    results: dict[str, MergeResult]
    tree: str
    problems: list[str] = field(default_factory=list)

    def names(self, kind: str) -> list[str]:
        return sorted(n for n, r in self.results.items() if r.kind == kind)

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for result in self.results.values():
            kinds[result.kind] = kinds.get(result.kind, 0) + 1
        return {
            "wall_s": round(self.wall_s, 2),
            "checks_run": self.stats.checks_run,
            "check_s": round(self.stats.check_s, 2),
            "merged": len(self.names("merged")),
            "red": len(self.names("red")),
            "culprits": {n: failed_line(self.results[n].output) for n in self.names("red")},
            "splits": self.stats.splits,
            "probes": self.stats.probes,
            "batches": self.stats.batches,
            "rebuilds": self.stats.rebuilds,
            "alternates": self.stats.alternates,
            "kinds": kinds,
            "expected": not self.problems,
            "problems": self.problems,
        }


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    command = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args]
    done = subprocess.run(command, cwd=repo, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo}: {done.stderr.strip()}")
    return done.stdout.strip()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def failed_line(output: str) -> str:
    """pytest's first `FAILED ...` line, else the output's last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("FAILED")), lines[-1] if lines else "")


# -- the repository ---------------------------------------------------------------------


def ensure_repo(project: str, repo_dir: Path, venv: Path, tool: Path) -> Path:
    """The venv's interpreter, after making the repository and venv if either is missing."""
    python = venv / "bin" / "python"
    if not (repo_dir / ".git").is_dir() or not python.exists():
        log(f"making {repo_dir} and {venv} from {project} with {tool}")
        subprocess.run(
            [str(tool), project, str(repo_dir), str(venv), "pytest"], check=True, stdout=sys.stderr
        )
    return python


def clone(repo_dir: Path, dest: Path) -> Path:
    """A fresh copy of the baseline, ignoring what the original ignores (`__pycache__`)."""
    subprocess.run(["git", "clone", "-q", str(repo_dir), str(dest)], check=True)
    shutil.copy(repo_dir / ".git" / "info" / "exclude", dest / ".git" / "info" / "exclude")
    return dest


def check_command(python: Path) -> str:
    return f"{shlex.quote(str(python))} -m pytest -q -x -p no:cacheprovider {TESTS}"


def public_names(repo: Path, python: Path, module: str) -> list[str]:
    """The public names of `module` on the baseline, as the venv imports it."""
    code = (
        "import importlib, json, sys; m = importlib.import_module(sys.argv[1]); "
        "print(json.dumps(sorted(n for n in vars(m) if not n.startswith('_'))))"
    )
    done = subprocess.run(
        [str(python), "-c", code, module],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    names: list[str] = json.loads(done.stdout)
    return names


# -- the patches ------------------------------------------------------------------------


def module_path(module: str) -> str:
    return module.replace(".", "/") + ".py"


def new_test_path(order: int) -> str:
    return f"{TESTS}/test_swarm_{order:02d}.py"


def feature_files(repo: Path, feature: Feature, order: int) -> dict[str, str]:
    path = module_path(feature.module)
    original = (repo / path).read_text()
    return {path: original.rstrip("\n") + "\n\n" + feature.code, new_test_path(order): feature.test}


def pin_test(module: str, names: list[str]) -> str:
    """A test pinning `module`'s public names: adding one is an API change to review."""
    package, _, leaf = module.rpartition(".")
    pinned = "".join(f"    {name!r},\n" for name in names)
    return (
        f'"""The public names of {module}, pinned: adding one is an API change."""\n\n'
        f"from {package} import {leaf}\n\nPINNED = {{\n{pinned}}}\n\n\n"
        f"def test_{leaf}_public_names_are_pinned():\n"
        f'    public = {{name for name in vars({leaf}) if not name.startswith("_")}}\n'
        f'    assert public == PINNED, f"new or gone: {{sorted(public ^ PINNED)}}"\n'
    )


def existing_test(i: int, order: int) -> tuple[str, dict[str, str]]:
    what, imports, asserts = EXISTING[i % len(EXISTING)]
    body = "".join(f"    assert {a}\n" for a in asserts)
    if what == "memoize":
        body = (
            "    calls = []\n\n    @memoize\n    def double(x):\n        calls.append(x)\n"
            "        return 2 * x\n\n    assert double(2) == double(2) == 4\n" + body
        )
    code = f"{imports}\n\n\ndef test_{what}_{order:02d}():\n{body}"
    return what, {new_test_path(order): code}


def layout(n: int, clashes: int) -> tuple[dict[int, tuple[int, bool]], list[int]]:
    """Where each clash pair's halves go (order -> (pair, pins)) and the other places: a
    pair's halves far apart, the change first for even pairs, the pin first for odd ones."""
    pairs: dict[int, tuple[int, bool]] = {}
    for k in range(clashes):
        pairs[k] = (k, k % 2 == 1)
        pairs[n - 1 - k] = (k, k % 2 == 0)
    return pairs, [o for o in range(n) if o not in pairs]


def plan_patches(repo: Path, python: Path, n: int, clashes: int) -> list[PatchSpec]:
    if not 0 <= clashes <= len(LIMITS) or n < 2 * clashes:
        raise SystemExit(f"--clashes must be 0..{len(LIMITS)} and --patches at least twice it")
    limits = LIMITS[:clashes]
    clash_modules = {f.module for f in limits}
    helpers = [f for f in HELPERS if f.module not in clash_modules]
    pairs, others = layout(n, clashes)
    specs: list[PatchSpec] = []
    tests = 0
    for order in range(n):
        if order in pairs:
            k, pins = pairs[order]
            feature = limits[k]
            leaf = feature.module.rpartition(".")[2]
            if pins:
                names = public_names(repo, python, feature.module)
                files = {new_test_path(order): pin_test(feature.module, names)}
                specs.append(
                    PatchSpec(
                        f"p{order:02d}-pin-{leaf}-api",
                        f"pin the public names of {feature.module}",
                        files,
                        k,
                        pins=True,
                    )
                )
            else:
                specs.append(
                    PatchSpec(
                        f"p{order:02d}-{leaf}-limit",
                        f"add SWARM_LIMIT to {feature.module}",
                        feature_files(repo, feature, order),
                        k,
                    )
                )
            continue
        if others.index(order) % 2 == 0 and helpers:  # helpers and tests alternate
            feature = helpers.pop(0)
            leaf = feature.module.rpartition(".")[2]
            specs.append(
                PatchSpec(
                    f"p{order:02d}-{leaf}-helper",
                    f"add a helper to {feature.module}",
                    feature_files(repo, feature, order),
                )
            )
        else:
            what, files = existing_test(tests, order)
            tests += 1
            specs.append(PatchSpec(f"p{order:02d}-test-{what}", f"test {what}", files))
    return specs


async def make_diff(tree: Path, spec: PatchSpec) -> str:
    """The patch of `spec` against the baseline, made as a workspace makes one."""
    new = [path for path in spec.files if not (tree / path).exists()]
    for path, text in spec.files.items():
        (tree / path).write_text(text)
    try:
        return await worktree_diff(tree, "HEAD", untracked=new)
    finally:
        git(tree, "reset", "-q", "--hard")
        git(tree, "clean", "-fdq")


async def make_patches(repo_dir: Path, specs: list[PatchSpec], scratch: Path) -> list[Patch]:
    tree = clone(repo_dir, scratch / "patches")
    return [Patch(spec, order, await make_diff(tree, spec)) for order, spec in enumerate(specs)]


# -- checks -----------------------------------------------------------------------------


def checker_for(tree: Path, python: Path, timeout_s: float) -> Checker:
    env = CheckEnvironment.resolve(tree, python=str(python))
    return Checker(env, timeout_s=timeout_s, max_concurrent=2)


async def check_with(tree: Path, checker: Checker, command: str, diffs: list[str]) -> CheckResult:
    """The check of the baseline with `diffs` applied (then taken off again)."""
    for diff in diffs:
        git(tree, "apply", "--binary", "-", stdin=diff)
    try:
        return await checker(tree, command)
    finally:
        git(tree, "reset", "-q", "--hard")
        git(tree, "clean", "-fdq")


async def time_check(tree: Path, checker: Checker, command: str, runs: int = 3) -> float:
    """One check of the baseline (the median of `runs`); it must be green."""
    durations = []
    for _ in range(runs):
        result = await check_with(tree, checker, command, [])
        if not result.passed:
            raise SystemExit(f"the baseline is red:\n{result.output[-3000:]}")
        durations.append(result.duration_s)
    return statistics.median(durations)


async def verify(tree: Path, checker: Checker, command: str, patches: list[Patch]) -> None:
    """Every patch green alone; every clash pair red together, naming its pinning test."""
    bad: list[str] = []
    for patch in patches:
        result = await check_with(tree, checker, command, [patch.diff])
        log(
            f"  {patch.spec.name:32} alone: {'green' if result.passed else 'RED'}"
            f" ({result.duration_s:.2f} s)"
        )
        if not result.passed:
            bad.append(f"{patch.spec.name} is red alone: {failed_line(result.output)}")
    for k in sorted({p.spec.pair for p in patches if p.spec.pair is not None}):
        pair = [p for p in patches if p.spec.pair == k]
        pin = next(p for p in pair if p.spec.pins)
        result = await check_with(tree, checker, command, [p.diff for p in pair])
        names = " + ".join(p.spec.name for p in pair)
        line = failed_line(result.output)
        log(f"  {names} together: {'green' if result.passed else 'red'}: {line}")
        if result.passed or Path(new_test_path(pin.order)).name not in result.output:
            bad.append(f"clash pair {names} is not red naming {new_test_path(pin.order)}")
    if bad:
        raise SystemExit("verification failed:\n" + "\n".join(bad))


# -- the queues -------------------------------------------------------------------------


async def run_queue(
    label: str, repo_dir: Path, python: Path, patches: list[Patch], args: argparse.Namespace
) -> QueueRun:
    """All patches arrive at once, in merge order, at a queue on a fresh clone."""
    command = check_command(python)
    with tempfile.TemporaryDirectory(prefix=f"bench-merge-{label}-") as tmp:
        repo = clone(repo_dir, Path(tmp) / "repo")
        base = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
        checker = checker_for(repo, python, args.check_timeout)
        settings = QueueSettings(checker, batch_check=command, config=QUEUES[label])
        results: dict[str, MergeResult] = {}
        started = time.perf_counter()
        async with MergeQueue.open(repo, run_id="r1", base=base, settings=settings) as queue:

            async def merge(patch: Patch) -> None:
                spec = patch.spec
                results[spec.name] = await queue.merge(
                    spec.name, spec.title, patch.diff, check=command, order=patch.order
                )

            try:
                with anyio.fail_after(args.queue_timeout):
                    async with anyio.create_task_group() as tg:
                        for patch in patches:
                            tg.start_soon(merge, patch)
            except TimeoutError:
                undecided = [p.spec.name for p in patches if p.spec.name not in results]
                raise SystemExit(
                    f"{label}: still undecided after {args.queue_timeout} s: {undecided}"
                ) from None
            wall = time.perf_counter() - started
            stats = queue.stats.model_copy()
        tree = git(repo, "rev-parse", "swarm/r1^{tree}")
    run = QueueRun(wall, stats, results, tree)
    run.problems = problems(run, patches)
    return run


def problems(run: QueueRun, patches: list[Patch]) -> list[str]:
    """Where the outcome is not the expected one: each pair one red and one merged, every
    other patch merged."""
    found = []
    for patch in patches:
        if patch.spec.pair is None and run.results[patch.spec.name].kind != "merged":
            found.append(f"{patch.spec.name}: {run.results[patch.spec.name].kind}")
    for k in sorted({p.spec.pair for p in patches if p.spec.pair is not None}):
        kinds = sorted(run.results[p.spec.name].kind for p in patches if p.spec.pair == k)
        if kinds != ["merged", "red"]:
            found.append(f"clash pair {k}: {kinds}")
    return found


# -- the report -------------------------------------------------------------------------


def report(runs: dict[str, QueueRun], check_s: float, args: argparse.Namespace) -> dict[str, Any]:
    batched, single = runs["batched"], runs["one_at_a_time"]
    return {
        "project": args.project,
        "patches": args.patches,
        "clashes": args.clashes,
        "check": check_command(args.venv / "bin" / "python"),
        "one_check_s": round(check_s, 3),
        "batched": batched.summary(),
        "one_at_a_time": single.summary(),
        "speedup": round(single.wall_s / batched.wall_s, 2),
        "same_merged": batched.names("merged") == single.names("merged"),
        "same_tree": batched.tree == single.tree,
    }


ROWS = ("wall_s", "checks_run", "check_s", "merged", "red", "splits", "probes", "batches")


def cell(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def print_table(out: dict[str, Any]) -> None:
    print(f"{out['project']}: {out['patches']} patches, {out['clashes']} clash pairs")
    print(f"check: {out['check']}")
    print(f"one check of the baseline: {out['one_check_s']:.2f} s (median of 3)\n")
    print(f"{'':12}{'batched':>10}{'one at a time':>15}")
    for row in ROWS:
        batched, single = (cell(out[label][row]) for label in QUEUES)
        print(f"{row:12}{batched:>10}{single:>15}")
    print(f"\nspeedup (one-at-a-time wall / batched wall): {out['speedup']:.2f}x")
    print(
        f"same patches merged: {'yes' if out['same_merged'] else 'NO'}; "
        f"same final tree (informational): {'yes' if out['same_tree'] else 'no'}"
    )
    for label in QUEUES:
        queue = out[label]
        verdict = "as expected" if queue["expected"] else "NOT as expected: "
        print(f"{label}: {verdict}{'; '.join(queue['problems'])}")
        for name, line in queue["culprits"].items():
            print(f"  red {name}: {line}")
        if set(queue["kinds"]) - {"merged", "red"}:
            print(f"  results: {queue['kinds']}")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    python = ensure_repo(args.project, args.repo_dir, args.venv, args.tool)
    command = check_command(python)
    with tempfile.TemporaryDirectory(prefix="bench-merge-real-") as tmp:
        specs = plan_patches(args.repo_dir, python, args.patches, args.clashes)
        patches = await make_patches(args.repo_dir, specs, Path(tmp))
        tree = clone(args.repo_dir, Path(tmp) / "verify")
        checker = checker_for(tree, python, args.check_timeout)
        check_s = await time_check(tree, checker, command)
        log(f"one check of the baseline: {check_s:.2f} s ({command})")
        if args.verify:
            log(f"verifying {len(patches)} patches and {args.clashes} clash pairs:")
            await verify(tree, checker, command, patches)
    runs: dict[str, QueueRun] = {}
    for label in QUEUES:
        log(f"running the {label} queue")
        runs[label] = await run_queue(label, args.repo_dir, python, patches, args)
        log(f"  {label}: {runs[label].wall_s:.1f} s")
    return report(runs, check_s, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="toolz==1.0.0", help="a toolz version on PyPI")
    parser.add_argument("--repo-dir", type=Path, help="default: /tmp/targets/toolz-VERSION")
    parser.add_argument("--venv", type=Path, help="default: /tmp/venvs/toolz-VERSION")
    parser.add_argument("--tool", type=Path, default=REAL_REPO, help="the real-repo script")
    parser.add_argument("--patches", type=int, default=24)
    parser.add_argument("--clashes", type=int, default=2)
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--check-timeout", type=float, default=300.0)
    parser.add_argument("--queue-timeout", type=float, default=1800.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    name, _, version = args.project.partition("==")
    if name != "toolz" or not version:
        parser.error("--project must be toolz==VERSION (the patches are toolz's)")
    args.repo_dir = (args.repo_dir or Path(f"/tmp/targets/toolz-{version}")).resolve()
    args.venv = (args.venv or Path(f"/tmp/venvs/toolz-{version}")).absolute()
    out = anyio.run(bench, args)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)


if __name__ == "__main__":
    main()
