"""The out-of-the-box demo: a small repository to refactor and the model that refactors it.

`swarm solve tasks/refactor.md` with no `--repo` and no keys runs on the simulator:
`create_demo_repo` makes a fresh git repository from the files shipped in `repo/` (a tiny
`inventory` package with its tests), and `demo_script` plays the planner, coders and
fixers, editing that repository through the real coding tools (see `swarm._demo.script`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from swarm._demo.script import PLAN, demo_script, init_source

__all__ = ["DEMO_REPO", "PLAN", "create_demo_repo", "demo_script", "init_source"]

DEMO_REPO = Path(__file__).parent / "repo"
"""The demo repository's files, shipped as package data (no `.git`)."""

_NOT_SHIPPED = (".git", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".mypy_cache")
"""Caches that linters and test runs may leave in the package's copy; never copied."""
_AUTHOR = ("-c", "user.name=swarm", "-c", "user.email=swarm@localhost")
_DATE = "2026-01-01T00:00:00+00:00"
"""A fixed commit date, so every fresh demo repository has the same commit id."""


def create_demo_repo(dest: Path) -> Path:
    """Copy the demo repository to `dest` (absent or empty), commit it on `main`, return it.

    It is made beside `dest` and renamed into place once committed: a run killed while
    making it (kill -9 a second into `swarm solve`) left a repository with no commit,
    which its resume took as made, and failed on (`git rev-parse HEAD`)."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} exists and is not empty")
    building = dest.with_name(f".{dest.name}.building")
    shutil.rmtree(building, ignore_errors=True)  # what a killed run left half made
    shutil.copytree(DEMO_REPO, building, ignore=shutil.ignore_patterns(*_NOT_SHIPPED))
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": _DATE,
        "GIT_COMMITTER_DATE": _DATE,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for args in (
        ("init", "--quiet", "-b", "main"),
        ("add", "-A"),
        (*_AUTHOR, "commit", "--quiet", "--no-verify", "--no-gpg-sign", "-m", "inventory"),
    ):
        subprocess.run(
            ["git", *args], cwd=building, env=env, check=True, capture_output=True, text=True
        )
    if dest.exists():
        dest.rmdir()  # empty, as checked
    building.rename(dest)
    return dest
