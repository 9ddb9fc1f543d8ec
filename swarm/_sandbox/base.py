"""The `Sandbox` seam: how every command an agent or the coordinator runs is confined.

A sandbox turns a command (an argv, a working directory, an environment) into the command
line that runs it confined (`Sandbox.launch`), watches it while it runs (`Sandbox.guard`:
the process-count limit) and reads its output for the denials worth telling the model
(`Sandbox.denials`). A sandbox whose network goes through swarm's proxy (`network =
"loopback"` or `"allow"`) also opens a `session` (the proxy, once per run) and a `lane` per
command (its own sockets into the proxy, so its refused connections are its own).
`swarm.agent._toolbox.run_command` is the one caller: `run`,
`run_tests`, the check, `setup:` and sandboxed git hooks all go through it. The same seam
takes a remote runner later: it only sees argv, cwd and env.

The policy (`SandboxPolicy`) is per sandbox: what besides the working directory may be read
or written, the network, the limits. Where the command runs (its working directory: a
worktree) is per command; git access is derived from it (`git_dir`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Self

from swarm.config._run import SandboxNetwork

if TYPE_CHECKING:
    from swarm._sandbox._seats import Seat

__all__ = [
    "Lane",
    "Launch",
    "Limits",
    "Network",
    "Sandbox",
    "SandboxPolicy",
    "admin_of",
    "git_dir",
]

Network = SandboxNetwork
"""`off`: the sandbox's own loopback only (a test suite's local servers work; the host's
loopback and the internet do not). `loopback`, `allow`: also what `SandboxPolicy.allow`
lists, through swarm's proxy. `host`: the host's network, unrestricted."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed command (its whole process tree)."""

    max_processes: int = 512
    """Processes alive at once; above it the whole tree is killed (a fork bomb). Where
    the machine allows pids cgroups, the kernel also refuses forks past 4 times it
    (threads count there)."""
    memory_mb: int | None = 8192
    """Memory of the whole command (its processes, shared mappings, `/tmp` and `/dev/shm`)
    where a memory cgroup can be made (`swarm._sandbox._pids`), and per process (RLIMIT_DATA)
    in any case; None: no limit."""
    file_size_mb: int | None = 4096
    """Largest file a process may write (RLIMIT_FSIZE; `disk_mb` where that is smaller:
    `largest_file_mb`); None: no limit."""
    tmp_mb: int = 1024
    """Size of the command's own `/tmp` (memory-backed)."""
    shm_mb: int = 256
    """Size of the command's own `/dev/shm` (memory-backed)."""
    disk_mb: int | None = 8192
    """How much the command's worktree may hold past its checkout. Where the worktree is a
    filesystem of its own (`swarm._sandbox._volume`: root, loop devices) the kernel refuses
    writes past it; elsewhere a command that grows the worktree past it is killed
    (`swarm._sandbox._disk`: a check) and no single file may be larger, which the kernel
    enforces (`largest_file_mb`). None: no quota."""

    @property
    def largest_file_mb(self) -> int | None:
        """The RLIMIT_FSIZE a command gets: `file_size_mb`, or the disk quota where that is
        smaller (a file larger than the quota would pass it: the kernel stops it exactly
        at the quota, where the quota's check alone overshot)."""
        sizes = [mb for mb in (self.file_size_mb, self.disk_mb) if mb is not None]
        return min(sizes) if sizes else None


@dataclass(frozen=True)
class SandboxPolicy:
    """What a sandboxed command may touch besides its working directory."""

    read_only: tuple[Path, ...] = ()
    """Extra paths visible read-only: interpreter prefixes, `include:` targets, tools."""
    writable: tuple[Path, ...] = ()
    """Extra paths writable (besides the working directory): caches the user allows."""
    network: Network = "off"
    limits: Limits = field(default_factory=Limits)
    allow: tuple[str, ...] = ()
    """`HOST:PORT` entries a `loopback` or `allow` network reaches (`SandboxConfig.allow`)."""
    cgroups: bool = True
    """Put each command in pids (and memory) cgroups of its own where the machine lets
    swarm make them (`swarm._sandbox._pids`); False: never, the guard alone keeps the
    process limit and adds up each command's memory (`swarm._sandbox._memory`)."""
    guard_in_cgroup: bool = True
    """In a pids cgroup, where the kernel caps the tasks, the guard still counts the
    processes now and then and ends a command spinning on failed forks; False: the
    kernel's cap alone."""
    pidfd: bool = True
    """Start and wait for commands through pidfds where the system has them (Linux);
    False: through anyio's `open_process`, the way they start elsewhere."""

    def with_read_only(self, paths: Sequence[Path]) -> SandboxPolicy:
        """This policy with `paths` also readable (kept in order, once each)."""
        merged = tuple(dict.fromkeys([*self.read_only, *paths]))
        return replace(self, read_only=merged)


