"""The config's sections for how a run uses this machine: `[merge]` (and a task's
`merge:`: batches, checks at once, the check timeout), `[sandbox]` (how commands are
confined) and `[cluster]` (where workspaces live). Re-exported by `swarm.config`."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm._duration import parse_duration

__all__ = ["BatchSize", "ClusterConfig", "MergeConfig", "SandboxConfig", "SandboxKind"]

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
        return self.batch_size.max == 1 and self.parallel_checks == 1

    @property
    def slots(self) -> int:
        return self.check_slots or os.cpu_count() or 2

    @property
    def parallel_checks(self) -> int:
        return self.max_parallel_checks or self.slots


SandboxKind = Literal["auto", "bwrap", "none"]
"""`auto`: bubblewrap where it is installed, else none (said in the report's warnings)."""


class SandboxConfig(BaseModel):
    """`[sandbox]`: how agents' commands, checks and hooks are confined (`swarm.sandbox`)."""

    model_config = _STRICT
    kind: SandboxKind = "auto"
    network: Literal["off", "host"] = "off"
    """`off`: only the sandbox's own loopback; `host`: the host's network."""
    read_only: list[str] = Field(default_factory=list)
    """Extra paths commands may read (tools outside `/usr`, shared caches)."""
    writable: list[str] = Field(default_factory=list)
    """Extra paths commands may write besides their worktree."""
    max_processes: int = Field(default=512, ge=8)
    memory_mb: int | None = Field(default=8192, ge=64)
    file_size_mb: int | None = Field(default=4096, ge=1)
    tmp_mb: int = Field(default=1024, ge=16)


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
    """The merge queue's batch checks run on nodes too (`swarm.cluster.merge_checks`);
    false: in check trees on this machine."""
