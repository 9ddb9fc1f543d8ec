"""The sandbox seam: choosing one, what the model is told, hooks inside it (real bubblewrap).

The attacks are in test_sandbox_escape.py; here: selection and its errors, the notes a
denial leaves in the tool result and on the span, the interpreter prefixes a check sees,
and git hooks run inside the sandbox by `sandboxed_git`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._sandbox import (
    BwrapSandbox,
    Limits,
    NoSandbox,
    SandboxPolicy,
    _volume,
    bwrap_problem,
    make_sandbox,
    sandboxed_git,
)
from swarm._sandbox.process import pid_alive, run_confined
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._toolbox import coding_tools
from swarm.cli import main
from swarm.config import load_config
from swarm.errors import ConfigError, WorkspaceError
from swarm.run._environment import CheckEnvironment, interpreters_in
from swarm.run._solve import GitWorld
from swarm.run._task import parse_task
from swarm.run._workspace import Workspace, git, hook_env
from tests.sandboxing import needs_bwrap

TOOLS = {t.name: t for t in coding_tools()}
IDENTITY = ("-c", "user.name=swarm", "-c", "user.email=swarm@localhost")
"""The merge queue passes its identity: the user's ~/.gitconfig is not in the sandbox."""


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A PATH with git and nothing else: bubblewrap is not installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git",):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    bwrap_problem.cache_clear()
    yield
    bwrap_problem.cache_clear()


def test_asking_for_bwrap_where_it_is_missing_is_a_config_error(no_bwrap: None) -> None:
    with pytest.raises(ConfigError, match=r"'bwrap' was asked for.*not installed.*none"):
        make_sandbox(kind="bwrap")
    assert isinstance(make_sandbox(), NoSandbox)  # auto: none, and the report says why
    assert isinstance(make_sandbox(kind="none"), NoSandbox)


