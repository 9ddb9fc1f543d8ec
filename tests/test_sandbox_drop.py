"""The step that sheds root before a root swarm's sandboxed command (`swarm._sandbox._drop`,
`swarm._sandbox._identity`): the static helper leaves the command exactly as `setpriv`
did, and fails closed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarm._sandbox import BwrapSandbox, _drop, _identity
from swarm.agent._toolbox import run_command
from swarm.run._environment import CheckEnvironment
from swarm.run._workspace import Workspace
from tests.sandboxing import needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="only a root swarm drops its commands' uid"),
]

_SHOW = "grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs):' /proc/self/status"


def _status(text: str) -> dict[str, list[str]]:
    lines = (line.split() for line in text.splitlines())
    return {words[0]: words[1:] for words in lines if words and words[0].endswith(":")}


def _unprivileged(status: dict[str, list[str]]) -> None:
    uid, gid = str(_identity.HOST_UID), str(_identity.HOST_GID)
    assert status["Uid:"] == [uid] * 4, status
    assert status["Gid:"] == [gid] * 4, status
    assert status["Groups:"] == [], status
    for caps in ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"):
        assert status[caps] == ["0000000000000000"], (caps, status)
    assert status["NoNewPrivs:"] == ["1"], status


def _helper_step() -> _identity.Drop:
    helper = _drop.helper()
    if helper is None:
        pytest.skip("no helper here")
    argv = (_drop.INSIDE, str(_identity.HOST_UID), str(_identity.HOST_GID))
    return _identity.Drop(argv, ("--ro-bind", str(helper), _drop.INSIDE), "helper")


def _in_bwrap(drop: _identity.Drop, argv: list[str], *, kept: bool = True) -> subprocess.Popen[str]:
    line = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--tmpfs", "/run"]
    line += [*drop.mounts, "--unshare-pid", "--cap-drop", "ALL"]
    for name in _identity.KEPT_CAPABILITIES if kept else ():
        line += ["--cap-add", name]
    line += ["--", *drop.argv, *argv]
    return subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


async def test_a_command_runs_as_an_unprivileged_uid_with_no_capabilities(tmp_path: Path) -> None:
    """Through `run_command`, as every `run` goes: uid and gid 65532, no supplementary
    groups, every capability set empty, no_new_privs."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    init = "git init -q && git add . && git -c user.name=t -c user.email=t@t commit -qm init"
    subprocess.run(init, shell=True, cwd=repo, check=True)
    sandbox = BwrapSandbox()
    async with Workspace.open(repo, name="w") as ws, sandbox.session():
        env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
        result = await run_command(_SHOW, env.context(ws.path, timeout_s=20))
    assert result.exit_code == 0, result.output
    _unprivileged(_status(result.output))


def test_the_helper_is_built_here_and_is_the_step_commands_take() -> None:
    """This machine has a C compiler and a static C library (as CI's image does): the
    helper, not `setpriv`, is the step; it is root's alone (0700) in the per-user store."""
    helper = _drop.helper()
    assert helper is not None
    assert helper.stat().st_mode & 0o777 == 0o700
    drop = _identity.dropping()
    assert drop is not None
    assert drop.argv[0] == _drop.INSIDE
    assert drop.mounts == ("--ro-bind", str(helper), _drop.INSIDE)


def test_the_helper_leaves_a_command_as_setpriv_did() -> None:
    """The helper and `setpriv` with the options swarm gave it, each as the first step in
    bubblewrap as root: the command's ids, groups, capabilities and no_new_privs match."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv")
    ours = _helper_step()
    theirs = _identity.Drop(tuple(_identity._setpriv_argv(setpriv)), (), "setpriv")
    seen = []
    for drop in (ours, theirs):
        process = _in_bwrap(drop, ["/bin/sh", "-c", _SHOW])
        out, _ = process.communicate(timeout=30)
        assert process.returncode == 0, out
        seen.append(_status(out))
    _unprivileged(seen[0])
    assert seen[0] == seen[1]


def test_the_helper_runs_nothing_when_it_cannot_drop() -> None:
    """Without the capabilities to change identity the helper stops (126, saying which
    step failed) before the command: nothing runs as root by mistake."""
    process = _in_bwrap(_helper_step(), ["/bin/echo", "RAN"], kept=False)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 126, out
    assert "dropping privileges failed at setgroups" in out
    assert "RAN" not in out
