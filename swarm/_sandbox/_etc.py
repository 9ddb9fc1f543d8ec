"""The `/etc` a sandboxed command sees: what programs need to run, nothing of the host's
accounts or secrets.

Copied from the host into a directory shown read-only as `/etc` (one bind mount: a bind
per entry cost bubblewrap ~1 ms each, 40 ms a command), made once per machine, user and
state of the copied files and shared by every process (`swarm._sandbox._store`): the dynamic
loader's cache and config, TLS certificates,
`alternatives` (where Debian's `python3`, `java`, `editor` links point), locale and time
zone data, name-service plumbing (`nsswitch.conf`, `hosts`, `services`, `protocols`), the
OS release files and a few shell defaults. Made by swarm: `passwd` and `group` holding
only `root`, `nobody` and the sandbox's own user (`SANDBOX_USER`), an `nsswitch.conf`
that looks nowhere else (`_NSSWITCH`), and a `gitconfig`
that lets git work in a worktree the command does not own, so `id`, `whoami`,
`getpass.getuser()` and `~` work. Not shown: `shadow`, `gshadow`, `sudoers`, `ssh/`
(host keys), `pip.conf`, `npmrc`, `gitconfig`, `environment` and everything else a host
keeps there (credentials and index URLs with tokens live in such files). Of what is
copied, only what any user may read, and no `private/` directory (`ssl/private`,
`pki/tls/private` hold keys); symlinks stay symlinks.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
from pathlib import Path

from swarm._sandbox import _identity, _store

__all__ = ["SANDBOX_USER", "etc_mounts", "sandbox_ids"]

SANDBOX_USER = "swarm"
"""The name of the user a sandboxed command runs as (its uid: `sandbox_ids`)."""

_SHOWN = (
    *("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "pki"),
    *("crypto-policies", "alternatives", "locale.alias", "locale.conf", "default/locale"),
    *("localtime", "timezone", "nsswitch.conf", "host.conf", "gai.conf", "hosts"),
    *("services", "protocols", "networks", "mime.types", "magic", "magic.mime"),
    *("os-release", "lsb-release", "debian_version", "redhat-release", "alpine-release"),
    *("shells", "inputrc", "bash.bashrc", "profile", "terminfo", "fonts", "xml", "sgml"),
    *("python3", "perl", "java-17-openjdk", "mtab"),
)
"""Host `/etc` entries shown (those that exist), read-only. `resolv.conf` is added only
where the command has the host's network (`etc_mounts`)."""
_UNPRIVILEGED_UID = 1000
"""The uid a command has inside its user namespace when swarm runs as root without
a drop step (`swarm._sandbox._identity`; any other user keeps its own)."""
_GITCONFIG = "[safe]\n\tdirectory = *\n"
"""The sandbox's system git config: the worktree is root's while the command is not
(`swarm._sandbox._identity`), and git refuses a repository another user owns."""
_NSSWITCH = (
    "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
    "protocols: files\nservices: files\nethers: files\nrpc: files\n"
)
"""The sandbox's name service: its own files only. The host's may name `systemd`, `sss` or
`ldap`: every lookup (git's of the committer, `id`, `setpriv`'s of the uid it drops to
where it is the drop step) loaded their libraries and tried their sockets (4 failed
connects, ~0.3 ms of each `setpriv`), and could only have answered with the host's
accounts."""
_MADE = ("passwd", "group", "gitconfig", "nsswitch.conf")
"""What swarm writes itself: never copied from the host."""


def sandbox_ids() -> tuple[int, int]:
    """The uid and gid a sandboxed command runs as: never 0 (`swarm._sandbox._identity`)."""
    if _identity.dropping():
        return _identity.HOST_UID, _identity.HOST_GID
    uid, gid = os.getuid(), os.getgid()
    return (uid or _UNPRIVILEGED_UID, gid or _UNPRIVILEGED_UID)


def etc_mounts(*, resolver: bool) -> list[str]:
    """bwrap arguments that show the sandbox's `/etc`; `resolver`: with `resolv.conf` (a
    command with the host's network)."""
    return ["--ro-bind", str(_made(resolver)), "/etc"]


@functools.cache
def _made(resolver: bool) -> Path:
    """The directory shown as `/etc` (`swarm._sandbox._store`: made once per machine, user
    and state of the host's files, shared by every process)."""
    uid, gid = sandbox_ids()
    sources = _sources((*_SHOWN, "resolv.conf") if resolver else _SHOWN)
    made = _made_files(uid, gid)
    key = repr((sorted(made.items()), [(rel, _identity_of(info)) for rel, info in sources]))
    return _store.tree("etc", key, functools.partial(_build, sources, made))


def _made_files(uid: int, gid: int) -> dict[str, str]:
    """The files swarm writes into the sandbox's `/etc`, by name."""
    return {
        "passwd": "root:x:0:0:root:/root:/bin/sh\n"
        f"{SANDBOX_USER}:x:{uid}:{gid}:swarm sandbox:/tmp:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\n{SANDBOX_USER}:x:{gid}:\nnogroup:x:65534:\n",
        "gitconfig": _GITCONFIG,
        "nsswitch.conf": _NSSWITCH,
    }


def _identity_of(info: os.stat_result) -> tuple[int, int, int, int]:
    return (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ino)


def _sources(names: tuple[str, ...]) -> list[tuple[str, os.stat_result]]:
    """The host's entries to copy, as (path under `/etc`, lstat): what anyone may read,
    no `private` directory; a directory before what is in it."""
    found: list[tuple[str, os.stat_result]] = []
    stack = [name for name in reversed(names) if name not in _MADE]
    while stack:
        rel = stack.pop()
        try:
            info = os.lstat(Path("/etc") / rel)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and Path(rel).name != "private":
            found.append((rel, info))
            with contextlib.suppress(OSError):
                names_in = sorted(os.listdir(Path("/etc") / rel), reverse=True)
                stack += [f"{rel}/{child}" for child in names_in]
        elif stat.S_ISLNK(info.st_mode) or (
            stat.S_ISREG(info.st_mode) and info.st_mode & stat.S_IROTH
        ):
            found.append((rel, info))
    return found


def _build(sources: list[tuple[str, os.stat_result]], made: dict[str, str], where: Path) -> None:
    for rel, info in sources:
        target = where / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(info.st_mode):
            with contextlib.suppress(OSError):
                target.symlink_to(os.readlink(Path("/etc") / rel))
        elif stat.S_ISDIR(info.st_mode):
            target.mkdir(exist_ok=True)
        else:
            with contextlib.suppress(OSError):
                shutil.copyfile(Path("/etc") / rel, target)
    for name, text in made.items():
        (where / name).write_text(text)
    for path in (where, *where.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
