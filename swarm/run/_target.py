"""Which repository a solve works on: `--repo`, the task's `repo:` (relative to the task
file), or a fresh copy of the shipped demo; a clear error naming the option otherwise."""

from __future__ import annotations

from pathlib import Path

from swarm.errors import ConfigError
from swarm.run.task import Task

__all__ = ["target_repo"]


def target_repo(repo: str | None, task: Task, demo: Path) -> tuple[Path, bool]:
    """The target repository (`--repo`, else the task's `repo:`) and whether it is the
    demo; with none given, a fresh copy of the shipped demo at `demo`."""
    given = repo or task.repo
    dest = demo.resolve()
    if given:
        path = Path(given).expanduser()
        if not path.is_absolute() and not repo and task.source:
            path = Path(task.source).parent / path
        if not (path / ".git").exists():
            if repo:
                raise ConfigError(f"--repo {path}: {_not_a_repo(path)}")
            raise ConfigError(f"{path}: {_not_a_repo(path)}", path=task.source, key="repo")
        return path.resolve(), path.resolve() == dest  # a resumed demo run is still one
    from swarm.demo import create_demo_repo

    if not (dest / ".git").exists():
        create_demo_repo(dest)
    return dest, True


def _not_a_repo(path: Path) -> str:
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is not a directory (a git repository is wanted)"
    return "is not a git repository (run `git init` there, or name another)"
