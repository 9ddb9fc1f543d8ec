"""What a repository's checks and agents' commands run with: its own interpreter, never swarm's.

Checks run in worktrees, so they must see the worktree's code and the repository's own
environment: the interpreter a task names (`python:`), else the repository's virtual
environment (`.venv` or `venv` in the user's checkout), else the user's `PATH` with
swarm's own virtual environment taken out (`python -m pytest` on a repository must not
find swarm's packages instead of the repository's). Extra variables come from the task's
`env:`. Of swarm's own environment only what `command_env` allows gets through (`PATH`,
`HOME`, `LANG`, `LC_*`, `TERM`, `TZ`...): no keys, no database URLs, no DSNs.

A worktree is prepared before any agent works in it: the task's `include:` paths
(untracked or ignored files the checks need: `_version.py`, `.env`, `node_modules`) are
brought from the user's checkout — files copied, directories linked — and its `setup:`
command runs. What `setup:` exports (`export DJANGO_SETTINGS_MODULE=...`, a `PATH` with
the tools it installed) joins the environment of every later command in that worktree.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio

from swarm._sandbox import Sandbox, default_sandbox
from swarm._sandbox._interpreter import interpreters_in, on_path, prefixes
from swarm._sandbox.process import COMMAND_TAG_VAR
from swarm.agent._tool import ToolContext, WriteLog, command_env, environ
from swarm.agent._toolbox import run_command
from swarm.errors import ConfigError, WorkspaceError

__all__ = ["SIGKILLED", "CheckEnvironment", "interpreters_in"]

SIGKILLED = frozenset({-9, 128 + 9})
"""Exit codes of a command killed by SIGKILL (its own, or its shell's 128 + 9)."""

_VENV_DIRS = (".venv", "venv", "env")


def _swarm_venv_bin() -> Path | None:
    """The bin directory of the virtual environment swarm itself runs from, if any."""
    if sys.prefix == sys.base_prefix:
        return None
    return Path(sys.prefix) / ("Scripts" if os.name == "nt" else "bin")


def _repo_venv(repo: Path) -> Path | None:
    for name in _VENV_DIRS:
        python = repo / name / "bin" / "python"
        if (repo / name / "pyvenv.cfg").is_file() and python.exists():
            return python
    return None


@dataclass(frozen=True)
class CheckEnvironment:
    """The interpreter, variables and worktree preparation of one repository's checks."""

    repo: Path
    """The user's checkout (where `include:` paths and the repository's venv are found)."""
    python: Path | None = None
    """Its bin directory goes first on PATH; None: the user's PATH without swarm's venv."""
    python_source: str = "PATH"
    """How `python` was chosen: `task`, the venv's directory name, or `PATH`."""
    extra: Mapping[str, str] = field(default_factory=dict)
    include: tuple[str, ...] = ()
    setup: str | None = None
    timeout_s: float = 600.0
    sandbox: Sandbox = field(default_factory=default_sandbox)
    """Where checks, `setup:` and agents' commands run; it sees the interpreter's prefix
    and the `include:` directories read-only (`visible_paths`)."""
    exports: dict[Path, dict[str, str]] = field(default_factory=dict, compare=False)
    """What `setup:` exported in each worktree it prepared (`prepare`): part of the
    environment of that worktree's commands from then on."""
    _made: list[tuple[Mapping[str, str], dict[str, str]]] = field(
        default_factory=list, init=False, compare=False, repr=False
    )
    """The environment `_interpreter_env` made last, with the base it was made from."""

    @classmethod
    def resolve(
        cls,
        repo: Path,
        *,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        include: tuple[str, ...] = (),
        setup: str | None = None,
        sandbox: Sandbox | None = None,
    ) -> CheckEnvironment:
        """The environment a task asks for (`python`, `env`, `include`, `setup`) in `repo`,
        its commands run in `sandbox` (default: `default_sandbox()`, bubblewrap where it
        works)."""
        chosen, source = None, "PATH"
        if python:
            candidate = Path(python).expanduser()
            chosen = candidate if candidate.is_absolute() else repo / candidate
            found = shutil.which(str(chosen)) or (str(chosen) if chosen.exists() else None)
            if found is None:
                raise ConfigError(f"no interpreter at {chosen}", key="python")
            chosen, source = Path(found), "task"
        elif (venv := _repo_venv(repo)) is not None:
            chosen, source = venv, venv.parent.parent.name
        made = cls(repo, chosen, source, dict(env or {}), include, setup)
        sandbox = default_sandbox() if sandbox is None else sandbox
        return replace(made, sandbox=sandbox.with_read_only(made.visible_paths()))

    def visible_paths(self) -> list[Path]:
        """What a sandboxed check must see besides its worktree: the interpreter's prefix
        (a venv's, and the base interpreter's it points to: never the checkout around a
        venv) and the directories `include:` links into worktrees."""
        paths: list[Path] = []
        python = self.python or on_path(self.env_for(self.repo).get("PATH", ""))
        if python is not None:
            paths += prefixes(python)
        for pattern in self.include:
            for rel in glob.glob(pattern, root_dir=self.repo, recursive=True, include_hidden=True):
                if (self.repo / rel).is_dir():
                    paths.append((self.repo / rel).resolve())
        return [p for p in dict.fromkeys(paths) if not p.is_relative_to("/usr")]

    def env_for(self, cwd: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for a check or an agent's command in worktree `cwd`."""
        env = dict(self._interpreter_env(environ() if base is None else base))
        paths = [str(cwd / "src")] if (cwd / "src").is_dir() else []
        paths.append(str(cwd))
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)  # the worktree's code, not the checkout's
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(self.extra)
        env.update(self.exports.get(cwd, {}))
        return env

    def _interpreter_env(self, base: Mapping[str, str]) -> Mapping[str, str]:
        """What of `base` every worktree's commands get, with the interpreter's `PATH` and
        `VIRTUAL_ENV`: made again only when `base` is another object (`environ()` is the
        same one until `os.environ` changes). A solve asks for an environment at every
        check and agent (600 times in 300 subtasks), and this part never depends on the
        worktree."""
        if self._made and self._made[0][0] is base:
            return self._made[0][1]
        env = command_env(base)
        path = [p for p in env.get("PATH", "").split(os.pathsep) if p]
        own = _swarm_venv_bin()
        if own is not None and (self.python is None or own != self.python.parent):
            path = [p for p in path if Path(p) != own]
        env.pop("VIRTUAL_ENV", None)
        if self.python is not None:
            path.insert(0, str(self.python.parent))
            if (self.python.parent.parent / "pyvenv.cfg").is_file():
                env["VIRTUAL_ENV"] = str(self.python.parent.parent)
        env["PATH"] = os.pathsep.join(path)
        self._made[:] = [(base, env)]  # holds `base`: no other object takes its place
        return env

    def context(
        self,
        worktree: Path,
        *,
        check: str | None = None,
        timeout_s: float,
        written: WriteLog | None = None,
    ) -> ToolContext:
        """A ToolContext for commands in `worktree`: this environment, this sandbox; its
        file tools note what they write in `written` (the workspace's log)."""
        return ToolContext(
            root=worktree,
            check=check,
            env=self.env_for(worktree),
            timeout_s=timeout_s,
            sandbox=self.sandbox,
            written=WriteLog() if written is None else written,
        )

    def describe(self) -> str:
        where = str(self.python) if self.python else "the user's PATH (swarm's venv left out)"
        return f"checks run with {where} ({self.python_source})"

    async def prepare(self, worktree: Path) -> None:
        """Bring `include:` paths into a fresh worktree, then run `setup:` in it."""
        for pattern in self.include:
            await anyio.to_thread.run_sync(self._bring, pattern, worktree)
        if self.setup:
            ctx = self.context(worktree, timeout_s=self.timeout_s)
            script = f'{self.setup}\n{_DUMP}; exit "$__swarm_status"'
            result = await run_command(script, ctx)
            output, _, dumped = result.output.partition(f"\n{_EXPORTS_MARK}\n")
            if result.exit_code != 0 or result.timed_out:
                raise WorkspaceError(
                    f"setup `{self.setup}` failed in {worktree.name} "
                    f"(exit {result.exit_code}):\n{output[-2000:]}",
                    sigkilled=result.exit_code in SIGKILLED,
                )
            self.exports[worktree] = _exported(dumped, ctx.env)

    def _bring(self, pattern: str, worktree: Path) -> None:
        matches = glob.glob(pattern, root_dir=self.repo, recursive=True, include_hidden=True)
        for rel in matches:
            source, target = self.repo / rel, worktree / rel
            if target.exists() or target.is_symlink():
                continue  # tracked, or brought already
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                target.symlink_to(source.resolve(), target_is_directory=True)
            else:
                shutil.copy2(source, target)


_EXPORTS_MARK = "--- swarm: what setup exported ---"
_DUMP = f"__swarm_status=$?; printf '\\n%s\\n' '{_EXPORTS_MARK}'; env -0"
"""Shell steps after `setup:`: its status kept, then its environment, NUL-separated,
after a line of its own (what a setup `export`s dies with its shell otherwise)."""
_PROXY = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
_SHELL_OWN = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "__swarm_status", COMMAND_TAG_VAR})


def _exported(dumped: str, before: Mapping[str, str]) -> dict[str, str]:
    """The variables `setup:` set or changed: those of `dumped` (`env -0`) that differ from
    `before`, but the shell's own and the sandbox's (`HOME`, `TMPDIR`, the proxy's)."""
    found: dict[str, str] = {}
    for entry in dumped.split("\0"):
        name, eq, value = entry.partition("=")
        if eq and name.isidentifier() and name not in _SHELL_OWN and before.get(name) != value:
            found[name] = value
    for name in ("HOME", "TMPDIR", *_PROXY, *(name.lower() for name in _PROXY)):
        found.pop(name, None)
    return found
