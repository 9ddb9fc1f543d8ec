"""Choosing a sandbox: `[sandbox]` in the config, a task's `sandbox:`, `--sandbox`.

`auto` (the default) is bubblewrap where it is installed and works (unprivileged user
namespaces can be switched off), else `none` (warned once); `default_sandbox()` is what the
library uses when it is given none; asking for `bwrap` where it cannot run is a
`ConfigError` saying how to install it or to choose `none`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from swarm._sandbox.base import Limits, Sandbox, SandboxPolicy
from swarm._sandbox.bwrap import BwrapSandbox, bwrap_path
from swarm._sandbox.none import NoSandbox
from swarm.config import SandboxConfig
from swarm.errors import ConfigError

__all__ = ["bwrap_problem", "default_sandbox", "make_sandbox"]

_KINDS = ("auto", "bwrap", "none")


@cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot confine commands here, or None when it can (probed once)."""
    found = bwrap_path()
    if found is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = [found, "--ro-bind", "/", "/", "--unshare-all", "--unshare-user", "--uid", "1000"]
    # the user namespace and the options swarm's sandbox uses (bubblewrap >= 0.8)
    probe += ["--disable-userns", "--cap-drop", "ALL", "--new-session", "--die-with-parent"]
    probe += ["--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap does not run: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        return f"bubblewrap cannot make a sandbox here: {why or f'exit {done.returncode}'}"
    return None


@cache
def default_sandbox() -> Sandbox:
    """The best sandbox this machine offers, with the default policy: bubblewrap where it
    works, else none (warned once). What a `ToolContext`, `Workspace.context()`, a
    `CheckEnvironment` and an MCP stdio server get unless given one; one per process."""
    return make_sandbox()


def make_sandbox(
    config: SandboxConfig | None = None,
    *,
    kind: str | None = None,
    network: str | None = None,
    allow: Sequence[str] | None = None,
) -> Sandbox:
    """The sandbox `config` describes; `kind`, `network` and `allow` (a task's, or
    `--sandbox`, `--network`, `--allow`) override its own."""
    config = _over(config or SandboxConfig(), network, allow)
    chosen = kind or config.kind
    if chosen not in _KINDS:
        raise ConfigError(f"unknown sandbox {chosen!r}; choose one of {', '.join(_KINDS)}")
    policy = SandboxPolicy(
        read_only=tuple(Path(p).expanduser() for p in config.read_only),
        writable=tuple(Path(p).expanduser() for p in config.writable),
        network=config.network,
        limits=Limits(
            config.max_processes,
            config.memory_mb,
            config.file_size_mb,
            config.tmp_mb,
            config.shm_mb,
            config.disk_mb,
        ),
        allow=tuple(config.allow),
        cgroups=config.cgroups,
        guard_in_cgroup=config.guard_in_cgroup,
        pidfd=config.pidfd,
    )
    if chosen == "none":
        return NoSandbox(policy, why="sandbox kind 'none' was chosen")
    problem = bwrap_problem()
    if problem is None:
        return BwrapSandbox(policy)
    if chosen == "auto":
        return NoSandbox(policy, why=f"no sandbox can be made here ({problem})")
    raise ConfigError(
        f"sandbox 'bwrap' was asked for, but {problem}; or choose `none` "
        '(`--sandbox none`, `sandbox: none` in the task, `[sandbox] kind = "none"`)',
        key="sandbox",
    )


def _over(config: SandboxConfig, network: str | None, allow: Sequence[str] | None) -> SandboxConfig:
    """`config` with a task's or the command line's network settings over it, checked
    again (a bad `--allow` entry is a ConfigError naming it)."""
    if network is None and allow is None:
        return config
    update: dict[str, object] = {}
    if network is not None:
        update["network"] = network
    if allow is not None:
        update["allow"] = list(allow)
        if network is None and config.network in ("off", "host"):
            update["network"] = "allow"
    try:
        return SandboxConfig.model_validate({**config.model_dump(), **update})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(["sandbox", *(str(p) for p in err["loc"])]) if err["loc"] else "sandbox"
        raise ConfigError(str(err["msg"]).removeprefix("Value error, "), key=key) from None
