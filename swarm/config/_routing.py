"""Routing constraints and the adaptive router's settings, as config types.

A ground module beside `swarm.config` (which holds a tier's and `[routing]`'s other
keys): `Constraints` are what a tier (`[tiers.speed] sort = "latency"`), a role
(`[routing.roles.fixer] require = ["reasoning"]`) or a task's front matter
(`tiers: {speed: {sort: price}}`) asks of the candidates that serve it; `AdaptiveRouting`
holds the live-score, exploration, hysteresis, slack and escalation settings `[routing]`
takes. `merge_constraints` lays one set over another (the later one's keys win).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CAPABILITIES",
    "AdaptiveRouting",
    "Constraints",
    "PriceCap",
    "Sort",
    "merge_constraints",
]

Sort = Literal["order", "latency", "throughput", "price", "balanced"]
"""How a tier's eligible candidates are ranked: as listed, by expected duration, by decode
rate, by price, or by duration and price together (and by the call's slack, when known)."""

CAPABILITIES = ("tools", "reasoning", "streaming")
"""What `require` may name."""

_STRICT = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class PriceCap(BaseModel):
    """Most USD per million tokens, input and output (`max_usd_per_mtok = 2` caps both)."""

    model_config = _STRICT
    input: float | None = Field(default=None, ge=0)
    output: float | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"input": value, "output": value}
        return value


class Constraints(BaseModel):
    """What the candidates serving a tier, a role or a task must meet, and how to rank them."""

    model_config = _STRICT
    sort: Sort | None = None
    """Ranking (default `order`: the first healthy candidate as listed gets every call)."""
    max_usd_per_mtok: PriceCap | None = None
    """Exclude candidates dearer than this (list prices, USD per million tokens)."""
    min_tokens_per_s: float | None = Field(default=None, gt=0)
    """Exclude candidates decoding slower than this (catalog profile, then measured)."""
    max_ttft_s: float | None = Field(default=None, gt=0)
    """Exclude candidates whose time to first token is above this (profile, then measured)."""
    min_context_tokens: int | None = Field(default=None, ge=1)
    """Exclude candidates whose context window is smaller (the catalog's windows)."""
    require: list[Literal["tools", "reasoning", "streaming"]] | None = None
    """Capabilities every candidate must have."""
    weights: dict[str, float] | None = None
    """Canary split by candidate ref (`{"groq/kimi-k2.6" = 5, "cerebras/kimi-k2.6" = 95}`):
    calls go to the weighted candidates in these proportions."""

    @model_validator(mode="after")
    def _weights(self) -> Constraints:
        if self.weights is not None:
            if any(w < 0 for w in self.weights.values()):
                raise ValueError("weights must not be negative")
            if not any(w > 0 for w in self.weights.values()):
                raise ValueError("at least one weight must be above 0")
        return self


def merge_constraints(base: Constraints, over: Constraints | None) -> Constraints:
    """`base` with every key `over` sets replacing its own."""
    if over is None:
        return base
    update = {k: getattr(over, k) for k in over.model_fields_set if getattr(over, k) is not None}
    return base.model_copy(update=update) if update else base


class AdaptiveRouting(BaseModel):
    """The adaptive router's settings (`[routing]`, beside retries and hedging)."""

    model_config = _STRICT
    roles: dict[str, Constraints] = Field(default_factory=dict)
    """Constraints per role, over its tier's (`[routing.roles.fixer] sort = "latency"`)."""
    score_decay: float = Field(default=0.3, gt=0, le=1)
    """Weight of each new measurement in a candidate's live estimates (EWMA)."""
    explore_every: int = Field(default=20, ge=0)
    """Every Nth call of a ranked tier tries the candidate measured least recently, so a new
    or recovered provider is noticed (0: never)."""
    hysteresis: float = Field(default=0.15, ge=0)
    """A challenger must beat the current choice by this fraction to take its traffic."""
    escalate_after: int = Field(default=1, ge=0)
    """Red fixer rounds before the fixer moves to the reasoning tier."""
    fresh_starts: int = Field(default=1, ge=0)
    """Times a subtask still red after its fix rounds starts again from its base with a
    new coder, its red change thrown away (0: it fails)."""
    shape: bool = True
    """Route by the run's shape: each subtask's slack on the critical path reaches its
    calls (`balanced` tiers send critical ones to the fastest, others to the cheapest)."""
    deadline_max_agents: int | None = Field(default=None, ge=0)
    """With a deadline: the most agents at once the run may widen its fan-out to when the
    work ahead no longer fits (default: twice `max_agents`; 0: never widen)."""
    deadline_margin: float = Field(default=1.0, gt=0)
    """With a deadline: when the estimated finish times this passes it, the run widens its
    fan-out and moves the chains that no longer fit to the speed tier's fastest."""
