"""`NoSandbox`: commands run as host subprocesses, with the user's rights.

For machines without bubblewrap, chosen explicitly (`[sandbox] kind = "none"`). What still
holds: a scrubbed environment (no provider keys), the command's own process group killed
on timeout or cancel, the file tools' path checks. What does not: a command can write
anywhere the user can, read `~/.ssh`, reach the network, leave a `setsid` process behind
(tests/test_sandbox_escape.py lists each attack that succeeds here); `network` is not
enforced (no proxy, no namespace).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from swarm.sandbox.base import Lane, Launch, Sandbox, SandboxPolicy

__all__ = ["NoSandbox"]


class NoSandbox(Sandbox):
    """Runs commands unconfined (only the environment is scrubbed, by the caller)."""

    kind = "none"

    def __init__(self, policy: SandboxPolicy | None = None) -> None:
        self.policy = policy or SandboxPolicy()

    def launch(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        git_write: bool = False,
        lane: Lane | None = None,
    ) -> Launch:
        return Launch(list(argv), dict(env), cwd)

    def with_read_only(self, paths: Sequence[Path]) -> NoSandbox:
        return NoSandbox(self.policy.with_read_only(paths))

    def __repr__(self) -> str:
        return "NoSandbox()"
