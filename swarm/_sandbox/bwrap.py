"""`BwrapSandbox`: commands in bubblewrap namespaces, confined to their worktree.

What a command sees: the system read-only (`/usr` and the `/bin`-style links), an `/etc`
of what programs need (`swarm._sandbox._etc`: no `shadow`, a `passwd` of its own), its
own `/proc` with the kernel's parts covered read-only (`/proc/sys`, `sysrq-trigger`,
`fs`, ...) or masked, its own `/dev` (read-only but for the device nodes) with a sized
`/dev/shm`, and a sized memory-backed `/tmp`; the root bwrap builds is read-only too
(each was memory a command could fill). Its working directory (a worktree) is writable,
except the `.git` file that names its git dir; the repository's git common dir read-only,
bound entry by entry without swarm's own (the other worktrees, `swarm-worktrees/`) and
with its config filtered (`_gitconfig`: no remotes, no credentials); and the policy's
extra paths (the repository's interpreter prefix, `include:` targets). Not the user's home, the main
checkout, the journal nor other worktrees: they are simply not mounted. `HOME` and
`TMPDIR` point into the sandbox's `/tmp`.

Who it runs as: never root to the host's kernel. When swarm is root, bubblewrap makes no
user namespace and builds the mounts as root; the command's first step (a static helper,
else `setpriv`) drops to an unprivileged uid with no capabilities in any set and `no_new_privs`
(`swarm._sandbox._identity`, which also lets that uid write the worktree). Otherwise, an
unprivileged uid (swarm's own) in a user namespace of its own, in which it may make no
other (`--disable-userns`), with no capabilities (`--cap-drop ALL`). Either way in a
session of its own (`--new-session`: no keystrokes pushed into a terminal) and under a
seccomp filter (`swarm._sandbox._seccomp`: no `ptrace`, keyrings, mounts, nested user
namespaces, `TIOCSTI`, ...). The kernel's files stay covered and `/etc` reduced as well.
Its own PID namespace (when the command ends or is killed, the kernel kills everything
left in it, `setsid` children included) and `--die-with-parent` (a dying swarm takes its
sandboxes along). The network namespace is its own unless `network = "host"`: only its
own loopback works. With `network = "loopback"` or `"allow"` the command's lane
(`swarm._sandbox._egress`) is shown at `/run/swarm-net`, `socat` listens on 127.0.0.1 for
the proxy and each forwarded port before the command starts, and
`HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` (both cases) point at the proxy, `NO_PROXY` at the
sandbox's own loopback.
Limits: RLIMIT_DATA and RLIMIT_FSIZE (`Limits.largest_file_mb`) set by `ulimit` on the
way in; the process count is watched (`guard`), since RLIMIT_NPROC counts the user's
processes machine-wide and does not bind root at all; where swarm may make cgroups, the
kernel caps the processes and the whole command's memory too, each command in cgroups of
its own (`swarm._sandbox._pids`); where it may not and is not root, the kernel caps the
processes of a PID namespace of the command's own around bubblewrap's, and the guard's kill
takes that whole namespace at once (`swarm._sandbox._pidns`); where no memory cgroup can
be made, the guard adds up the command's memory and kills it past the limit
(`swarm._sandbox._memory`).
The guard also keeps the worktree's disk quota where the worktree is not a filesystem of
its own (`swarm._sandbox._disk`: a check; `swarm._sandbox._volume`: the kernel's).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from pathlib import Path
from typing import Self

import anyio

from swarm._sandbox import _disk, _identity, _pidns, _pids, _seccomp, _volume
from swarm._sandbox._egress import Egress
from swarm._sandbox._etc import etc_mounts, sandbox_ids
from swarm._sandbox._gitconfig import shown_config
from swarm._sandbox._memory import MemoryWatch
from swarm._sandbox._proxy import AllowList
from swarm._sandbox._seats import Seats
from swarm._sandbox.base import Lane, Launch, Sandbox, SandboxPolicy, admin_of, git_dir
from swarm.config._run import PROXY_PORT
from swarm.errors import ConfigError

__all__ = ["BwrapSandbox", "bwrap_path", "writable_for_commands"]

log = logging.getLogger(__name__)

_SYSTEM_DIRS = ("/usr",)
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_GUARD_INTERVALS_S = (0.005, 0.01, 0.02, 0.04, 0.05)
"""How long the guard waits before each look at the process count, the last one over and
over: a fork bomb that starts at once is caught at a few hundred processes, not at the
first look 50 ms in (about 6,000 processes a second on 2 cores)."""
_CAPPED_INTERVALS_S = (0.05, 0.1, 0.25)
"""The same for a command in a pids cgroup: the kernel keeps it under its cap, so the guard
only ends one that would spin there on failed forks (a fifth of the looks: a hundred
commands at once each woke the event loop twenty times a second)."""
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


_PROC_READ_ONLY = ("sys", "sysrq-trigger", "fs", "acpi", "scsi")
"""What of the sandbox's own `/proc` writes to the kernel itself, not to the namespace:
covered read-only by the host's (bwrap covers `irq` and `bus` itself, but not `sys` when
swarm runs as root: `echo 1 > /proc/sys/kernel/core_uses_pid` changed the host). Each
cover is a bind mount (about 1 ms of a command's start on a loaded machine): only those
the host has."""
_PROC_HIDDEN = ("kcore", "timer_list", "sched_debug")
"""Files of `/proc` that show the kernel's memory or state to their owner, root (whom a
sandboxed command still is, to the host's kernel: see `swarm._sandbox._etc`):
`/dev/null` instead, as Docker and Podman mask them (`kmsg` needs a capability the
command lacks)."""
_LANE_DIR = "/run/swarm-net"
_MOUNTED = ("/usr", "/etc", "/proc", "/dev", "/tmp", "/bin", "/lib", "/lib64", "/sbin")
_CACHED_WORKTREES = 4096
_SWARM_OWN = "swarm-"
"""What swarm keeps in a git dir (`swarm-worktrees/`, removed worktrees' `swarm-trash-*`):
no command's git needs it, other agents' work is there, and the worktrees there are
filesystems of their own (`_volume`) that come and go while commands start."""
_NOT_SHOWN = frozenset(
    {"logs", "description", "branches", "COMMIT_EDITMSG", "ORIG_HEAD", "FETCH_HEAD"}
)
"""What of a git dir a worktree's git never reads (reflogs, the last commit's message) or
only writes: each entry shown is one more mount to make. (The `index` is shown: a cluster
node's clone has its git dir to itself, and its index is the worktree's.)"""
_PROXIED = ("loopback", "allow")


def bwrap_path() -> str | None:
    """Where the `bwrap` executable is, or None."""
    return shutil.which("bwrap")


def socat_path() -> str | None:
    """Where `socat` is (the forwarder inside a proxied sandbox), or None."""
    return shutil.which("socat")


class BwrapSandbox(Sandbox):
    """Runs each command in a fresh bubblewrap sandbox confined to its working directory."""

    kind = "bwrap"
    contains_processes = True  # its own pid namespace: the kernel kills what is left in it

    def __init__(
        self,
        policy: SandboxPolicy | None = None,
        *,
        bwrap: str | None = None,
        egress: Egress | None = None,
        seats: Seats | None = None,
    ) -> None:
        found = bwrap or bwrap_path()
        if found is None:
            raise ConfigError(
                "sandbox kind 'bwrap' was asked for, but bubblewrap is not installed "
                "(Debian/Ubuntu: apt-get install bubblewrap); or choose kind = 'none'",
                key="sandbox.kind",
            )
        self.bwrap = found
        self.policy = policy or SandboxPolicy()
        self.egress = egress
        limits = self.policy.limits
        self.seats = seats or Seats(limits.max_processes, limits.memory_mb)
        if self.egress is None and self.policy.network in _PROXIED:
            self.egress = Egress(AllowList.parse(self.policy.allow, self.policy.network))
        self._seen: dict[tuple[Path, bool], tuple[object, Path, list[str]]] = {}
        self._layouts: dict[Path, Path | None] = {}
        self._entries: dict[Path, tuple[int, tuple[str, ...]]] = {}
        """By git dir: its entries a command sees (`_shown`), and the directory's mtime then."""
        self._seccomp = _seccomp.path()
        self._made: set[Path] = set()
        """Directories `_head` makes searchable (`_searchable_parents`)."""
        self._socat = ""
        if self.egress is not None:
            self._socat = socat_path() or ""
            if not self._socat:
                raise ConfigError(
                    f"sandbox network {self.policy.network!r} needs socat inside the sandbox, "
                    "and it is not installed (Debian/Ubuntu: apt-get install socat)",
                    key="sandbox.network",
                )

    def __repr__(self) -> str:
        return f"BwrapSandbox(network={self.policy.network!r})"

    def with_policy(self, policy: SandboxPolicy) -> Self:
        return type(self)(policy, bwrap=self.bwrap, egress=self.egress, seats=self.seats)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[object]:
        """The proxy of a proxied network, and launchers ready in their pids cgroups."""
        _say_what_is_enforced(self.policy)
        seats = self.seats.open() if self._seated else nullcontext()
        async with seats, self.egress.session() if self.egress else nullcontext():
            yield None

    def lane(self) -> AbstractAsyncContextManager[Lane | None]:
        return self.egress.lane() if self.egress is not None else nullcontext(None)

    def launch(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        git_write: bool = False,
        lane: Lane | None = None,
    ) -> Launch:
        root, worktree = self._worktree(cwd, git_write)
        inner = dict(env)
        inner.update(HOME="/tmp", TMPDIR="/tmp")
        if lane is not None:
            run_dir = _searchable_parents(Path(_LANE_DIR), set())
            worktree = [*worktree, *run_dir, "--ro-bind", str(lane.directory), _LANE_DIR]
            inner.update(_proxy_env())
            prelude = self._prelude(_forwarders(self._socat, lane.forwarded))
            command = [*self._drop, *prelude, *argv]
        elif self.egress is not None:
            raise RuntimeError("a proxied sandbox's command needs its lane (Sandbox.lane())")
        else:
            command = [*self._drop, *self._limited(argv)]
        line = [*self._head, *worktree, *self._tail, *command]
        if self._seated and (seat := self.seats.take()) is not None:
            return Launch(line, inner, root, seat.cgroup, seat)
        cgroup = self._new_cgroup()
        if cgroup is not None:
            return Launch(_pids.joined(cgroup, line), inner, root, cgroup)
        capped = _pidns.capped(line, self.policy.limits.max_processes)
        if capped is not None:
            return Launch(capped, inner, root, capped=True)
        return Launch(line, inner, root)

    @property
    def _seated(self) -> bool:
        """Seats (launchers in cgroups, started through pidfds) fit the policy."""
        return self.policy.cgroups and self.policy.pidfd

    def _new_cgroup(self) -> Path | None:
        """A command's own cgroup (and its memory twin): `swarm._sandbox._pids`."""
        if not self.policy.cgroups:
            return None
        return _pids.make(self.policy.limits.max_processes, self.policy.limits.memory_mb)

    def ended(self, launch: Launch) -> list[str]:
        limit = self.policy.limits.memory_mb
        if launch.cgroup is None or limit is None or not _pids.oom_kills(launch.cgroup):
            return []
        return [f"the command passed its memory limit of {limit} MB; the kernel killed it"]

    def release(self, launch: Launch) -> bool:
        if launch.seat is not None:
            self.seats.replace(launch.seat)
        return launch.cgroup is None or _pids.remove(launch.cgroup)

    @functools.cached_property
    def _head(self) -> list[str]:
        """bwrap and the mounts every command gets: the system, /proc, /dev, /tmp, the
        policy's read-only paths (built once: the policy does not change)."""
        args = [*(_seccomp.opener(self._seccomp) if self._seccomp else []), self.bwrap]
        for name in _SYSTEM_DIRS:
            args += ["--ro-bind-try", name, name]
        for name in _SYSTEM_LINKS:
            if os.path.islink(name):
                args += ["--symlink", os.readlink(name), name]
            elif os.path.isdir(name):
                args += ["--ro-bind", name, name]
        args += etc_mounts(resolver=self.policy.network == "host")
        args += ["--proc", "/proc"]
        for name in _PROC_READ_ONLY:
            if os.path.lexists(f"/proc/{name}"):
                args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
        for name in _PROC_HIDDEN:
            if os.path.lexists(f"/proc/{name}"):
                args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
        shm, tmp = (str(mb * _MB) for mb in _memory_backed_mb(self.policy))
        # /dev is a tmpfs of half the machine's memory: its own /dev/shm, sized, and the
        # rest read-only (the device nodes still work), so neither fills the memory
        # (each everyone's to write, sticky: the command is not the root that mounts them)
        args += ["--dev", "/dev", "--perms", "1777", "--size", shm, "--tmpfs", "/dev/shm"]
        args += ["--remount-ro", "/dev", "--perms", "1777", "--size", tmp, "--tmpfs", "/tmp"]
        if (drop := self._dropper) and drop.mounts:  # the drop step, shown read-only
            args += [*_searchable_parents(Path(drop.argv[0]), self._made), *drop.mounts]
        for path in self.policy.read_only:
            parents = _searchable_parents(path, self._made)
            args += [*parents, "--ro-bind-try", str(path), str(path)]
        if self.policy.network == "host":
            args += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
        return args

    @functools.cached_property
    def _tail(self) -> list[str]:
        if _identity.dropping():  # swarm is root: no user namespace, a step drops
            args = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
            if self.policy.network != "host":
                args.append("--unshare-net")
            args += ["--cap-drop", "ALL"]
            for name in _identity.KEPT_CAPABILITIES:
                args += ["--cap-add", name]
        else:
            uid, gid = sandbox_ids()
            args = ["--unshare-all", "--unshare-user", "--uid", str(uid), "--gid", str(gid)]
            # no user namespace inside (its root could mount a /proc of its own), no
            # capabilities
            args += ["--disable-userns", "--cap-drop", "ALL"]
            if self.policy.network == "host":
                args.append("--share-net")
        # no terminal to push keystrokes into (TIOCSTI): its own session
        args += ["--new-session", "--die-with-parent"]
        if self._seccomp is not None:
            args += ["--seccomp", str(_seccomp.FD)]
        # the root bwrap builds (and the /etc in it) is a tmpfs: read-only once every mount
        # point is made, or it would hold what a command writes, in memory, unbounded
        return [*args, "--remount-ro", "/", "--"]

    @functools.cached_property
    def _dropper(self) -> _identity.Drop | None:
        """How the command sheds root when swarm is root (`swarm._sandbox._identity`)."""
        return _identity.dropping()

    @functools.cached_property
    def _drop(self) -> list[str]:
        """The command's first step when swarm is root."""
        return list(self._dropper.argv) if self._dropper else []

    def _ulimits(self, *, bash: bool = False) -> str:
        """The rlimits as one shell line. Units: KiB for -d; for -f, 512 B blocks in sh
        (POSIX) but 1 KiB blocks in bash."""
        limits, steps = self.policy.limits, []
        if limits.memory_mb is not None:
            steps.append(f"ulimit -d {limits.memory_mb * 1024} || exit 126;")
        if limits.largest_file_mb is not None:
            blocks = limits.largest_file_mb * (1024 if bash else 2048)
            steps.append(f"ulimit -f {blocks} || exit 126;")
        return " ".join(steps)

    def _limited(self, argv: Sequence[str]) -> list[str]:
        """`argv` with the rlimits set on the way in. A `bash -c SCRIPT` (every `run`,
        `run_tests` and check) gets them at the head of its script, on its first line (no
        line number moves): one exec fewer than a `/bin/sh` before it, ~0.8 ms of CPU."""
        if len(argv) >= 3 and os.path.basename(argv[0]) == "bash" and argv[1] == "-c":
            limits = self._ulimits(bash=True)
            return [argv[0], "-c", f"{limits} {argv[2]}", *argv[3:]] if limits else list(argv)
        return [*self._prelude([]), *argv] if self._ulimits() else list(argv)

    def _prelude(self, steps: Sequence[str]) -> list[str]:
        """A `/bin/sh` that sets the rlimits, runs `steps`, then execs the command: ~1 ms
        where the `prlimit` binary took 4-7 ms."""
        return ["/bin/sh", "-c", " ".join([self._ulimits(), *steps, 'exec "$@"']), "sh"]

    def _worktree(self, cwd: Path, git_write: bool) -> tuple[Path, list[str]]:
        """`cwd` resolved and its mounts: built once per worktree (and git config version;
        `shown_config` stats the config each time)."""
        if cwd in self._layouts:
            common = self._layouts[cwd]
        else:
            common = self._layouts[cwd] = git_dir(cwd)
        config = shown_config(common) if common is not None else None
        shown = self._shown(common) if common is not None else ()
        key = (cwd, git_write)
        cached = self._seen.get(key)
        if cached is not None and cached[0] == (config, shown):
            return cached[1], cached[2]
        if len(self._seen) > _CACHED_WORKTREES:  # a long-lived sandbox: forget old worktrees
            self._seen.clear()
            self._layouts.clear()
            self._entries.clear()
        root = cwd.resolve()
        args = self._worktree_mounts(root, git_write, common, shown, config)
        self._seen[key] = ((config, shown), root, args)
        return root, args

    def _shown(self, common: Path) -> tuple[str, ...]:
        """The entries of the git dir `common` a command sees (`_shows`). Listed again only
        when the directory changed: a stat per command."""
        try:
            changed = common.stat().st_mtime_ns
            cached = self._entries.get(common)
            if cached is not None and cached[0] == changed:
                return cached[1]
            with os.scandir(common) as entries:
                names = tuple(sorted(e.name for e in entries if _shows(e.name)))
        except OSError:
            return ()
        self._entries[common] = (changed, names)
        return names

    def _worktree_mounts(
        self,
        cwd: Path,
        git_write: bool,
        common: Path | None,
        shown: Sequence[str],
        config: Path | None,
    ) -> list[str]:
        args: list[str] = []
        made = set(self._made)  # the parents `_head` made
        if common is not None:
            # each entry on its own, not the directory: a bind of the directory takes every
            # mount below it along (the other worktrees' filesystems, `_volume`), and one
            # unmounted while bwrap makes them read-only fails the command's start
            args += _searchable_parents(common / "entry", made)  # `common` and its parents
            for name in shown:
                # the config with no remotes, no credentials
                source = config if name == "config" and config is not None else common / name
                args += ["--ro-bind-try", str(source), str(common / name)]
            admin = admin_of(cwd)
            if git_write and admin is not None and admin.is_relative_to(common):
                # a hooked git command (`swarm._sandbox.hooks`): the worktree's own git
                # directory writable, but where it says the repository is
                args += ["--bind", str(admin), str(admin)]
                writable_for_commands(admin)
                for name in ("commondir", "gitdir"):
                    args += ["--ro-bind-try", str(admin / name), str(admin / name)]
        for path in self.policy.writable:
            args += [*_searchable_parents(path, made), "--bind-try", str(path), str(path)]
            writable_for_commands(path)
        args += [*_searchable_parents(cwd, made), "--bind", str(cwd), str(cwd)]
        writable_for_commands(cwd)
        if (cwd / ".git").is_file():  # where git finds its metadata: not the agent's to move
            args += ["--ro-bind", str(cwd / ".git"), str(cwd / ".git")]
        return [*args, "--chdir", str(cwd)]

    async def guard(self, pid: int, launch: Launch | None = None) -> str | None:
        """Kill the sandbox (its PID namespace's init: bubblewrap's, or that of the capped
        namespace around it, `Launch.capped`) when it holds too many processes, or, where
        no memory cgroup holds the command, too much memory (`swarm._sandbox._memory`). In
        a pids cgroup (`swarm._sandbox._pids`: the kernel caps it) its processes are only
        counted once its tasks are more than the limit: one small file read."""
        limit = self.policy.limits.max_processes
        cgroup = launch.cgroup if launch is not None else None
        capped = launch is not None and launch.capped
        memory = self._memory_watch(cgroup)
        if cgroup is not None and memory is None and not self.policy.guard_in_cgroup:
            return None  # the kernel's caps alone
        init: int | None = None
        counted = cgroup is None or memory is not None  # the guard alone holds a limit
        intervals = _GUARD_INTERVALS_S if counted else _CAPPED_INTERVALS_S
        waits = iter(intervals)
        count: _pids.TaskCount | None = None  # cgroup's count, read through one open file
        disk = self._disk_watch(launch)
        try:
            while True:
                wait = next(waits, intervals[-1])
                await anyio.sleep(wait if disk is None else disk.next_look_s(wait))
                if disk is not None and (full := disk.over()) is not None:
                    with contextlib.suppress(OSError):
                        os.kill(init or pid, signal.SIGKILL)  # bwrap's: the namespace goes
                    return full
                try:
                    if init is None:
                        found = _children(pid)
                        if not found:
                            continue
                        init = found[0]
                    crowded = True
                    if cgroup is not None:
                        count = count or _pids.TaskCount(cgroup)
                        crowded = count() > limit  # else no more processes than tasks
                except OSError:
                    return None  # ended, or not ours to look into
                if not crowded and memory is None:
                    continue
                try:
                    # the processes are counted in bubblewrap's namespace, whose /proc lists
                    # them: in the capped one, two down (bubblewrap, then its init)
                    inner = _descend(init, 2) if capped else init
                    proc = None if inner is None else _own_proc(inner)
                    if proc is None:
                        continue
                    why = (
                        f"more than {limit} processes at once; the command was killed"
                        if crowded and _more_processes_than(proc, limit)
                        else None
                    )
                    if why is None and memory is not None and inner is not None:
                        why = memory.over(inner)
                except OSError:
                    # bwrap's first child may be a step of its setup that is gone by now,
                    # or not yet readable: it changes its uid inside the user namespace,
                    # which leaves it undumpable (its /proc/PID/root closed to a non-root
                    # swarm) until it execs; a loaded machine sees both. Look again, for as
                    # long as the command runs: giving up let a fork bomb run free
                    init = None
                    continue
                if why is not None:
                    try:
                        os.kill(init, signal.SIGKILL)  # the kernel kills the whole namespace
                    except ProcessLookupError:
                        return None
                    return why
        finally:
            if count is not None:
                count.close()

    def _memory_watch(self, cgroup: Path | None) -> MemoryWatch | None:
        """What adds up the command's memory, where no memory cgroup caps it as a whole."""
        limit = self.policy.limits.memory_mb
        if limit is None or (cgroup is not None and _pids.memory_usable()):
            return None
        return MemoryWatch(limit)

    def _disk_watch(self, launch: Launch | None) -> _disk.DiskWatch | None:
        """The quota of the command's worktree (`swarm._sandbox._disk`), if it has one."""
        limit = self.policy.limits.disk_mb
        if launch is None or limit is None or _volume.quota_of(launch.cwd) is not None:
            return None  # no quota, or the kernel holds it
        try:
            return _disk.DiskWatch(launch.cwd, limit)
        except OSError:
            return None

    def denials(self, output: str) -> list[str]:
        notes: list[str] = []
        for line in output.splitlines():
            if "Read-only file system" in line:
                found = next((m for r in _EROFS_PATH if (m := r.search(line))), None)
                where = f": {found.group(1).strip(_QUOTES)}" if found else ""
                note = f"write outside the worktree denied (read-only file system){where}"
                if note not in notes:
                    notes.append(note)
        limits = self.policy.limits
        if limits.largest_file_mb is not None and "File size limit exceeded" in output:
            notes.append(_file_size_note(limits.largest_file_mb, limits.disk_mb))
        if self.policy.network != "host" and any(s in output for s in _NO_NETWORK):
            notes.append(_NETWORK_NOTES[self.policy.network])
        shm, tmp = _memory_backed_mb(self.policy)
        if "No space left on device" in output and (shm, tmp) != (limits.shm_mb, limits.tmp_mb):
            notes.append(
                f"no space left on a device: if it was /tmp or /dev/shm, they hold at most "
                f"{tmp} MB and {shm} MB here, sized to fit the command's memory limit of "
                f"{limits.memory_mb} MB (no memory cgroup can be made)"
            )
        return notes[:5]


@functools.cache
def _say_what_is_enforced(policy: SandboxPolicy) -> None:
    """Where swarm cannot make a memory cgroup, say once what limits memory instead; where
    a root swarm's commands keep uid 0 on the host, say so."""
    if (problem := _identity.problem()) is not None:
        log.warning("%s", problem)
    limits = policy.limits
    if limits.disk_mb is not None and (why := _volume.unusable()) is not None:
        log.warning(
            "worktrees cannot be filesystems of their own here (%s): a worktree's disk quota "
            "(%d MB) is a check that commands writing many files fast may pass before they "
            "are killed; the kernel holds each file to %s MB",
            why,
            limits.disk_mb,
            limits.largest_file_mb,
        )
    if limits.memory_mb is None or (policy.cgroups and _pids.memory_usable()):
        return
    why = (
        "it needs cgroup v1's memory hierarchy writable, or cgroup v2's memory controller "
        "delegated to the cgroup swarm runs in"
        if policy.cgroups
        else "[sandbox] cgroups = false"
    )
    log.warning(
        "no memory cgroup can be made here (%s): the kernel limits a command's memory per "
        "process (RLIMIT_DATA, %d MB) and its /tmp and /dev/shm by their sizes (%d MB and "
        "%d MB, fitted within the limit); swarm adds up what the command holds as a whole "
        "(processes, shared memory, /tmp, /dev/shm) every 50 ms and kills it past %d MB, so "
        "a command allocating fast may pass the limit for that long; its processes %s",
        why,
        limits.memory_mb,
        *reversed(_memory_backed_mb(policy)),
        limits.memory_mb,
        _process_cap(policy),
    )


def _memory_backed_mb(policy: SandboxPolicy) -> tuple[int, int]:
    """The sizes (MB) of a command's `/dev/shm` and `/tmp`: as set where a memory cgroup
    holds the command's memory as a whole; elsewhere fitted together inside `memory_mb`, so
    that the kernel holds what files there take to the limit exactly (the guard, which adds
    them to the processes' memory, only looks now and then: a command that filled them
    and ended at once could pass it)."""
    limits = policy.limits
    if limits.memory_mb is None or (policy.cgroups and _pids.memory_usable()):
        return limits.shm_mb, limits.tmp_mb
    shm = min(limits.shm_mb, limits.memory_mb // 2)
    return shm, min(limits.tmp_mb, limits.memory_mb - shm)


def _process_cap(policy: SandboxPolicy) -> str:
    """What holds a command's processes to the limit, in a few words."""
    if policy.cgroups and _pids.usable():
        return "by a pids cgroup"
    counted = "by swarm counting them (no pids cgroup)"
    if _pidns.helper() is None:
        return counted
    tasks = _pidns.pid_max(policy.limits.max_processes) - 1
    return f"{counted} and at most {tasks} tasks by the kernel (a PID namespace of their own)"


def _shows(name: str) -> bool:
    """Whether a command sees the git dir's entry `name` (see `_SWARM_OWN`, `_NOT_SHOWN`)."""
    return not (name.startswith(_SWARM_OWN) or name in _NOT_SHOWN or name.endswith(".lock"))


def _searchable_parents(path: Path, made: set[Path]) -> list[str]:
    """bwrap, as root, makes a mount point's missing parents 0700: they shut the
    unprivileged command (`swarm._sandbox._identity`) out of what is bound below them. They
    are made 0755 first; `made`: those already made (added to)."""
    if not _identity.dropping():
        return []
    args: list[str] = []
    for parent in reversed(path.parents[:-1]):
        if parent not in made and str(parent) not in _MOUNTED:
            made.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def writable_for_commands(path: Path) -> None:
    """Let sandboxed commands' unprivileged uid write `path` and what is made there later
    (`swarm._sandbox._identity`; nothing when swarm is not root). A worktree made empty and
    granted before its files are checked out is not walked at its first command."""
    if not _identity.dropping():
        return
    try:
        _identity.grant(path)
    except OSError as exc:
        log.warning(
            "%s cannot be made writable for the sandbox's uid %d (no POSIX ACLs here? %s): "
            "commands will fail to write there",
            path,
            _identity.HOST_UID,
            exc,
        )


def _file_size_note(largest_mb: int, disk_mb: int | None) -> str:
    if largest_mb == disk_mb:
        return (
            f"a file grew past {disk_mb} MB, the most any file may hold (the worktree's disk "
            "quota); the write was refused"
        )
    return f"a file grew past the sandbox's limit of {largest_mb} MB"


_NETWORK_NOTES = {
    "off": "network is off: only servers started inside this command are reachable",
    "loopback": "network is loopback: only the host ports in [sandbox] allow are reachable",
    "allow": "network goes through swarm's proxy (HTTPS_PROXY): only [sandbox] allow is "
    "reachable, and only by clients that use the proxy",
}


def _proxy_env() -> dict[str, str]:
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"), url)
    env["NO_PROXY"] = "localhost,127.0.0.1,::1"
    return {**env, **{name.lower(): value for name, value in env.items()}}


def _forwarders(socat: str, ports: Sequence[int]) -> list[str]:
    """Shell steps that start a `socat` per listening port (the proxy's, each forwarded
    one) and wait until all listen (/proc/net/tcp read with shell builtins, a 2 ms sleep
    between reads: a busy loop would take the core socat needs on a loaded machine)."""
    listens = [(PROXY_PORT, f"{_LANE_DIR}/proxy"), *((p, f"{_LANE_DIR}/port-{p}") for p in ports)]
    quiet = "</dev/null >/dev/null 2>&1"
    starts = [
        f"{socat} TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:{path} {quiet} &"
        for port, path in listens
    ]
    patterns = "|".join(f"0100007F:{port:04X}:0A" for port, _ in listens)
    wait = (
        f"i=0; while [ $i -lt 5000 ]; do n=0; while read -r _ l _ st _; do "
        f'case "$l:$st" in {patterns}) n=$((n+1));; esac; done </proc/net/tcp; '
        f"[ $n -ge {len(listens)} ] && break; i=$((i+1)); sleep 0.002; done"
    )
    return [*starts, wait + ";"]


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _descend(pid: int, levels: int) -> int | None:
    """`pid`'s first child's first child ..., `levels` down; None where one has none yet."""
    for _ in range(levels):
        found = _children(pid)
        if not found:
            return None
        pid = found[0]
    return pid


def _own_proc(init: int) -> str | None:
    """The `/proc` the sandbox whose PID namespace's init is `init` sees, once it is its
    own: while bwrap is still setting up, `init`'s root is the host's, whose /proc lists
    every process of the machine (a normal user's command, whose processes no cgroup counts
    first, was killed for the host's)."""
    proc = f"/proc/{init}/root/proc"
    return None if os.stat(proc).st_dev == _host_proc_device() else proc


def _more_processes_than(proc: str, limit: int) -> bool:
    """Whether the sandbox's PID namespace holds more than `limit` processes: the numeric
    entries of its own `proc`, read only that far (listing 3,500 forking processes in full
    took 0.9 s, while the bomb went on)."""
    count = 0
    with os.scandir(proc) as entries:
        for entry in entries:
            count += entry.name.isdigit()
            if count > limit:
                return True
    return False


@functools.cache
def _host_proc_device() -> int:
    return os.stat("/proc").st_dev
