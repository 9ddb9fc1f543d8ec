"""`solve()` on real repositories: src layouts, ignored files, red baselines, artifacts,
scoped checks, the repository's own venv, hooks, a dirty checkout, empty patches, the
final verification and check reuse. Real git repositories, real subprocess checks,
scripted models."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from swarm._analysis.loader import load_trace
from swarm._tracing import semconv as sc
from swarm.errors import ProviderError
from swarm.messages import ChatRequest
from swarm.run._report import RunReport
from swarm.run._solve import SolveRequest, solve
from swarm.testing import FunctionModel, Scripted, ScriptedModel, ScriptedSource, call
from tests.test_solve import red_to_the_end

PY = sys.executable
PYTEST = "python -m pytest -q -p no:cacheprovider"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository at `root/repo` with `files` committed on `main`."""
    repo = root / "repo"
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    return repo


def write_task(tmp_path: Path, front: str) -> Path:
    path = tmp_path / "task.md"
    path.write_text(f"---\n{textwrap.dedent(front).strip()}\n---\n# Tidy up\n\nDo it.\n")
    return path


def write_plan(tmp_path: Path, subtasks: Sequence[dict[str, Any]]) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"subtasks": list(subtasks)}))
    return path


def subtask(id: str, files: list[str], deps: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "id": id,
        "title": f"do {id}",
        "instructions": f"do {id}",
        "files": files,
        "depends_on": list(deps),
    }


def edit(path: str, old: str, new: str) -> Scripted:
    return call("edit_file", path=path, old=old, new=new)


def done(summary: str = "done") -> Scripted:
    return call("finish", summary=summary)


def spy(tmp_path: Path) -> Path:
    """Where a test's checks log what they saw: outside the worktree, so writable in the
    sandbox only because the run's config says so (`[sandbox] writable`)."""
    where = tmp_path / "spy"
    where.mkdir(exist_ok=True)
    return where


async def run(
    tmp_path: Path, repo: Path, task: Path, plan: Path, scripts: ScriptedSource
) -> RunReport:
    config = tmp_path / "swarm.toml"
    config.write_text(f'[sandbox]\nwritable = ["{spy(tmp_path)}"]\n')
    req = SolveRequest(
        task_path=str(task),
        repo=str(repo),
        plan_path=str(plan),
        config_path=str(config),
        state_dir=str(tmp_path / "state"),
        traces_dir=str(tmp_path / "traces"),
        quiet=True,
        max_agents=2,
        keep_branch=True,  # these tests read the branch of runs that fail, too
    )
    return await solve(req, source=scripts)


def tree(repo: Path, ref: str) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", ref).splitlines()


def states(report: RunReport) -> dict[str, str]:
    return {s.id: s.status for s in report.subtasks}


def assert_untouched(repo: Path) -> None:
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "status", "--porcelain") == ""
    assert len(git(repo, "worktree", "list").splitlines()) == 1


# -- 1. src layout: the worktree's code is the one tested ------------------------------

SRC_PKG = {
    "src/pkg/__init__.py": "",
    "src/pkg/mod.py": "def value():\n    return 1\n",
    "tests/test_mod.py": """\
        from pkg.mod import value


        def test_value():
            assert value() == 1
        """,
}