@dataclass
class Lane:
    """One command's way out through swarm's proxy: a host directory of unix sockets
    (shown inside the sandbox) and the connections refused while the command ran."""

    directory: Path
    forwarded: tuple[int, ...]
    """Host loopback ports forwarded to the same port inside the sandbox."""
    denied: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Launch:
    """A command as the sandbox runs it."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    cgroup: Path | None = None
    """The pids cgroup the command runs in (`swarm._sandbox._pids`), if it has one."""
    seat: Seat | None = None
    """A launcher already in `cgroup` that runs `argv` (`swarm._sandbox._seats`); None:
    `argv` joins its cgroup itself."""
    capped: bool = False
    """`argv` starts with the helper that runs the command in a PID namespace of its own
    whose size the kernel caps (`swarm._sandbox._pidns`): its init is the helper's child."""


class Sandbox(ABC):
    """Confines commands; `kind` names the implementation in reports and spans."""

    kind: str
    policy: SandboxPolicy
    contains_processes: bool = False
    """True when nothing a command starts can outlive the command's own process (a pid
    namespace that dies with it); False makes every command end with a search of all
    the host's processes for the ones it left (see `swarm._sandbox.process`)."""

    @abstractmethod
    def launch(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        git_write: bool = False,
        lane: Lane | None = None,
    ) -> Launch:
        """The command line, environment and directory that run `argv` confined to `cwd`.

        `git_write` (a git command running the repository's hooks) makes the git dir
        writable, except its config and hooks: what would run on the host next time.
        `lane`: what `lane()` gave this command."""

    def session(self) -> AbstractAsyncContextManager[object]:
        """Open what the sandbox's commands share for as long as it is open (the proxy
        of a `loopback` or `allow` network, launchers ready in their pids cgroups); a run
        opens it once around its work. Without it each command's lane opens its own
        proxy, and each command joins its cgroup itself. Default: nothing to open."""
        return nullcontext()

    def lane(self) -> AbstractAsyncContextManager[Lane | None]:
        """One command's way out (see `Lane`), open while the command runs; None when
        the sandbox needs none."""
        return nullcontext(None)

    async def guard(self, pid: int, launch: Launch | None = None) -> str | None:
        """Watch the running command (`pid`: what `launch`'s argv started) and kill it when
        it breaks a limit; returns why it was killed. Returns when the command ends, or is
        cancelled then. Default: nothing to watch."""
        return None

    def ended(self, launch: Launch) -> list[str]:
        """What the kernel stopped in `launch`'s command (a memory limit), once it has
        ended and before `release`. Default: nothing."""
        return []

    def release(self, launch: Launch) -> bool:
        """Free what `launch` made for its command, once the command has ended; False if
        it cannot be freed yet (its last processes are still going). Default: nothing."""
        return True

    def denials(self, output: str) -> list[str]:
        """Short notes for the model on what the sandbox refused, read from `output`."""
        return []

    def with_read_only(self, paths: Sequence[Path]) -> Self:
        """The same sandbox with `paths` also readable (a repository's interpreter)."""
        return self.with_policy(self.policy.with_read_only(paths))

    def with_policy(self, policy: SandboxPolicy) -> Self:
        """The same sandbox under `policy` (its seats, proxy and binary shared)."""
        return self


def git_dir(cwd: Path) -> Path | None:
    """For a linked worktree `cwd`: its git common dir; for a checkout whose git dir is
    elsewhere (`git init --separate-git-dir`: a cluster node's clone), that git dir. None
    when `cwd` is neither.

    Agents' commands get read-only git: `git diff`, `log`, `status` work; commits, branch
    and ref changes do not (swarm makes the commits; the patch is computed outside)."""
    admin = admin_of(cwd)
    if admin is None:
        return None
    try:
        common_rel = (admin / "commondir").read_text().strip()
    except OSError:
        if (admin / "HEAD").is_file() and (admin / "objects").is_dir():
            return admin  # a git dir of its own
        return None
    common = Path(common_rel) if Path(common_rel).is_absolute() else admin / common_rel
    return common.resolve()


def admin_of(cwd: Path) -> Path | None:
    """For a linked worktree `cwd`: its own directory in the git dir (from its `.git`
    file: index, HEAD, logs), resolved. None when `cwd` is not one."""
    try:
        text = (cwd / ".git").read_text().strip()
    except OSError:
        return None
    if not text.startswith("gitdir: "):
        return None
    admin = Path(text.removeprefix("gitdir: "))
    return (admin if admin.is_absolute() else cwd / admin).resolve()
