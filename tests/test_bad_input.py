"""Hostile input through the real `swarm` command: every mistake is exit code 2 and one
message naming the file and the key or line at fault; no traceback, no hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "refactor.md"
SIM = '[providers.sim]\nkind = "sim"\ntime_scale = 0.02\n'


def swarm(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SWARM_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "swarm", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def refused(cwd: Path, *args: str) -> str:
    """Run `swarm ARGS`; assert a clean refusal and return what it printed."""
    result = swarm(cwd, *args)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == 2, output
    assert not (cwd / ".swarm" / "runs").exists(), "refused input must not start a run"
    return result.stderr


ALIAS_BOMB = """---
check: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
setup: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
python: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
env: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
repo: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
include: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
roles: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
tiers: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
setup: [*h,*h,*h,*h,*h,*h,*h,*h,*h]
---
# Title
Do it.
"""


def test_a_yaml_alias_bomb_in_a_task_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "swarm.toml").write_text(SIM)
    (tmp_path / "bomb.md").write_text(ALIAS_BOMB)
    err = refused(tmp_path, "solve", "bomb.md")
    assert "bomb.md:line 2:" in err and "alias" in err


def test_a_lone_surrogate_in_a_task_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "swarm.toml").write_text(SIM)
    (tmp_path / "t.md").write_text('---\nsetup: ["true"]\ncheck: "\\ud800"\n---\n# T\nDo.\n')
    err = refused(tmp_path, "solve", "t.md")
    assert "t.md:line 3:" in err and "lone surrogate" in err


def test_a_lone_surrogate_in_a_plan_is_refused(tmp_path: Path) -> None:
    (tmp_path / "swarm.toml").write_text(SIM)
    plan = '{"subtasks": [{"id": "a", "title": "t", "instructions": "i", "files": ["\\udfff"]}]}'
    (tmp_path / "plan.json").write_text(plan)
    err = refused(tmp_path, "solve", str(TASK), "--plan", "plan.json")
    assert "plan.json:" in err and "subtasks[0].files[0] holds a lone surrogate" in err


def test_a_deeply_nested_plan_is_refused(tmp_path: Path) -> None:
    (tmp_path / "swarm.toml").write_text(SIM)
    (tmp_path / "plan.json").write_text('{"subtasks": ' + "[" * 100_000 + "]" * 100_000 + "}")
    err = refused(tmp_path, "solve", str(TASK), "--plan", "plan.json")
    assert "plan.json:" in err and "nested too deeply" in err


@pytest.mark.parametrize(
    ("subtask_id", "shown"),
    [
        ("a/b", "'a/b'"),
        ("a.lock", "'a.lock'"),
        ("_integration", "'_integration'"),
        ("x" * 300, "300 characters"),
        ("a..b", "'a..b'"),
        ("-x", "'-x'"),
    ],
)
def test_a_plan_id_that_cannot_name_a_branch_is_refused(
    tmp_path: Path, subtask_id: str, shown: str
) -> None:
    (tmp_path / "swarm.toml").write_text(SIM)
    plan = json.dumps({"subtasks": [{"id": subtask_id, "title": "t", "instructions": "i"}]})
    (tmp_path / "plan.json").write_text(plan)
    err = refused(tmp_path, "solve", str(TASK), "--plan", "plan.json")
    assert "plan.json: subtasks[0].id" in err and shown in err


@pytest.mark.parametrize(
    ("toml", "where"),
    [
        (b"\x00\xff\xfe\x01binary\x99" * 20, "swarm.toml: not a UTF-8 text file"),
        (
            b'[providers.x]\nkind = "openai"\nbase_url = "http://[::1"\n'
            b'[tiers.speed]\nmodels = ["x/m"]\n',
            "swarm.toml:providers.x.base_url:",
        ),
        (
            b'[providers.x]\nkind = "openai"\nbase_url = "ftp://host"\n'
            b'[tiers.speed]\nmodels = ["x/m"]\n',
            "swarm.toml:providers.x.base_url:",
        ),
        (
            b'[providers.x]\nkind = "openai"\nbase_url = "http://127.0.0.1:1"\n'
            b'headers = {X-A = "a\\r\\nInjected: 1"}\n[tiers.speed]\nmodels = ["x/m"]\n',
            "swarm.toml:providers.x.headers:",
        ),
        (
            b'[providers.sim]\nkind = "sim"\nstall_timeout_s = inf\n',
            "providers.sim.stall_timeout_s",
        ),
        (b'[providers.sim]\nkind = "sim"\ntime_scale = nan\n', "providers.sim.time_scale"),
        (
            b'[providers.sim]\nkind = "sim"\n[routing]\nbackoff_initial_s = inf\n',
            "swarm.toml:routing.backoff_initial_s:",
        ),
        (b'[providers.sim]\nkind = "sim"\n[budget]\nusd = inf\n', "swarm.toml:budget"),
    ],
)
def test_a_bad_config_is_refused_naming_the_key(tmp_path: Path, toml: bytes, where: str) -> None:
    (tmp_path / "swarm.toml").write_bytes(toml)
    err = refused(tmp_path, "solve", str(TASK))
    assert where in err, err


def test_a_role_on_an_unknown_tier_is_refused(tmp_path: Path) -> None:
    (tmp_path / "swarm.toml").write_text(SIM)
    (tmp_path / "t.md").write_text("---\nroles: {fixer: nosuch}\n---\n# T\nDo it.\n")
    err = refused(tmp_path, "solve", "t.md")
    assert "t.md:roles.fixer: unknown tier 'nosuch'" in err


def test_a_missing_key_variable_is_warned_about(tmp_path: Path) -> None:
    (tmp_path / "swarm.toml").write_text(
        '[providers.x]\nkind = "openai"\nbase_url = "http://127.0.0.1:1/v1"\n'
        'api_key_env = "SWARM_TEST_NO_SUCH_KEY"\n[tiers.speed]\nmodels = ["x/m"]\n'
        '[tiers.reasoning]\nmodels = ["x/m"]\n[routing]\nmax_attempts = 1\n'
        "backoff_initial_s = 0\nbreaker_failures = 1\n"
    )
    result = swarm(tmp_path, "solve", str(TASK))
    assert "Traceback" not in result.stdout + result.stderr
    assert "swarm.toml:providers.x.api_key_env: $SWARM_TEST_NO_SUCH_KEY is not set" in result.stderr


def test_a_dead_provider_does_not_open_a_worktree_per_subtask(tmp_path: Path) -> None:
    """10,000 subtasks against a provider nobody answers at: the run stops after a few
    subtasks fail, instead of opening (and removing) 10,000 worktrees to fail each."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    (tmp_path / "swarm.toml").write_text(
        '[providers.x]\nkind = "openai"\nbase_url = "http://127.0.0.1:1/v1"\n'
        '[tiers.speed]\nmodels = ["x/m"]\n[tiers.reasoning]\nmodels = ["x/m"]\n'
        "[routing]\nmax_attempts = 1\nbackoff_initial_s = 0\n"
    )
    (tmp_path / "t.md").write_text("---\ncheck: 'true'\nmax_agents: 4\n---\n# T\nDo it.\n")
    subtasks = [
        {"id": f"s{i}", "title": "t", "instructions": "i", "files": [f"f{i}.txt"]}
        for i in range(10_000)
    ]
    (tmp_path / "plan.json").write_text(json.dumps({"subtasks": subtasks}))
    result = swarm(
        tmp_path,
        "solve",
        "t.md",
        "--repo",
        str(repo),
        "--plan",
        "plan.json",
        "--json",
        "--traces-dir",
        "traces",
    )
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "stopped" and report["stop_reason"] == "providers"
    (trace,) = (tmp_path / "traces").glob("*.jsonl")
    text = trace.read_text()
    opened = text.count('"name":"swarm.workspace open"')
    reused = text.count('"swarm.workspace.reused"')
    # worktrees made: the agents in flight (made ahead of need), and no more; leases of
    # them: the few subtasks (and their retries) that ran before the run stopped
    assert 0 < opened - reused <= 4 + 3, (opened, reused)
    assert opened <= 4 * 4, opened
