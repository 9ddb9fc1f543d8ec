"""A sandboxed command's own PID namespace, capped by the kernel: the process limit where
swarm may make no pids cgroup (`swarm._sandbox._pids`).

There, the guard (`BwrapSandbox.guard`) alone kept `Limits.max_processes`, and lost to a
fork bomb on a busy machine (uid 1000, both cores taken by two busy loops: the escape
suite's bomb printed BOMB-SURVIVED in 5 of 29 tries and failed a sixth, and once took the
machine's last pids: the next command, as root, could not fork). The guard did see the
bomb and kill bubblewrap's pid 1, whose death makes the kernel kill its namespace, but
only once pid 1's own memory is torn down; pid 1 maps the C library every shell of the bomb
maps, and its teardown waited for that file's mapping lock while thousands of forks took
it: seen stuck there (state D, in `unlink_file_vma_batch_process`) for 17 s while the bomb
forked on.

So such a command runs under `pidns.c` (`swarm._sandbox._static`): a user namespace
mapping swarm's uid to itself and a PID namespace it owns, around bubblewrap's. Its init
writes the namespace's `pid_max` (Linux 6.14 and later): no task of the command's, in
bubblewrap's namespace or any other below, gets a pid past it, so a fork past the cap
fails (EAGAIN) whatever the guard is doing; and the init is the static helper, which maps
no library, so the guard's kill (that init, `Launch.capped`) takes the whole namespace at
once. The kernel hands out pids below `RESERVED_PIDS` only until it first wraps, so the cap
is `RESERVED_PIDS` above what the command may hold: `TASKS_PER_PROCESS` tasks per process
(threads take pids too), as a pids cgroup counts them, and the namespace's own three (the
init, bubblewrap, bubblewrap's init).

A root swarm uses it only where it may make no pids cgroup (`cgroups = false`, a read-only
cgroup tree). For a swarm that is not root the helper makes a user namespace, so the write
is never the host's setting: on an older kernel it is refused. As root it makes none (its
commands drop to `HOST_UID` inside bubblewrap, `swarm._sandbox._identity`, which such a
namespace would have to map), and runs only on a kernel that keeps pid_max per namespace
(6.14 and later). `helper()` probes it once: None where it cannot be built or the kernel
refuses it, and the guard keeps the limit alone as before.
"""

from __future__ import annotations

import functools
import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path

from swarm._sandbox import _seccomp, _static
from swarm._sandbox._pids import TASKS_PER_PROCESS

__all__ = ["RESERVED_PIDS", "capped", "helper", "pid_max"]

log = logging.getLogger(__name__)

RESERVED_PIDS = 300
"""The kernel's `RESERVED_PIDS`: once a namespace's pids have wrapped, new ones start there."""
_OWN_TASKS = 3
_PROBE_TIMEOUT_S = 30


def pid_max(max_processes: int) -> int:
    """The `pid_max` of a command's namespace that holds `max_processes` processes of
    `TASKS_PER_PROCESS` tasks each, after the namespace's pids have wrapped."""
    return RESERVED_PIDS + TASKS_PER_PROCESS * max_processes + _OWN_TASKS + 1


def capped(argv: Sequence[str], max_processes: int) -> list[str] | None:
    """`argv` (bubblewrap's line) run in a PID namespace of its own capped for
    `max_processes`; None where swarm does not cap them so (`helper`). The helper opens
    the seccomp filter for bubblewrap itself (`swarm._sandbox._seccomp.folded`)."""
    found = helper()
    if found is None:
        return None
    opened, rest = _seccomp.folded(argv)
    fd = ["--fd", str(_seccomp.FD), opened] if opened is not None else []
    return [str(found), str(pid_max(max_processes)), *fd, *rest]


@functools.cache
def helper() -> Path | None:
    """The helper, where it runs here (probed once), else None."""
    try:
        found = _static.program("pidns")
        done = subprocess.run(
            [str(found), str(pid_max(1)), "/bin/true"],
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        why = str(exc).strip()[-300:]
    else:
        if done.returncode == 0:
            return found
        why = done.stderr.decode(errors="replace").strip()[-300:] or f"exit {done.returncode}"
    log.info("commands get no PID namespace capped by the kernel here (%s)", why)
    return None
