"""The `/etc` a sandboxed command sees: what programs need to run, nothing of the host's
accounts or secrets.

Shown read-only from the host: the dynamic loader's cache and config, TLS certificates,
`alternatives` (where Debian's `python3`, `java`, `editor` links point), locale and time
zone data, name-service plumbing (`nsswitch.conf`, `hosts`, `services`, `protocols`), the
OS release files and a few shell defaults. Made by swarm: `passwd` and `group` holding
only `root`, `nobody` and the sandbox's own user (`SANDBOX_USER`), so `id`, `whoami`,
`getpass.getuser()` and `~` work. Not shown: `shadow`, `gshadow`, `sudoers`, `ssh/`
(host keys), `pip.conf`, `npmrc`, `gitconfig`, `environment` and everything else a host
keeps there (credentials and index URLs with tokens live in such files).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import weakref
from pathlib import Path

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
"""The uid a command runs as when swarm runs as root (any other user keeps its own)."""


def sandbox_ids() -> tuple[int, int]:
    """The uid and gid a sandboxed command has inside its user namespace: never 0."""
    uid, gid = os.getuid(), os.getgid()
    return (uid or _UNPRIVILEGED_UID, gid or _UNPRIVILEGED_UID)


def etc_mounts(*, resolver: bool) -> list[str]:
    """bwrap arguments that build the sandbox's `/etc`; `resolver`: also `resolv.conf`
    (a command with the host's network)."""
    args = ["--dir", "/etc"]
    made = _made()
    args += ["--ro-bind", str(made / "passwd"), "/etc/passwd"]
    args += ["--ro-bind", str(made / "group"), "/etc/group"]
    names = (*_SHOWN, "resolv.conf") if resolver else _SHOWN
    for name in names:
        host = Path("/etc") / name
        if os.path.lexists(host):
            args += ["--ro-bind-try", str(host), str(host)]
    return args


@functools.cache
def _made() -> Path:
    """A directory holding the made `passwd` and `group`, once per process (removed when
    the process exits)."""
    uid, gid = sandbox_ids()
    where = Path(tempfile.mkdtemp(prefix="swarm-etc-"))
    where.chmod(0o755)
    (where / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\n"
        f"{SANDBOX_USER}:x:{uid}:{gid}:swarm sandbox:/tmp:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (where / "group").write_text(f"root:x:0:\n{SANDBOX_USER}:x:{gid}:\nnogroup:x:65534:\n")
    for name in ("passwd", "group"):
        (where / name).chmod(0o644)
    weakref.finalize(_made, shutil.rmtree, where, ignore_errors=True)
    return where