async def test_src_layout_checks_the_worktrees_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path, SRC_PKG)
    # as after `pip install -e .`: the checkout's own src/ is importable too
    monkeypatch.setenv("PYTHONPATH", str(repo / "src"))
    task = write_task(tmp_path, f"check: {PYTEST}\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["src/pkg/mod.py", "tests/test_mod.py"])])
    new_test = "\n\ndef test_double():\n    from pkg.mod import double\n    assert double(2) == 4\n"
    scripts = ScriptedSource(
        {
            "coder:s1": [
                edit(
                    "src/pkg/mod.py",
                    "return 1\n",
                    "return 1\n\n\ndef double(x):\n    return 2 * x\n",
                ),
                edit("tests/test_mod.py", "== 1\n", "== 1\n" + new_test),
                done(),
            ]
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    # against the checkout's pkg (no `double`) the new test fails: no fixer is scripted
    assert report.status == "done", report
    assert states(report) == {"s1": "merged"} and report.final_check == "passed"
    assert "def double" in git(repo, "show", f"{report.branch}:src/pkg/mod.py")
    assert_untouched(repo)


# -- 2. a gitignored file the package imports: `include:` -------------------------------

VERSIONED = {
    ".gitignore": "src/pkg/_version.py\n",
    "src/pkg/__init__.py": "from pkg._version import __version__\n",
    "src/pkg/mod.py": "def value():\n    return 1\n",
    "tests/test_mod.py": (
        "import pkg\nfrom pkg.mod import value\n\n\n"
        "def test_value():\n    assert value() == 1 and pkg.__version__ == '1.0'\n"
    ),
}


def versioned_repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, VERSIONED)
    (repo / "src/pkg/_version.py").write_text("__version__ = '1.0'\n")
    return repo


async def test_a_plain_check_without_the_ignored_file_stops_at_the_baseline(
    tmp_path: Path,
) -> None:
    repo = versioned_repo(tmp_path)
    task = write_task(tmp_path, f"check: python -c 'import pkg'\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["src/pkg/mod.py"])])
    report = await run(tmp_path, repo, task, plan, ScriptedSource({}))
    assert report.status == "stopped" and report.stop_reason == "baseline", report
    assert "the check fails before any change" in (report.error or "")
    assert report.calls == 0


async def test_a_suite_that_cannot_import_the_package_stops_at_the_baseline(
    tmp_path: Path,
) -> None:
    repo = versioned_repo(tmp_path)
    task = write_task(tmp_path, f"check: {PYTEST}\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["src/pkg/mod.py"])])
    scripts = ScriptedSource({"coder:s1": [edit("src/pkg/mod.py", "return 1", "return 2"), done()]})
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "stopped" and report.stop_reason == "baseline", report
    assert "the check fails before any change" in (report.error or "")
    assert report.calls == 0


async def test_include_brings_the_ignored_file_and_never_commits_it(tmp_path: Path) -> None:
    repo = versioned_repo(tmp_path)
    task = write_task(tmp_path, f"check: {PYTEST}\npython: {PY}\ninclude: [src/pkg/_version.py]")
    plan = write_plan(tmp_path, [subtask("s1", ["src/pkg/mod.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [edit("src/pkg/mod.py", "def value():", "def value() -> int:"), done()]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert states(report) == {"s1": "merged"}
    assert report.baseline == {PYTEST: "passed"}
    assert "src/pkg/_version.py" not in tree(repo, str(report.branch))
    assert "_version" not in Path(str(report.patch)).read_text()
    assert (repo / "src/pkg/_version.py").read_text() == "__version__ = '1.0'\n"
    assert_untouched(repo)


# -- 3. a red baseline --------------------------------------------------------------------

RED = {
    "a.py": "def one():\n    return 1\n",
    "tests/test_a.py": (
        "from a import one\n\n\ndef test_one():\n    assert one() == 1\n\n\n"
        "def test_broken():\n    assert False, 'broken before swarm'\n"
    ),
}


async def test_a_red_baseline_is_recorded_and_the_run_is_done(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, RED)
    task = write_task(tmp_path, f"check: {PYTEST}\npython: {PY}\nbaseline: record")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert states(report) == {"s1": "merged"}
    assert report.baseline == {PYTEST: "failed (known failures: tests/test_a.py::test_broken)"}
    assert report.final_check == "passed"
    assert "def one() -> int" in git(repo, "show", f"{report.branch}:a.py")


async def test_a_new_failure_beside_the_known_one_still_calls_a_fixer(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, RED)
    task = write_task(tmp_path, f"check: {PYTEST}\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "return 1", "return 2"), done()],
            "fixer:s1:1": [edit("a.py", "return 2", "return 1"), done()],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert [(s.status, s.fix_rounds) for s in report.subtasks] == [("empty", 1)]
    fixer = scripts.models["fixer:s1:1"]
    assert isinstance(fixer, ScriptedModel)
    prompt = fixer.requests[0].messages[-1].content or ""
    assert "tests/test_a.py::test_one" in prompt and "a.py" in prompt, prompt


async def test_baseline_stop_stops_before_any_model_call(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, RED)
    task = write_task(tmp_path, f"check: {PYTEST}\npython: {PY}\nbaseline: stop")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource({"coder:s1": [done()]})
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "stopped" and report.stop_reason == "baseline", report
    assert report.calls == 0 and scripts.models == {}
    assert PYTEST in (report.error or "") and "baseline: stop" in (report.error or "")
    assert_untouched(repo)


async def test_a_check_red_without_pytest_lines_stops_the_run(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"a.py": "X = 1\n"})
    task = write_task(tmp_path, "check: sh -c 'exit 1'")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource({"coder:s1": [done()]})
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "stopped" and report.stop_reason == "baseline", report
    assert report.calls == 0 and scripts.models == {}
    assert "sh -c 'exit 1'" in (report.error or "") and "FAILED" in (report.error or "")


# -- 4. check artifacts and .swarmignore ----------------------------------------------------

ARTIFACTS = {
    "a.py": "def one():\n    return 1\n",
    "b.py": "def two():\n    return 2\n",
    "stats.txt": "tracked stats\n",
    ".swarmignore": "stats.txt\n",
    "artifacts.py": """\
        import os, time
        from pathlib import Path
        Path("coverage").mkdir(exist_ok=True)
        Path("coverage/index.html").write_text(f"<p>{time.time()}</p>")
        Path(".nyc_output").mkdir(exist_ok=True)
        Path(".nyc_output/x.json").write_text("{}")
        Path("report.lcov").write_text(f"TN:{os.getpid()}")
        Path("stats.txt").write_text(f"rewritten by the check {time.time()}")
        """,
    "check.py": "import artifacts, a, b\nassert a.one() > 0 and b.two() > 0\n",
    "full.py": "import artifacts, a, b\nassert b.two() - a.one() == 1, 'disagree'\n",
}


async def test_check_artifacts_and_swarmignored_files_never_reach_the_branch(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, ARTIFACTS)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"])])
    scripts = ScriptedSource(
        {
            # red first: the check runs (and writes) before the fixer's patch is taken
            "coder:s1": [edit("a.py", "return 1", "return 0"), done()],
            "fixer:s1:1": [
                edit("a.py", "return 0", "return 1"),
                edit("a.py", "def one():", "def one() -> int:"),
                done(),
            ],
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert states(report) == {"s1": "merged", "s2": "merged"}
    assert [s.fix_rounds for s in report.subtasks] == [1, 0]
    files = tree(repo, str(report.branch))
    assert sorted(files) == sorted(ARTIFACTS), files
    assert git(repo, "show", f"{report.branch}:stats.txt") == "tracked stats"
    patch = Path(str(report.patch)).read_text()
    for name in ("coverage", ".nyc_output", "report.lcov", "stats.txt"):
        assert name not in patch
    assert "def two() -> int" in patch
    assert_untouched(repo)


async def test_final_verification_fixes_leave_artifacts_and_swarmignored_files_out(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, ARTIFACTS)
    task = write_task(tmp_path, f"check: python check.py\naccept: python full.py\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "return 1", "return 5"), done()],
            "fixer:final:1": [edit("b.py", "return 2", "return 6"), done("fixed")],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done" and report.final_check == "passed", report
    log = git(repo, "log", "--format=%s", f"main..{report.branch}")
    assert "swarm: final verification fixes" in log
    assert sorted(tree(repo, str(report.branch))) == sorted(ARTIFACTS)
    assert git(repo, "show", f"{report.branch}:b.py") == "def two():\n    return 6"
    assert git(repo, "show", f"{report.branch}:stats.txt") == "tracked stats"


# -- 5. {files}: scoped subtask checks, the full suite at the end ---------------------------

SCOPED = {
    "a.py": "def one():\n    return 1\n",
    "b.py": "def two():\n    return 2\n",
    "tests/test_a.py": "from a import one\n\n\ndef test_one():\n    assert one() == 1\n",
    "tests/test_b.py": "from b import two\n\n\ndef test_two():\n    assert two() == 2\n",
    "conftest.py": """\
        import json, os, sys
        with open(os.environ["ARGLOG"], "a") as f:
            f.write(json.dumps(sys.argv[1:]) + "\\n")
        """,
}


async def test_subtask_checks_get_their_files_and_accept_the_whole_suite(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, SCOPED)
    log = spy(tmp_path) / "argv.log"
    task = write_task(
        tmp_path,
        f"""\
        check: {PYTEST} {{files}}
        accept: {PYTEST}
        python: {PY}
        env: {{ARGLOG: {log}}}
        merge: {{batch_size: {{max: 1}}}}
        """,
    )
    # batches of one: a batch of both (they finish together on a loaded machine) would
    # rightly get the whole check, and this test is about each patch's own
    files = {"s1": ["a.py", "tests/test_a.py"], "s2": ["b.py", "tests/test_b.py"]}
    plan = write_plan(tmp_path, [subtask(k, v) for k, v in files.items()])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert states(report) == {"s1": "merged", "s2": "merged"}
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    opts = PYTEST.split()[3:]
    everything = opts
    # the baseline (check over everything == accept: once), the final accept
    assert runs[0] == everything and runs[-1] == everything, runs
    middle = runs[1:-1]
    assert everything not in middle, runs
    assert {tuple(r) for r in middle} == {tuple(opts + f) for f in files.values()}, runs


# -- 6. the repository's own venv, or the task's interpreter -----------------------------

CHECK_DEP = """\
    import os, sys
    import tinydep, a
    with open(os.environ["PYLOG"], "a") as f:
        f.write(sys.prefix + "\\n")
    assert tinydep.VALUE == 42 and a.one() == 1
    """


def make_venv(path: Path) -> Path:
    """A venv (no pip) whose site-packages holds `tinydep`, which swarm's venv lacks."""
    subprocess.run([PY, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "tinydep.py").write_text("VALUE = 42\n")
    return python


def venv_repo(tmp_path: Path) -> Path:
    files = {".gitignore": ".venv/\n", "a.py": "def one():\n    return 1\n", "check.py": CHECK_DEP}
    repo = make_repo(tmp_path, files)
    make_venv(repo / ".venv")
    return repo


async def test_checks_run_with_the_repositorys_own_venv(tmp_path: Path) -> None:
    assert importlib.util.find_spec("tinydep") is None  # swarm's venv lacks it
    repo = venv_repo(tmp_path)
    log = spy(tmp_path) / "prefix.log"
    task = write_task(tmp_path, f"check: python check.py\nenv: {{PYLOG: {log}}}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert any(".venv" in w for w in report.warnings), report.warnings
    prefixes = set(log.read_text().split())
    assert prefixes == {str(repo / ".venv")}, prefixes
    assert ".venv" not in " ".join(tree(repo, str(report.branch)))


async def test_agents_commands_run_with_the_repositorys_venv_and_no_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CEREBRAS_API_KEY", SECRET)
    repo = venv_repo(tmp_path)
    log = spy(tmp_path) / "prefix.log"
    task = write_task(tmp_path, f"check: python check.py\nenv: {{PYLOG: {log}}}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    probe = "python -c 'import sys, tinydep; print(sys.prefix)'; env"
    scripts = ScriptedSource(
        {
            "coder:s1": [call("run", command=probe), call("run_tests"), done()],
            "coder:s1:unchanged": [done("only looked: no change needed")],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    coder = scripts.models["coder:s1"]
    assert isinstance(coder, ScriptedModel)
    ran, tested = (coder.requests[n].messages[-1].content or "" for n in (1, 2))
    assert str(repo / ".venv") in ran and SECRET not in ran, ran
    assert tested.startswith("PASSED"), tested


async def test_the_tasks_python_wins_over_the_repositorys_venv(tmp_path: Path) -> None:
    repo = venv_repo(tmp_path)
    other = make_venv(tmp_path / "other")
    log = spy(tmp_path) / "prefix.log"
    task = write_task(tmp_path, f"check: python check.py\npython: {other}\nenv: {{PYLOG: {log}}}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert any(str(other) in w and "task" in w for w in report.warnings), report.warnings
    assert set(log.read_text().split()) == {str(tmp_path / "other")}


# -- setup and included directories ---------------------------------------------------

SETUP = {
    ".gitignore": "data/\n",
    "a.py": "def one():\n    return 1\n",
    "gen.py": """\
        import os
        from pathlib import Path
        Path("generated.py").write_text("GENERATED = True\\n")
        with open(os.environ["SETUPLOG"], "a") as f:
            f.write(os.getcwd() + "\\n")
        """,
    "check.py": """\
        from pathlib import Path
        import a, generated
        assert generated.GENERATED and Path("data/values.txt").read_text() == "42\\n"
        """,
}


async def test_setup_runs_in_every_worktree_and_included_dirs_are_linked(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, SETUP)
    (repo / "data").mkdir()
    (repo / "data" / "values.txt").write_text("42\n")
    log = spy(tmp_path) / "setup.log"
    task = write_task(
        tmp_path,
        f"""\
        check: python check.py
        python: {PY}
        setup: python gen.py
        include: [data]
        env: {{SETUPLOG: {log}}}
        """,
    )
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["a.py"], ["s1"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s2": [edit("a.py", "    return 1", '    """One."""\n    return 1'), done()],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert states(report) == {"s1": "merged", "s2": "merged"}
    # every tree a check runs in: the integration branch's, the merge queue's check trees
    # (made up front), and a workspace per subtask — s2's is s1's worktree reset, set up
    # again for it
    prepared = sorted(Path(p).name for p in log.read_text().split())
    trees = [p for p in prepared if p.startswith("_check-")]
    workspaces = [p for p in prepared if p.startswith("w")]
    assert len(workspaces) == 2 and workspaces[0] == workspaces[1]
    assert trees and prepared == sorted(["_integration", *workspaces, *trees])
    assert sorted(tree(repo, str(report.branch))) == sorted(SETUP)
    patch = Path(str(report.patch)).read_text()
    assert "generated" not in patch and "data" not in patch
    assert_untouched(repo)


# -- 7. hooks ------------------------------------------------------------------------------

SECRET = "sk-secret-do-not-leak-1234"


def hooked_repo(tmp_path: Path) -> tuple[Path, Path]:
    repo = make_repo(tmp_path, {"a.py": "def one():\n    return 1\n"})
    markers = spy(tmp_path)  # hooks run in the sandbox: this is writable there
    for hook in ("post-checkout", "pre-commit"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\nenv > '{markers}/{hook}'\n")
        path.chmod(0o755)
    return repo, markers


@pytest.mark.parametrize("hooks", ["skip", "run"])
async def test_hooks_run_only_when_asked_and_never_see_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hooks: str
) -> None:
    monkeypatch.setenv("CEREBRAS_API_KEY", SECRET)
    repo, markers = hooked_repo(tmp_path)
    task = write_task(tmp_path, f"check: python -c 'import a'\npython: {PY}\nhooks: {hooks}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert any("hooks" in w for w in report.warnings)
    assert not (markers / "post-checkout").exists()  # worktrees never run checkout hooks
    if hooks == "skip":
        assert not (markers / "pre-commit").exists()
    else:
        env = (markers / "pre-commit").read_text()
        assert "PATH=" in env and SECRET not in env and "CEREBRAS_API_KEY" not in env


# -- 8. a dirty checkout -----------------------------------------------------------------


async def test_uncommitted_changes_are_left_alone_and_reported(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"a.py": "def one():\n    return 1\n", "b.py": "X = 2\n"})
    (repo / "b.py").write_text("X = 'user edit'\n")
    (repo / "notes.txt").write_text("mine\n")
    head = git(repo, "rev-parse", "HEAD")
    task = write_task(tmp_path, f"check: python -c 'import a, b'\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert any("uncommitted changes" in w for w in report.warnings), report.warnings
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "diff", "--name-only") == "b.py"  # the edit, not staged
    assert git(repo, "diff", "--cached", "--name-only") == ""
    assert git(repo, "ls-files", "--others", "--exclude-standard") == "notes.txt"
    assert (repo / "b.py").read_text() == "X = 'user edit'\n"
    assert (repo / "a.py").read_text() == "def one():\n    return 1\n"
    assert git(repo, "show", f"{report.branch}:b.py") == "X = 2"


# -- 9. empty patches, overlapping scopes ------------------------------------------------

TWO = {"a.py": "def one():\n    return 1\n", "check.py": "import a\nassert a.one() == 1\n"}


async def test_a_coder_that_changes_nothing_is_empty_and_the_run_done(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, TWO)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [done("nothing to do")], "coder:s1:unchanged": [done("none needed")]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert states(report) == {"s1": "empty"}
    unchanged = scripts.models["coder:s1:unchanged"]
    assert isinstance(unchanged, ScriptedModel)  # asked once to make the change
    assert "Your worktree has no changes" in (unchanged.requests[0].messages[-1].content or "")
    assert "nothing changed: every subtask ended with an empty patch" in report.warnings
    # nothing merged: no branch is left behind (a resumed run would make it again)
    assert report.branch is None
    assert "swarm/" not in git(repo, "branch", "--list")


async def test_a_coder_stuck_after_changing_nothing_fails_its_subtask(tmp_path: Path) -> None:
    """Asked to make the change, it loops: the subtask failed, never "empty"."""
    repo = make_repo(tmp_path, TWO)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    looping = ["Please provide the exact text to replace."] * 3
    scripts = ScriptedSource(
        {
            "coder:s1": [done("nothing to do")],
            "coder:s1:unchanged": [*looping],
            "coder:s1:unchanged:up": [*looping],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert states(report) == {"s1": "failed"}
    assert report.status == "failed", report
    assert "coder:s1:unchanged" in report.stuck


THREE = {
    **TWO,
    "b.py": "def two():\n    return 2\n\n\ndef three():\n    return 3\n",
    "c.py": "def four():\n    return 4\n",
}


async def test_a_definition_removed_unasked_is_sent_back_once(tmp_path: Path) -> None:
    """A coder that drops a function nobody asked it to drop is asked once to restore it;
    one that restores it merges clean, one that does not is merged with a warning."""
    repo = make_repo(tmp_path, THREE)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["b.py"]), subtask("s2", ["c.py"])])
    dropped = "def two():\n    return 2\n\n\n"
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("b.py", dropped, ""), edit("b.py", "3", "33"), done()],
            "coder:s1:removed": [edit("b.py", "def three", dropped + "def three"), done()],
            "coder:s2": [edit("c.py", "def four():\n    return 4\n", "FOUR = 4\n"), done()],
            "coder:s2:removed": [done("not needed")],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert states(report) == {"s1": "merged", "s2": "merged"}, report
    asked = scripts.models["coder:s1:removed"]
    assert isinstance(asked, ScriptedModel)
    assert "Your change removes two (b.py)" in (asked.requests[0].messages[-1].content or "")
    warnings = {s.id: s.warning for s in report.subtasks}
    assert warnings == {"s1": None, "s2": "removes four (c.py); no instruction names it"}
    assert "def two" in git(repo, "show", f"{report.branch}:b.py")


REPORT = {
    **TWO,
    "r.py": (
        "def summary(items):\n"
        '    """One line per item, then the total."""\n'
        "    lines = [f\"{i['name']}: {i['qty']}\" for i in items]\n"
        "    lines.append(f\"total: {sum(i['qty'] for i in items)}\")\n"
        '    return "\\n".join(lines)\n'
    ),
}


async def sent_back(
    tmp_path: Path, repo: Path, task: Path, plan: Path, scripts: ScriptedSource, rule: str
) -> tuple[RunReport, str]:
    """The run of one subtask whose coder a rule (`coder:s1:<rule>`) sent back once: it
    merged; the report and what the coder was told."""
    report = await run(tmp_path, repo, task, plan, scripts)
    assert states(report) == {"s1": "merged"}, report
    told = scripts.models[f"coder:s1:{rule}"]
    assert isinstance(told, ScriptedModel)
    return report, told.requests[0].messages[-1].content or ""


@pytest.mark.parametrize("changes_the_original", [True, False])
async def test_a_near_copy_beside_an_unchanged_original_is_sent_back_once(
    tmp_path: Path, changes_the_original: bool
) -> None:
    """As the 1.5B model did with "Add type hints to report.py": a hinted copy of
    `summary` beside it, `summary` unchanged, and a green check. The coder is asked once
    to change the original; one that does merges clean, one that does not is merged with
    a warning naming the copy."""
    repo = make_repo(tmp_path, REPORT)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    hints = {**subtask("s1", ["r.py"]), "title": "Add type hints to r.py"}
    plan = write_plan(tmp_path, [hints])
    source = REPORT["r.py"]
    copy = source.replace("def summary(items):", "def summary_typed(items: list) -> str:")
    hinted = "def summary(items: list) -> str:"
    scripts = ScriptedSource(
        {
            "coder:s1": [call("write_file", path="r.py", content=f"{source}\n\n{copy}"), done()],
            "coder:s1:copied": (
                [call("write_file", path="r.py", content=copy.replace("summary_typed", "summary"))]
                if changes_the_original
                else []
            )
            + [done("the new one is better")],
        }
    )
    report, said = await sent_back(tmp_path, repo, task, plan, scripts, "copied")
    assert "`summary_typed` in r.py, a near copy of `summary`, which it leaves as it was" in said
    merged = git(repo, "show", f"{report.branch}:r.py")
    warning = report.subtasks[0].warning
    if changes_the_original:
        assert hinted in merged and "summary_typed" not in merged
        assert warning is None
    else:
        assert warning == (
            "adds summary_typed (a near copy of summary, r.py); the original is unchanged"
        )


@pytest.mark.parametrize("moves_it", [True, False])
async def test_a_test_written_where_pytest_never_collects_it_is_sent_back_once(
    tmp_path: Path, moves_it: bool
) -> None:
    """As the 1.5B model did with "Add low_stock to stock.py and test it": the test at the
    bottom of stock.py, which pytest never collects, and a green check. The coder is asked
    once to move it into a test file; one that does not is merged with a warning."""
    repo = make_repo(tmp_path, {**TWO, "tests/test_a.py": "import a\n"})
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    plan = write_plan(tmp_path, [{**subtask("s1", ["a.py"]), "title": "Add two() and test it"}])
    two = "\n\ndef two():\n    return 2\n"
    test = "\n\ndef test_two():\n    assert two() == 2\n"
    scripts = ScriptedSource(
        {
            "coder:s1": [call("write_file", path="a.py", content=TWO["a.py"] + two + test), done()],
            "coder:s1:strays": (
                [
                    call("write_file", path="a.py", content=TWO["a.py"] + two),
                    call("write_file", path="tests/test_a.py", content=f"from a import two{test}"),
                ]
                if moves_it
                else []
            )
            + [done("it is fine there")],
        }
    )
    report, said = await sent_back(tmp_path, repo, task, plan, scripts, "strays")
    assert said.startswith("Your change adds test_two in a.py. The tests never run it: ")
    assert "into tests/test_a.py, delete it where it is now" in said
    warning = report.subtasks[0].warning
    if moves_it:
        assert "def test_two" in git(repo, "show", f"{report.branch}:tests/test_a.py")
        assert "test_two" not in git(repo, "show", f"{report.branch}:a.py")
        assert warning is None
    else:
        assert warning == "adds test_two in a.py, which the tests never run"


@pytest.mark.parametrize("does_it", [True, False])
async def test_a_file_the_subtask_names_and_its_change_leaves_alone_is_sent_back_once(
    tmp_path: Path, does_it: bool
) -> None:
    """As the 1.5B model did with "Add type hints to every public function in pricing.py,
    stock.py and report.py": one file hinted, `finish`, and a green check. The coder is
    asked once to do the others; one that does not is merged with a warning naming them."""
    repo = make_repo(tmp_path, {**TWO, "b.py": "def two():\n    return 2\n"})
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    hints = {**subtask("s1", ["a.py", "b.py"]), "title": "Add type hints to a.py and b.py"}
    plan = write_plan(tmp_path, [hints])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s1:untouched": (
                [edit("b.py", "def two():", "def two() -> int:")] if does_it else []
            )
            + [done("b.py needs nothing")],
        }
    )
    report, said = await sent_back(tmp_path, repo, task, plan, scripts, "untouched")
    assert said.startswith("Your subtask names b.py, and your change leaves it as it was. ")
    warning = report.subtasks[0].warning
    if does_it:
        assert "def two() -> int:" in git(repo, "show", f"{report.branch}:b.py")
        assert warning is None
    else:
        assert warning == "leaves b.py as it was; the subtask names it"


async def test_a_name_the_subtask_asks_for_and_no_file_has_is_sent_back_once(
    tmp_path: Path,
) -> None:
    """As the 1.5B model did with "Add test_clamp": the check passed without the name
    asked for. The coder is asked once to add it; one that does merges clean, one that
    does not is merged with a warning saying what is missing."""
    repo = make_repo(tmp_path, THREE)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    five = {**subtask("s1", ["b.py"]), "title": "Add five() and seven() to b.py"}
    six = {**subtask("s2", ["c.py"]), "instructions": "Add `six` to c.py; run `pytest`."}
    plan = write_plan(tmp_path, [five, six])
    fiv_seven = "def fiv():\n    return 5\n\n\ndef seven():\n    return 7\n\n\ndef three"
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("b.py", "def three", fiv_seven), done()],  # seven is there
            "coder:s1:missing": [edit("b.py", "def fiv", "def five"), done()],
            "coder:s2": [edit("c.py", "return 4", "return 2 + 2"), done()],
            "coder:s2:missing": [done("it is there")],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert states(report) == {"s1": "merged", "s2": "merged"}, report
    asked = scripts.models["coder:s1:missing"]
    assert isinstance(asked, ScriptedModel)
    told = asked.requests[0].messages[-1].content or ""
    assert told.startswith("Your subtask asks for `five`, but no file in your worktree has it")
    warnings = {s.id: s.warning for s in report.subtasks}
    assert warnings == {"s1": None, "s2": "asked for six; no file has it"}
    assert "def five" in git(repo, "show", f"{report.branch}:b.py")
    said = Path(str(report.report)).read_text()  # at the top, beside the status
    assert "\n- warning: s2: asked for six; no file has it\n" in said.split("## Subtasks")[0]


async def test_a_name_a_fixer_took_out_is_asked_for_once_the_check_is_green(
    tmp_path: Path,
) -> None:
    """As the 1.5B model did with "Add test_clamp": its fixer made the check green by
    writing the file without the name asked for, and swarm said `done`. The green change
    is looked at again: a coder is asked for the name in a fresh conversation, and what
    it adds is checked before it merges."""
    repo = make_repo(tmp_path, THREE)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    five = {**subtask("s1", ["a.py", "b.py"]), "title": "Add five() to b.py"}
    plan = write_plan(tmp_path, [five])
    with_five = "def five():\n    return 5\n\n\ndef three"
    scripts = ScriptedSource(
        {
            "coder:s1": [
                edit("b.py", "def three", with_five),
                edit("a.py", "return 1", "return 2"),  # and the check goes red
                done(),
            ],
            "fixer:s1:1": [
                call("write_file", path="b.py", content=THREE["b.py"]),
                edit("a.py", "return 2", "return 1"),
                done("green"),
            ],
            "coder:s1:missing": [edit("b.py", "def three", with_five), done()],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert states(report) == {"s1": "merged"}, report
    (s1,) = report.subtasks
    assert (s1.fix_rounds, s1.warning) == (1, None)
    asked = scripts.models["coder:s1:missing"]
    assert isinstance(asked, ScriptedModel)
    first = asked.requests[0].messages
    assert [m.role for m in first] == ["system", "user"]  # not the coder's conversation
    assert "Your subtask asks for `five`" in (first[-1].content or "")
    assert "def five" in git(repo, "show", f"{report.branch}:b.py")


async def test_a_run_stopped_by_an_error_says_its_cause_on_its_root_span(tmp_path: Path) -> None:
    """The planner's provider gives up: the report and the workflow span (what Phoenix
    shows) both say why, never "ExceptionGroup: unhandled errors in a TaskGroup"."""
    repo = make_repo(tmp_path, TWO)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")

    def gives_up(request: ChatRequest) -> Scripted:
        raise ProviderError("local/m: gave up: no first token after 116 s")

    req = SolveRequest(
        task_path=str(task),
        repo=str(repo),
        state_dir=str(tmp_path / "state"),
        traces_dir=str(tmp_path / "traces"),
        quiet=True,
    )
    with pytest.raises(BaseExceptionGroup):  # solve() raises; the CLI prints the report
        await solve(req, source=ScriptedSource({}, default=FunctionModel(gives_up)))
    (report_file,) = (tmp_path / "state" / "runs").glob("*/report.json")
    report = RunReport.model_validate_json(report_file.read_text())
    assert report.status == "failed" and "gave up: no first token" in (report.error or "")
    trace = load_trace(Path(str(report.trace)))
    root = trace.root
    assert trace.op[root] == sc.OP_WORKFLOW
    assert trace.span_json(root)["status"]["message"] == report.error


async def test_overlapping_scopes_order_the_work_but_a_failure_skips_nothing(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, TWO)
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["a.py"])])
    scripts = ScriptedSource(
        {
            **red_to_the_end("s1", edit("a.py", "return 1", "return 5")),
            "coder:s2": [edit("a.py", "def one():", "def one() -> int:"), done()],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert states(report) == {"s1": "failed", "s2": "merged"}, report
    assert "def one() -> int" in git(repo, "show", f"{report.branch}:a.py")
    assert "return 1" in git(repo, "show", f"{report.branch}:a.py")


# -- 10. nothing red is committed ----------------------------------------------------------

SPLIT = {
    "a.py": "def one():\n    return 1\n",
    "b.py": "def two():\n    return 2\n",
    "quick.py": "import a\nassert a.one() > 0\n",
    "full.py": "import a, b\nassert b.two() - a.one() == 1, 'one and two disagree'\n",
}


async def test_final_fixes_that_stay_red_are_dropped(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, SPLIT)
    task = write_task(tmp_path, f"check: python quick.py\naccept: python full.py\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "return 1", "return 5"), done()],
            "fixer:final:1": [edit("b.py", "def two():", "def two() -> int:"), done("tried")],
            "fixer:final:2": [done("could not")],
            "fixer:final:3": [done("could not")],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.final_check == "failed", report
    assert report.status != "done"
    assert states(report) == {"s1": "merged"}
    log = git(repo, "log", "--format=%s", f"main..{report.branch}")
    assert "final verification" not in log and log.count("\n") == 0, log
    assert git(repo, "show", f"{report.branch}:b.py") == "def two():\n    return 2"
    assert "return 5" in git(repo, "show", f"{report.branch}:a.py")
    assert_untouched(repo)


# -- 11. a tree checked once -------------------------------------------------------------

COUNTED = {
    "a.py": "def one():\n    return 1\n",
    "b.py": "def two():\n    return 2\n",
    "check.py": """\
        import os
        import a, b
        with open(os.environ["CHECKLOG"], "a") as f:
            f.write(os.getcwd() + "\\n")
        assert a.one() == 1 and b.two() == 2
        """,
}


@pytest.mark.parametrize("chained", [True, False], ids=["chained", "parallel"])
async def test_the_merge_queue_reuses_the_coordinators_check(tmp_path: Path, chained: bool) -> None:
    repo = make_repo(tmp_path, COUNTED)
    log = spy(tmp_path) / "checks.log"
    task = write_task(tmp_path, f"check: python check.py\npython: {PY}\nenv: {{CHECKLOG: {log}}}")
    deps = ["s1"] if chained else []
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"]), subtask("s2", ["b.py"], deps)])
    scripts = ScriptedSource(
        {
            "coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()],
            "coder:s2": [edit("b.py", "def two():", "def two() -> int:"), done()],
        }
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    places = [Path(p).name for p in log.read_text().splitlines()]
    # the baseline on the integration branch, s1 and s2 in their workspaces; in parallel,
    # the second merge is on a moved head: checked again, in a check tree. The final
    # check is the landed head's last batch check, reused: the same command, the same tree
    assert len(places) == (3 if chained else 4), places
    assert places.count("_integration") == 1, places
    assert len([p for p in places if p.startswith("_check-")]) == (0 if chained else 1)


# -- found in a trial on real PyPI projects (humanize, toolz, boltons) ---------------------


async def test_coloured_pytest_output_still_names_the_known_failures(tmp_path: Path) -> None:
    """humanize sets `addopts = --color=yes`: FAILED lines come wrapped in colour codes."""
    repo = make_repo(tmp_path, {**RED, "pytest.ini": "[pytest]\naddopts = --color=yes\n"})
    task = write_task(tmp_path, f"check: {PYTEST}\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    scripts = ScriptedSource(
        {"coder:s1": [edit("a.py", "def one():", "def one() -> int:"), done()]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert report.baseline == {PYTEST: "failed (known failures: tests/test_a.py::test_broken)"}


async def test_a_subtask_whose_files_have_no_tests_is_checked_with_the_whole_suite(
    tmp_path: Path,
) -> None:
    """`pytest {files}` on README.md alone exits 4 (not found) or 5 (no tests ran)."""
    files = {**RED, "README.md": "# a\n"}
    files["tests/test_a.py"] = "from a import one\n\n\ndef test_one():\n    assert one() == 1\n"
    repo = make_repo(tmp_path, files)
    task = write_task(tmp_path, f"check: {PYTEST} {{files}}\npython: {PY}")
    plan = write_plan(tmp_path, [subtask("docs", ["README.md"])])
    scripts = ScriptedSource(
        {"coder:docs": [edit("README.md", "# a", "# a\n\nOne module."), done()]}
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert states(report) == {"docs": "merged"}
    assert report.subtasks[0].fix_rounds == 0


# -- 12. test impact: the worktree runs the tests its change reaches, the queue them all --

IMPACTED = {
    "a.py": "def one():\n    return 1\n",
    "b.py": "def two():\n    return 2\n",
    "tests/test_a.py": "from a import one\n\n\ndef test_one():\n    assert one() == 1\n",
    "tests/test_b.py": "from b import two\n\n\ndef test_two():\n    assert two() == 2\n",
    "conftest.py": """\
        import json, os, sys
        with open(os.environ["ARGLOG"], "a") as f:
            f.write(json.dumps([os.path.basename(os.getcwd()), *sys.argv[1:]]) + "\\n")
        """,
}


def impact_run(
    tmp_path: Path, coder: list[Scripted], extra: str = ""
) -> tuple[Path, Path, Path, ScriptedSource]:
    repo = make_repo(tmp_path, IMPACTED)
    log = spy(tmp_path) / "argv.log"
    front = f"check: {PYTEST}\npython: {PY}\nenv: {{ARGLOG: {log}}}\n{extra}"
    task = write_task(tmp_path, front)
    plan = write_plan(tmp_path, [subtask("s1", ["a.py"])])
    return repo, task, plan, ScriptedSource({"coder:s1": coder})


def logged(tmp_path: Path) -> list[tuple[str, list[str]]]:
    lines = (spy(tmp_path) / "argv.log").read_text().splitlines()
    return [(place, argv) for place, *argv in map(json.loads, lines)]


async def test_a_subtask_runs_the_tests_its_change_reaches_and_the_queue_runs_them_all(
    tmp_path: Path,
) -> None:
    repo, task, plan, scripts = impact_run(
        tmp_path, [edit("a.py", "def one():", "def one() -> int:"), done()]
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    assert report.subtasks[0].check == "impact: 1 of 2 test files"
    opts = PYTEST.split()[3:]
    runs = logged(tmp_path)
    # the baseline; s1's worktree: only tests/test_a.py; the merge queue: the whole suite
    # on the integration branch's next tree; the final check reuses that batch's result
    assert [argv for _, argv in runs] == [opts, [*opts, "tests/test_a.py"], opts], runs
    assert runs[0][0] == "_integration" and runs[2][0].startswith("_check-"), runs
    assert report.merge is not None and report.merge.checks_run == 1
    trace = load_trace(Path(str(report.trace)))
    spans = [i for i in range(len(trace)) if trace.name[i] == f"{sc.IMPACT_SPAN} s1"]
    assert len(spans) == 1
    attrs = trace.attributes(spans[0])
    assert (attrs[sc.CHECK_TESTS_SELECTED], attrs[sc.CHECK_TEST_FILES]) == (1, 2)
    assert "impact: 1 of 2 test files" in (Path(str(report.report))).read_text()


async def test_one_subtask_on_a_green_tree_runs_one_worktree_check_reused_by_all(
    tmp_path: Path,
) -> None:
    """The coder's green `run_tests` of the whole suite is the tree's check: the
    coordinator's check (a selection) and the merge queue's (the whole suite) reuse it."""
    repo, task, plan, scripts = impact_run(
        tmp_path,
        [edit("a.py", "def one():", "def one() -> int:"), call("run_tests"), done()],
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    runs = logged(tmp_path)
    # the baseline, and the agent's run in s1's worktree: nothing else
    assert len(runs) == 2 and runs[0][0] == "_integration", runs
    assert not runs[1][0].startswith(("_integration", "_check-")), runs
    assert report.merge is not None and report.merge.checks_run == 0
    assert report.subtasks[0].check is not None
    assert report.subtasks[0].check.startswith("full: an agent's run"), report.subtasks[0]


async def test_impact_false_runs_the_whole_check_in_the_worktree(tmp_path: Path) -> None:
    repo, task, plan, scripts = impact_run(
        tmp_path, [edit("a.py", "def one():", "def one() -> int:"), done()], "impact: false"
    )
    report = await run(tmp_path, repo, task, plan, scripts)
    assert report.status == "done", report
    opts = PYTEST.split()[3:]
    # the baseline and the worktree, the whole suite each; the queue reuses the worktree's
    assert [argv for _, argv in logged(tmp_path)] == [opts, opts]
    assert report.subtasks[0].check is None
