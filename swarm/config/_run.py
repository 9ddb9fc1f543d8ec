"""The config's sections for how a run uses this machine: `[merge]` (and a task's
`merge:`: batches, checks at once, the check timeout), `[sandbox]` (how commands are
confined) and `[cluster]` (where workspaces live). Re-exported by `swarm.config`."""

from __future__ import annotations

import ipaddress
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm.config._duration import parse_duration

__all__ = [
    "PROXY_PORT",
    "BatchSize",
    "ClusterConfig",
    "MergeConfig",
    "SandboxConfig",
    "SandboxKind",
    "SandboxNetwork",
    "is_loopback_host",
    "parse_endpoint",
]

_STRICT = ConfigDict(frozen=True, extra="forbid")


class BatchSize(BaseModel):
    """How many green patches the merge queue checks as one batch: it grows from `min`
    toward `max` with the backlog."""

    model_config = _STRICT
    min: int = Field(default=1, ge=1)
    max: int = Field(default=32, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> BatchSize:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class MergeConfig(BaseModel):
    """The merge queue and the checks (`[merge]`; a task's `merge:` overrides it).

    `batch_size = {min = 1, max = 1}` with `max_parallel_checks = 1` is the one-at-a-time
    queue: every patch checked alone, after the one before it has landed."""

    model_config = _STRICT
    batch_size: BatchSize = Field(default_factory=BatchSize)
    max_parallel_checks: int | None = Field(default=None, ge=1)
    """Merge checks at once: a batch and the speculative ones behind it (default: the
    check slots)."""
    check_slots: int | None = Field(default=None, ge=1)
    """Checks of any kind at once on this machine: workspaces', the merge queue's and the
    agents' own `run_tests` (default: the number of cores)."""
    check_timeout: float = Field(default=600.0, gt=0)
    """A check running longer is killed and counts as red (`"10m"`, `"90s"` or seconds)."""
    gather: bool = True
    """While subtasks are still coding, a batch of patches no one waits for starts only
    once it is full or nothing more is coming (False: whenever there is room)."""
    probes: int = Field(default=2, ge=0)
    """Probes at once (patches checked alone, outside the line, after a red) per batch
    the line checks at once (0: every batch in the line, none probed)."""
    alternate_odds: float = Field(default=0.1, ge=0, le=1)
    """Slots ahead are left out together (an alternate build behind them) only when they
    are at least this likely all red (0: alternates however likely green)."""
    alternates_before_red: bool = False
    """Build alternates before any batch has turned red (the prior alone would give every
    big batch some, all cancelled when it lands, while the agents need the cores)."""

    @field_validator("check_timeout", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return parse_duration(value) if isinstance(value, str) else value

    def over(self, override: MergeConfig | None) -> MergeConfig:
        """These settings with every one `override` sets taking precedence."""
        if override is None:
            return self
        return self.model_copy(update={k: getattr(override, k) for k in override.model_fields_set})

    @property
    def one_at_a_time(self) -> bool:
        """Whether this is the one-at-a-time queue: one patch a batch, one check at once."""
        return self.batch_size.max == 1 and self.parallel_checks == 1

    @property
    def slots(self) -> int:
        """Checks this machine runs at once (`check_slots`, else one per CPU)."""
        return self.check_slots or os.cpu_count() or 2

    @property
    def parallel_checks(self) -> int:
        """Batches the merge queue checks at once (`max_parallel_checks`, else `slots`)."""
        return self.max_parallel_checks or self.slots


SandboxKind = Literal["auto", "bwrap", "none"]
"""`auto`: bubblewrap where it is installed, else none (said in the report's warnings)."""


SandboxNetwork = Literal["off", "loopback", "allow", "host"]
"""`off`: the sandbox's own loopback only. `loopback`: also the host's loopback services at
the ports `allow` lists. `allow`: also the hosts `allow` lists, through swarm's proxy.
`host`: the host's network, unrestricted."""

PROXY_PORT = 39281
"""Where a sandboxed command finds swarm's proxy (its own 127.0.0.1); not forwardable."""


def is_loopback_host(host: str) -> bool:
    """`localhost`, `127.x.y.z` or `::1`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_endpoint(entry: str) -> tuple[str, int | None]:
    """`HOST:PORT` of an allow-list entry as (host, port); port None for `*`. HOST is a
    name (`pypi.org`), a wildcard over subdomains (`*.example.com`), an IPv4 address or
    a bracketed IPv6 one (`[::1]:8080`). A ValueError says what is wrong."""
    host, sep, port_text = entry.strip().rpartition(":")
    shape = 'write HOST:PORT, e.g. "pypi.org:443", "*.example.com:443", "127.0.0.1:5432"'
    if not sep or not host:
        raise ValueError(f"{entry!r}: no port; {shape}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.lower()
    label = host.removeprefix("*.")
    if not label or "*" in label or any(c.isspace() or c in "/@?#[]" for c in label):
        raise ValueError(f"{entry!r}: {host!r} is not a host name or address; {shape}")
    if port_text == "*":
        if is_loopback_host(host):
            raise ValueError(f"{entry!r}: a loopback entry needs its port (it is forwarded)")
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{entry!r}: {port_text!r} is not a port (1-65535 or *); {shape}")
    if is_loopback_host(host) and int(port_text) == PROXY_PORT:
        raise ValueError(f"{entry!r}: port {PROXY_PORT} is where the sandbox finds swarm's proxy")
    return host, int(port_text)


class SandboxConfig(BaseModel):
    """`[sandbox]`: how agents' commands, checks and hooks are confined (`swarm.sandbox`)."""

    model_config = _STRICT
    kind: SandboxKind = "auto"
    network: SandboxNetwork = "off"
    """`off`, `loopback`, `allow` or `host` (see `SandboxNetwork`)."""
    allow: list[str] = Field(default_factory=list)
    """With `network = "allow"` or `"loopback"`: what commands may reach, `HOST:PORT` each
    (`"pypi.org:443"`, `"*.example.com:443"`, `"127.0.0.1:5432"`). Loopback entries are
    the host's services, forwarded to the same address and port inside the sandbox (raw
    TCP works: a test database); the others go through swarm's HTTP proxy (what honours
    `HTTPS_PROXY`: pip, curl, git, urllib)."""
    read_only: list[str] = Field(default_factory=list)
    """Extra paths commands may read (tools outside `/usr`, shared caches)."""
    writable: list[str] = Field(default_factory=list)
    """Extra paths commands may write besides their worktree."""
    max_processes: int = Field(default=512, ge=8)
    memory_mb: int | None = Field(default=8192, ge=64)
    file_size_mb: int | None = Field(default=4096, ge=1)
    tmp_mb: int = Field(default=1024, ge=16)
    shm_mb: int = Field(default=256, ge=1)
    """Size of each command's `/dev/shm` (memory-backed)."""
    cgroups: bool = True
    """Each command in pids (and memory) cgroups of its own where the machine allows
    (false: never; the guard alone keeps `max_processes`, and adds up a command's memory
    to keep `memory_mb`)."""
    guard_in_cgroup: bool = True
    """In a pids cgroup, swarm still counts a command's processes now and then (false: the
    kernel's cap alone)."""
    pidfd: bool = True
    """Start commands through pidfds where the system has them (false: anyio's way)."""
    disk_mb: int | None = Field(default=8192, ge=1)
    """How much a worktree may hold past its checkout: where swarm is root and has loop
    devices, the worktree is a filesystem of that much room and the kernel refuses writes
    past it; elsewhere its commands are killed near it, and told so, and no one file, in
    the worktree or `/tmp`, may be larger (which the kernel enforces exactly). None: no
    quota."""

    @field_validator("allow")
    @classmethod
    def _endpoints(cls, value: list[str]) -> list[str]:
        for entry in value:
            parse_endpoint(entry)
        return value

    @model_validator(mode="after")
    def _network_and_allow(self) -> SandboxConfig:
        if self.allow and self.network in ("off", "host"):
            raise ValueError(
                f'allow is set but network = "{self.network}"; set network = "allow" '
                '(or "loopback" for the host\'s own services only)'
            )
        if self.network in ("loopback", "allow") and not self.allow:
            raise ValueError(
                f'network = "{self.network}" needs allow, e.g. allow = ["127.0.0.1:5432"]'
                + (' or ["pypi.org:443"]' if self.network == "allow" else "")
            )
        if self.network == "loopback":
            outside = [e for e in self.allow if not is_loopback_host(parse_endpoint(e)[0])]
            if outside:
                raise ValueError(
                    f'network = "loopback" reaches the host\'s loopback only, but allow '
                    f'names {outside}; use network = "allow"'
                )
        return self


class ClusterConfig(BaseModel):
    """Where agents' workspaces, tool calls and checks run (`[cluster]`, `--cluster`)."""

    model_config = _STRICT
    kind: Literal["local", "ray"] = "local"
    """`local`: git worktrees on this machine; `ray`: a Ray actor per workspace on a
    cluster's nodes (`pip install 'swarm[ray]'`)."""
    address: str = "auto"
    """The Ray cluster: `auto` (the one `ray start` made here), `HOST:PORT`, `ray://HOST:PORT`."""
    cpus_per_workspace: float = Field(default=1.0, ge=0)
    """CPUs a workspace reserves on its node (its checks use them)."""
    memory_mb: int | None = Field(default=None, ge=1)
    """Memory a workspace reserves on its node; None: no reservation."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each workspace asks for (e.g. `{"checks" = 1}`)."""
    merge_checks: bool = True
    """The merge queue's batch checks run on nodes too (`swarm._cluster.merge_checks`);
    false: in check trees on this machine."""
