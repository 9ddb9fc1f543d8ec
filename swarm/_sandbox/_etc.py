"""The `/etc` a sandboxed command sees: what programs need to run, nothing of the host's
accounts or secrets.

Copied from the host, once per process, into a directory shown read-only as `/etc` (one
bind mount: a bind per entry cost bubblewrap ~1 ms each, 40 ms a command): the dynamic
loader's cache and config, TLS certificates,
`alternatives` (where Debian's `python3`, `java`, `editor` links point), locale and time
zone data, name-service plumbing (`nsswitch.conf`, `hosts`, `services`, `protocols`), the
OS release files and a few shell defaults. Made by swarm: `passwd` and `group` holding
only `root`, `nobody` and the sandbox's own user (`SANDBOX_USER`), and a `gitconfig`
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
import tempfile
import weakref
from pathlib import Path

from swarm._sandbox import _identity

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
`setpriv` (any other user keeps its own)."""
_GITCONFIG = "[safe]\n\tdirectory = *\n"
"""The sandbox's system git config: the worktree is root's while the command is not
(`swarm._sandbox._identity`), and git refuses a repository another user owns."""


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
    """The directory shown as `/etc` (made once per process, removed when it exits)."""
    uid, gid = sandbox_ids()
    where = Path(tempfile.mkdtemp(prefix="swarm-etc-"))
    weakref.finalize(_made, shutil.rmtree, where, ignore_errors=True)
    for name in (*_SHOWN, "resolv.conf") if resolver else _SHOWN:
        _copy(Path("/etc") / name, where / name)
    (where / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\n"
        f"{SANDBOX_USER}:x:{uid}:{gid}:swarm sandbox:/tmp:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (where / "group").write_text(f"root:x:0:\n{SANDBOX_USER}:x:{gid}:\nnogroup:x:65534:\n")
    (where / "gitconfig").write_text(_GITCONFIG)
    for path in (where, *where.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return where


def _copy(source: Path, target: Path) -> None:
    """`source` (a file, a symlink or a directory tree) at `target`: what anyone may read,
    no `private` directory."""
    try:
        info = source.lstat()
    except OSError:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if stat.S_ISLNK(info.st_mode):
        target.symlink_to(os.readlink(source))
    elif stat.S_ISDIR(info.st_mode) and source.name != "private":
        target.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            for child in sorted(source.iterdir()):
                _copy(child, target / child.name)
    elif stat.S_ISREG(info.st_mode) and info.st_mode & stat.S_IROTH:
        with contextlib.suppress(OSError):
            shutil.copyfile(source, target)
