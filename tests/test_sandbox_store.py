"""The files a user's sandboxes share (`swarm._sandbox._store`): one directory per user,
reused by every process, nothing left behind by a killed one, never a directory someone
else could have prepared."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from swarm._sandbox import _store

_MAKE = """
import json, sys
from pathlib import Path
from swarm._sandbox import _identity, _seccomp
from swarm._sandbox._etc import etc_mounts
from swarm._sandbox._gitconfig import shown_config
made = {
    "seccomp": str(_seccomp.path()),
    "etc": etc_mounts(resolver=False)[1],
    "gitconfig": str(shown_config(Path(sys.argv[1]))),
}
drop = _identity.dropping()  # a root swarm's static drop helper, a tree of its own
if drop is not None and drop.mounts:
    made["drop"] = str(Path(drop.mounts[1]).parent)
print(json.dumps(made), flush=True)
if sys.argv[2:] == ["wait"]:
    sys.stdin.read()
"""


def _git_dir(tmp_path: Path) -> Path:
    git_dir = tmp_path / "repo.git"
    git_dir.mkdir()
    (git_dir / "config").write_text(
        '[core]\n\tbare = true\n[remote "origin"]\n\turl = https://u:tok@127.0.0.1/r\n'
    )
    return git_dir


def _start(tmp: Path, git_dir: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    argv = [sys.executable, "-c", _MAKE, str(git_dir), *extra]
    return subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _made(process: subprocess.Popen[str]) -> dict[str, str]:
    assert process.stdout is not None
    return dict(json.loads(process.stdout.readline()))


def test_two_processes_share_one_set_of_files(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    git_dir = _git_dir(tmp_path)
    first, second = _start(tmp, git_dir), _start(tmp, git_dir)
    made = [_made(first), _made(second)]
    first.communicate()
    second.communicate()
    assert made[0] == made[1]
    shared = tmp / f"swarm-{os.geteuid()}"
    assert os.listdir(tmp) == [shared.name]
    assert all(Path(path).parent == shared for path in made[0].values())
    assert "tok" not in Path(made[0]["gitconfig"]).read_text()
    assert (Path(made[0]["etc"]) / "nsswitch.conf").read_text().startswith("passwd: files\n")


def test_a_killed_process_leaves_nothing_behind(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    git_dir = _git_dir(tmp_path)
    killed = _start(tmp, git_dir, "wait")
    made = _made(killed)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    shared = tmp / f"swarm-{os.geteuid()}"
    assert os.listdir(tmp) == [shared.name]
    assert sorted(os.listdir(shared)) == sorted(Path(p).name for p in made.values())
    later = _start(tmp, git_dir)  # and the next process reuses what it made
    assert _made(later) == made
    later.communicate()


def test_what_a_killed_writer_left_half_done_is_swept(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    shared = _store.shared_in(tmp_path)
    (shared / f".partial-{gone.pid}-0a1b").mkdir()
    (shared / f".partial-{gone.pid}-2c3d").write_text("half")
    (shared / f".partial-{os.getpid()}-4e5f").write_text("a live writer's")
    _store.shared_in(tmp_path)
    assert os.listdir(shared) == [f".partial-{os.getpid()}-4e5f"]


@pytest.mark.parametrize("prepared", ["open to others", "a symlink", "a file"])
def test_a_directory_someone_else_could_have_prepared_is_not_used(
    tmp_path: Path, prepared: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = tmp_path / f"swarm-{os.geteuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if prepared == "open to others":
        name.mkdir()
        name.chmod(0o777)
    elif prepared == "a symlink":
        name.symlink_to(elsewhere)
    else:
        name.write_text("")
    with caplog.at_level(logging.WARNING, logger=_store.__name__):
        private = _store.shared_in(tmp_path)
    assert private not in (name, elsewhere)
    assert private.parent == tmp_path
    assert (private.stat().st_mode & 0o777) == 0o700
    assert "not safe to share" in caplog.text
