"""Which repository a solve works on: `--repo`, the task's `repo:` (relative to the task
file), or a fresh copy of the shipped demo; a clear error naming the option otherwise."""

from __future__ import annotations

from pathlib import Path

from swarm.errors import ConfigError
from swarm.run._task import Task

__all__ = ["ensure_demo", "target_repo"]


def target_repo(repo: str | None, task: Task, demo: Path) -> tuple[Path, bool]:
    """The target repository (`--repo`, else the task's `repo:`) and whether it is the
    demo; with none given, the path of a copy of the shipped demo at `demo`, made by
    `ensure_demo` once the run is journaled (a run that fails before leaves none)."""
    given = repo or task.repo
    dest = demo.resolve()
    if given:
        path = Path(given).expanduser()
        if not path.is_absolute() and not repo and task.source:
            path = Path(task.source).parent / path
        if path.resolve() == dest:  # a resumed demo run (its copy is made if missing)
            return dest, True
        if not (path / ".git").exists():
            if repo:
                raise ConfigError(f"--repo {path}: {_not_a_repo(path)}")
            raise ConfigError(f"{path}: {_not_a_repo(path)}", path=task.source, key="repo")
        return path.resolve(), False
    return dest, True


def ensure_demo(dest: Path) -> None:
    """A copy of the shipped demo at `dest`, unless one is there."""
    from swarm._demo import create_demo_repo

    if not (dest / ".git").exists():
        create_demo_repo(dest)


def _not_a_repo(path: Path) -> str:
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is not a directory (a git repository is wanted)"
    return "is not a git repository (run `git init` there, or name another)"