def test_solve_with_sandbox_bwrap_where_missing_says_so_without_a_traceback(
    no_bwrap: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "task.md"
    task.write_text("# Do nothing\n\nNothing at all.\n")
    state = tmp_path / "state"
    code = main(["solve", str(task), "--sandbox", "bwrap", "--state-dir", str(state), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "sandbox: sandbox 'bwrap' was asked for, but bubblewrap is not installed" in err
    assert "Traceback" not in err


def test_config_and_task_name_the_sandbox(tmp_path: Path) -> None:
    toml = tmp_path / "swarm.toml"
    toml.write_text('[sandbox]\nkind = "none"\nnetwork = "host"\nmax_processes = 100\n')
    config = load_config(toml)
    assert (config.sandbox.kind, config.sandbox.network) == ("none", "host")
    sandbox = make_sandbox(config.sandbox)
    assert isinstance(sandbox, NoSandbox)
    assert sandbox.policy.limits.max_processes == 100
    toml.write_text('[sandbox]\nkind = "docker"\n')
    with pytest.raises(ConfigError, match=r"sandbox\.kind"):
        load_config(toml)
    assert parse_task("---\nsandbox: none\n---\n# T\n\nDo.\n").sandbox == "none"
    with pytest.raises(ConfigError, match=r"line 2.*sandbox.*`bwrap` or `none`"):
        parse_task("---\nsandbox: docker\n---\n# T\n\nDo.\n")


def test_a_check_sees_the_interpreter_prefixes_not_the_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    env = CheckEnvironment.resolve(repo, sandbox=NoSandbox())
    seen = env.sandbox.policy.read_only
    assert (repo / ".venv").resolve() in seen
    assert repo.resolve() not in seen
    base = Path(os.path.realpath(sys.base_prefix))
    assert any(base == p or base.is_relative_to(p) for p in seen) or base.is_relative_to("/usr")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("x = 1\n")
    cmd = "git init -q && git add . && git -c user.name=t -c user.email=t@t commit -qm init"
    subprocess.run(cmd, shell=True, cwd=repo, check=True)
    return repo


@needs_bwrap
async def test_a_denied_write_is_told_to_the_model_and_on_the_span(
    repo: Path, spans: InMemorySpanExporter
) -> None:
    async with Workspace.open(repo, name="w") as ws:
        env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=BwrapSandbox())
        with tracer().start_as_current_span("execute_tool run"):
            out = await TOOLS["run"].run(
                {"command": "echo x > /etc/swarm-x"}, env.context(ws.path, timeout_s=20)
            )
    assert (
        "[sandbox: write outside the worktree denied (read-only file system): /etc/swarm-x]" in out
    )
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool run"]
    assert span.attributes is not None
    assert span.attributes[sc.SANDBOX_KIND] == "bwrap"
    assert "/etc/swarm-x" in str(span.attributes[sc.SANDBOX_DENIED])
    assert not Path("/etc/swarm-x").exists()


@needs_bwrap
async def test_the_network_and_the_process_limit_are_told_to_the_model(repo: Path) -> None:
    policy = SandboxPolicy(limits=Limits(max_processes=16))
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=BwrapSandbox(policy))
    async with Workspace.open(repo, name="w") as ws:
        ctx = env.context(ws.path, timeout_s=20)
        connect = "python -c \"import socket; socket.create_connection(('192.0.2.1', 80), 2)\""
        net = await TOOLS["run"].run({"command": connect}, ctx)
        many = await TOOLS["run"].run(
            {"command": "for i in $(seq 40); do sleep 5 & done; wait"}, ctx
        )
        works = await TOOLS["run"].run({"command": "python -c 'import app; print(app.x)'"}, ctx)
    assert (
        "[sandbox: network is off: only servers started inside this command are reachable]" in net
    )
    assert "[sandbox: more than 16 processes at once; the command was killed]" in many
    assert works.startswith("command exited with code 0") and works.endswith("\n1\n")


def _plant(repo: Path, name: str, body: str) -> None:
    hook = repo / ".git" / "hooks" / name
    hook.write_text(f"#!/bin/sh\n{body}\n")
    hook.chmod(0o755)


@needs_bwrap
async def test_sandboxed_git_runs_the_hooks_inside_the_sandbox(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    _plant(
        repo, "pre-commit", f"touch hook-ran; touch {outside} 2>/dev/null; git config x.y z; exit 0"
    )
    _plant(repo, "commit-msg", "echo '(checked by the hook)' >> \"$1\"")
    config = (repo / ".git" / "config").read_text()
    async with Workspace.open(repo, name="w") as ws:
        (ws.path / "app.py").write_text("x = 2\n")
        await git("add", "app.py", cwd=ws.path)
        before = await git("rev-parse", "HEAD", cwd=ws.path)
        await sandboxed_git(
            BwrapSandbox(), *IDENTITY, "commit", "-qm", "change", cwd=ws.path, env=hook_env()
        )
        message = await git("log", "-1", "--format=%B", cwd=ws.path)
        assert await git("rev-parse", "HEAD~1", cwd=ws.path) == before
        assert (ws.path / "hook-ran").exists()  # the hook ran, in the worktree
        assert "(checked by the hook)" in message
    assert not outside.exists()
    assert (repo / ".git" / "config").read_text() == config  # nothing planted for the host


@needs_bwrap
async def test_a_failing_hook_fails_the_commit_with_its_message(repo: Path) -> None:
    _plant(repo, "pre-commit", "echo 'lint says no' >&2; exit 1")
    async with Workspace.open(repo, name="w") as ws:
        (ws.path / "app.py").write_text("x = 3\n")
        await git("add", "app.py", cwd=ws.path)
        with pytest.raises(WorkspaceError, match=r"(?s)git commit exited 1.*bwrap.*lint says no"):
            await sandboxed_git(
                BwrapSandbox(), *IDENTITY, "commit", "-qm", "m", cwd=ws.path, env=hook_env()
            )


def _running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@needs_bwrap
async def test_a_timeout_kills_the_whole_tree_setsid_children_too(repo: Path) -> None:
    env = CheckEnvironment.resolve(repo, sandbox=BwrapSandbox())
    ctx = env.context(repo, timeout_s=20)
    command = "setsid sleep 4242.5 >/dev/null 2>&1 & sleep 4242.6"
    out = await TOOLS["run"].run({"command": command, "timeout": 1}, ctx)
    assert out.startswith("command hit its 1s time limit")
    await anyio.sleep(0.2)
    assert _running("4242.5") == [] and _running("4242.6") == []


@needs_bwrap
async def test_the_report_says_which_sandbox_ran(repo: Path) -> None:
    task = parse_task("---\ncheck: python -c pass\n---\n# T\n\nDo.\n")
    bwrap = await GitWorld(repo, task, sandbox=make_sandbox(kind="bwrap")).warnings(task)
    none = await GitWorld(repo, task, sandbox=make_sandbox(kind="none")).warnings(task)
    said = next(n for n in bwrap if n.startswith("sandbox: bwrap:"))
    held = "held by the kernel (a filesystem each)" if _volume.unusable() is None else "checked"
    assert said.startswith(
        "sandbox: bwrap: commands write only their worktree; no network; "
        f"8192 MB of disk per worktree, {held}"
    )
    assert any(
        n.startswith("sandbox: none: agents' commands and checks run on this machine") for n in none
    )


def test_interpreters_a_check_names_by_absolute_path_are_shown(tmp_path: Path) -> None:
    script = tmp_path / "home" / "bin" / "run.sh"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    found = interpreters_in(f"{sys.executable} -m pytest -q", f"{script} --all", None)
    assert Path(sys.executable).parent.parent.resolve() in found or Path(
        sys.executable
    ).resolve().is_relative_to("/usr")
    assert tmp_path / "home" not in found  # not an interpreter: its prefix may be a home


@needs_bwrap
async def test_the_limits_are_set_hard_in_bash_commands_and_argv_commands(repo: Path) -> None:
    """`run` commands get the rlimits at the head of their bash script, other argv through
    a /bin/sh before them; the units differ (bash's -f is KiB, sh's 512 B): both must land
    on the same bytes, soft and hard."""
    policy = SandboxPolicy(limits=Limits(memory_mb=3000, file_size_mb=70))
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=BwrapSandbox(policy))
    show = (
        "import resource as r; print('LIMITS', r.getrlimit(r.RLIMIT_DATA), "
        "r.getrlimit(r.RLIMIT_FSIZE))"
    )
    async with Workspace.open(repo, name="w") as ws:
        ctx = env.context(ws.path, timeout_s=20)
        script = await run_confined(
            ctx.sandbox,
            f'python -c "{show}"',
            cwd=ws.path,
            env=ctx.env,
            timeout_s=20,
            max_output_chars=2000,
        )
        argv = await run_confined(
            ctx.sandbox,
            [sys.executable, "-c", show],
            cwd=ws.path,
            env=ctx.env,
            timeout_s=20,
            max_output_chars=2000,
        )
    expected = f"LIMITS {(3000 << 20,) * 2} {(70 << 20,) * 2}"
    assert expected in script.output and expected in argv.output


@needs_bwrap
async def test_what_setup_exports_reaches_later_commands_and_the_check(repo: Path) -> None:
    setup = (
        "mkdir -p tools && printf '#!/bin/sh\\necho tool ran\\n' > tools/mytool && "
        'chmod +x tools/mytool && export GREETING="hi there" && export PATH="$PWD/tools:$PATH"'
    )
    env = CheckEnvironment.resolve(repo, python=sys.executable, setup=setup)
    async with Workspace.open(repo, name="w") as ws:
        await env.prepare(ws.path)
        ctx = env.context(ws.path, check='echo "check: $GREETING"', timeout_s=20)
        out = await TOOLS["run"].run({"command": 'echo "$GREETING"; mytool; echo "[$HOME]"'}, ctx)
        check = await TOOLS["run_tests"].run({}, ctx)
    assert "hi there" in out and "tool ran" in out and "[/tmp]" in out, out
    assert "check: hi there" in check, check
    assert env.exports[ws.path].keys() == {"GREETING", "PATH"}


@needs_bwrap
async def test_a_setup_killed_by_sigkill_says_so_and_a_failing_one_does_not(repo: Path) -> None:
    """A cluster node lost under a setup kills it first: the driver then asks whether the
    node is gone (`ray_cluster._lost_under`) rather than failing the subtask."""
    async with Workspace.open(repo, name="w") as ws:
        for setup, killed in (("kill -9 $$", True), ("exit 3", False)):
            env = CheckEnvironment.resolve(repo, python=sys.executable, setup=setup)
            with pytest.raises(WorkspaceError) as failed:
                await env.prepare(ws.path)
            assert failed.value.sigkilled is killed, failed.value
            assert f"setup `{setup}` failed" in str(failed.value)


@needs_bwrap
async def test_files_swarm_writes_after_a_command_are_the_commands_to_change(repo: Path) -> None:
    """As root, the command is another uid (`swarm._sandbox._identity`): what the file tools
    and swarm's git write into the worktree later inherit its ACL."""
    env = CheckEnvironment.resolve(repo, python=sys.executable)
    async with Workspace.open(repo, name="w") as ws:
        ctx = env.context(ws.path, timeout_s=20)
        await TOOLS["run"].run({"command": "true"}, ctx)  # the worktree is granted here
        await TOOLS["write_file"].run({"path": "sub/new.txt", "content": "one\n"}, ctx)
        (ws.path / "app.py").unlink()
        await git("checkout", "--", "app.py", cwd=ws.path)  # made again by git
        edit = "echo two >> sub/new.txt && echo y >> app.py && mkdir sub/more && echo EDITED"
        out = await TOOLS["run"].run({"command": edit}, ctx)
    assert "EDITED" in out, out


def test_a_process_that_has_exited_but_is_not_reaped_is_not_alive() -> None:
    """A zombie holds no file, mount or working directory: what it owned (a cluster
    node's clone, a cgroup, a store entry) is swept as a dead process's."""
    child = subprocess.Popen(["true"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        assert not pid_alive(child.pid)
    finally:
        child.wait()
    assert pid_alive(os.getpid())
