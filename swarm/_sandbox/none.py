"""`NoSandbox`: commands run as host subprocesses, with the user's rights.

An explicit opt-out (`ToolContext(..., sandbox=NoSandbox())`, `[sandbox] kind = "none"`,
`--sandbox none`), or what a machine without a working bubblewrap gets by default; either
way swarm warns once per process (`UnsandboxedWarning`). What still
holds: a scrubbed environment (no provider keys), the command's own process group killed
on timeout or cancel, the file tools' path checks. What does not: a command can write
anywhere the user can, read `~/.ssh`, reach the network, leave a `setsid` process behind
(tests/test_sandbox_escape.py lists each attack that succeeds here); `network` is not
enforced (no proxy, no namespace).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from swarm._sandbox.base import Lane, Launch, Sandbox, SandboxPolicy
from swarm.errors import UnsandboxedWarning

__all__ = ["NoSandbox", "UnsandboxedWarning", "warn_unsandboxed"]


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_unsandboxed(why: str) -> None:
    """Warn, once per process for each `why`, that commands run unconfined."""
    with _warned_lock:
        if not why or why in _warned:
            return
        _warned.add(why)
    warnings.warn(
        f"{why}: agents' commands run on this machine with your rights (no sandbox)",
        UnsandboxedWarning,
        stacklevel=3,
    )


class NoSandbox(Sandbox):
    """Runs commands unconfined (only the environment is scrubbed, by the caller)."""

    kind = "none"

    def __init__(self, policy: SandboxPolicy | None = None, *, why: str = "NoSandbox()") -> None:
        self.policy = policy or SandboxPolicy()
        warn_unsandboxed(why)

    def launch(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        git_write: bool = False,
        lane: Lane | None = None,
    ) -> Launch:
        """The command as given: run on the host, unconfined."""
        return Launch(list(argv), dict(env), cwd)

    def with_policy(self, policy: SandboxPolicy) -> Self:
        """The same, under `policy` (nothing is confined: only its limits are read)."""
        return type(self)(policy, why="")

    def __repr__(self) -> str:
        return "NoSandbox()"
