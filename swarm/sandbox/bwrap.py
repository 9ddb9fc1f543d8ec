"""`BwrapSandbox`: commands in bubblewrap namespaces, confined to their worktree.

What a command sees: the system read-only (`/usr`, `/etc` and the `/bin`-style links), its
own `/proc`, `/dev` and a memory-backed `/tmp`; its working directory (a worktree)
writable, except the `.git` file that names its git dir; the repository's git common dir
read-only with the other worktrees (`swarm-worktrees/`) hidden under an empty tmpfs and
its config filtered (`_gitconfig`: no remotes, no credentials); and
the policy's extra paths (the repository's interpreter prefix, `include:` targets). Not
the user's home, the main checkout, the journal nor other worktrees: they are simply not
mounted. `HOME` and `TMPDIR` point into the sandbox's `/tmp`.

No capabilities (`--cap-drop ALL`, so root cannot remount), its own PID namespace (when
the command ends or is killed, the kernel kills everything left in it, `setsid`
children included) and `--die-with-parent` (a dying swarm takes its sandboxes along). The
network namespace is its own unless `network = "host"`: only its own loopback works.
Limits: RLIMIT_DATA and RLIMIT_FSIZE set by `ulimit` on the way in; the process count is
watched (`guard`), since RLIMIT_NPROC counts the user's processes machine-wide and does
not bind root at all.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio

from swarm.errors import ConfigError
from swarm.sandbox._gitconfig import shown_config
from swarm.sandbox.base import Launch, Sandbox, SandboxPolicy, git_paths

__all__ = ["BwrapSandbox", "bwrap_path"]

_SYSTEM_DIRS = ("/usr", "/etc")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_GUARD_INTERVAL_S = 0.05
"""How often the process count is read (a fork bomb gets this long before the kill)."""
_MB = 1024 * 1024
_EROFS_PATH = (
    re.compile(r"([^\s:]+)\s*: Read-only file system"),  # bash, coreutils: `cp: '/x': ...`
    re.compile(r"Read-only file system: ?([^\s,]+)"),  # Python: `[Errno 30] ...: '/x'`
)
_QUOTES = "'\"`‘’"
_NO_NETWORK = (
    "Network is unreachable",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Could not resolve host",
    "No address associated with hostname",
)


def bwrap_path() -> str | None:
    """Where the `bwrap` executable is, or None."""
    return shutil.which("bwrap")


class BwrapSandbox(Sandbox):
    """Runs each command in a fresh bubblewrap sandbox confined to its working directory."""

    kind = "bwrap"

    def __init__(self, policy: SandboxPolicy | None = None, *, bwrap: str | None = None) -> None:
        found = bwrap or bwrap_path()
        if found is None:
            raise ConfigError(
                "sandbox kind 'bwrap' was asked for, but bubblewrap is not installed "
                "(Debian/Ubuntu: apt-get install bubblewrap); or choose kind = 'none'",
                key="sandbox.kind",
            )
        self.bwrap = found
        self.policy = policy or SandboxPolicy()

    def __repr__(self) -> str:
        return f"BwrapSandbox(network={self.policy.network!r})"

    def with_read_only(self, paths: Sequence[Path]) -> BwrapSandbox:
        return BwrapSandbox(self.policy.with_read_only(paths), bwrap=self.bwrap)

    def launch(
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], git_write: bool = False
    ) -> Launch:
        cwd = cwd.resolve()
        mounts = self._mounts(cwd, git_write)
        out = [self.bwrap, *mounts, *self._isolation(), "--", *self._limits(), *argv]
        inner = dict(env)
        inner.update(HOME="/tmp", TMPDIR="/tmp")
        return Launch(out, inner, cwd)

    def _limits(self) -> list[str]:
        """A `/bin/sh` that sets the rlimits, then execs the command: ~1 ms where the
        `prlimit` binary took 4-7 ms (units: POSIX sh's, KiB for -d, 512 B blocks for -f)."""
        limits, steps = self.policy.limits, []
        if limits.memory_mb is not None:
            steps.append(f"ulimit -d {limits.memory_mb * 1024}")
        if limits.file_size_mb is not None:
            steps.append(f"ulimit -f {limits.file_size_mb * 2048}")
        if not steps:
            return []
        return ["/bin/sh", "-c", " && ".join([*steps, 'exec "$@"']), "sh"]

    def _mounts(self, cwd: Path, git_write: bool) -> list[str]:
        args: list[str] = []
        for name in _SYSTEM_DIRS:
            args += ["--ro-bind-try", name, name]
        for name in _SYSTEM_LINKS:
            if os.path.islink(name):
                args += ["--symlink", os.readlink(name), name]
            elif os.path.isdir(name):
                args += ["--ro-bind", name, name]
        tmp = str(self.policy.limits.tmp_mb * _MB)
        args += ["--proc", "/proc", "--dev", "/dev", "--size", tmp, "--tmpfs", "/tmp"]
        for path in self.policy.read_only:
            args += ["--ro-bind-try", str(path), str(path)]
        common, hidden = git_paths(cwd)
        if common is not None and hidden is not None:
            args += ["--bind" if git_write else "--ro-bind", str(common), str(common)]
            if git_write:  # what runs on the host next time stays as the user left it
                for name in ("hooks", "info"):
                    args += ["--ro-bind-try", str(common / name), str(common / name)]
            if (config := shown_config(common)) is not None:  # no remotes, no credentials
                args += ["--ro-bind", str(config), str(common / "config")]
            if hidden.is_dir():
                args += ["--tmpfs", str(hidden)]
        for path in self.policy.writable:
            args += ["--bind-try", str(path), str(path)]
        args += ["--bind", str(cwd), str(cwd)]
        if (cwd / ".git").is_file():  # where git finds its metadata: not the agent's to move
            args += ["--ro-bind", str(cwd / ".git"), str(cwd / ".git")]
        return [*args, "--chdir", str(cwd)]

    def _isolation(self) -> list[str]:
        args = ["--unshare-all", "--die-with-parent", "--cap-drop", "ALL"]
        if self.policy.network == "host":
            args.append("--share-net")
            args += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
        return args

    async def guard(self, pid: int) -> str | None:
        """Kill the sandbox (its PID namespace's init) when it holds too many processes."""
        limit = self.policy.limits.max_processes
        init: int | None = None
        while True:
            await anyio.sleep(_GUARD_INTERVAL_S)
            try:
                if init is None:
                    found = _children(pid)
                    if not found:
                        continue
                    init = found[0]
                count = _count_processes(init)
            except OSError:
                return None  # ended, or not ours to look into
            if count > limit:
                try:
                    os.kill(init, signal.SIGKILL)  # the kernel kills the whole namespace
                except ProcessLookupError:
                    return None
                return f"more than {limit} processes at once; the command was killed"

    def denials(self, output: str) -> list[str]:
        notes: list[str] = []
        for line in output.splitlines():
            if "Read-only file system" in line:
                found = next((m for r in _EROFS_PATH if (m := r.search(line))), None)
                where = f": {found.group(1).strip(_QUOTES)}" if found else ""
                note = f"write outside the worktree denied (read-only file system){where}"
                if note not in notes:
                    notes.append(note)
        size = self.policy.limits.file_size_mb
        if size is not None and "File size limit exceeded" in output:
            notes.append(f"a file grew past the sandbox's limit of {size} MB")
        if self.policy.network == "off" and any(s in output for s in _NO_NETWORK):
            notes.append("network is off: only servers started inside this command are reachable")
        return notes[:5]


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _count_processes(init: int) -> int:
    """Processes in the sandbox's PID namespace: the numeric entries of its own /proc."""
    return sum(1 for name in os.listdir(f"/proc/{init}/root/proc") if name.isdigit())
