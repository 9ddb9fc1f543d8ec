"""Where a run's agents get their models: the router by role, journaled and timed.

Every agent's model is wrapped once, here: replayed from the journal on resume (a replay
is counted in the budget: it was paid for), timed (the report's model time), and, for a
source other than the router, reserved from the run's budget (the router reserves its
own calls).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from swarm._routing.router import Need, Router, TierModel
from swarm.budget import Budget, Budgeted
from swarm.config import SwarmConfig
from swarm.messages import ChatRequest, ChatResult
from swarm.model import Model, Streamed, context_window, relay, stream_of, streamed
from swarm.run._replay import ReplayModel
from swarm.run._seams import ModelSource
from swarm.run._slack import RouteHints
from swarm.run.journal import Journal

__all__ = ["RouterSource", "RunModels"]


class RouterSource:
    """Models from the router: each role's tier (the reasoning tier when escalating), routed
    per call by the run's shape (`RouteHints`: the subtask's current slack, the deadline)."""

    def __init__(self, router: Router, config: SwarmConfig) -> None:
        self.router, self.config = router, config
        routing = config.routing
        models = {m for tier in config.tiers.values() for m in tier.models}
        self.hints = RouteHints(
            margin=routing.deadline_margin,
            max_agents=routing.deadline_max_agents,
            one_model=len(models) == 1,
        )
        """Each subtask's slack and the deadline's moves (`swarm.run._live_path`), kept by
        the coordinator; agent ids name their subtask (`coder:ID`, `fixer:ID:round`)."""

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        parts = agent_id.split(":")
        subtask = parts[1] if len(parts) > 1 and parts[1] != "final" else None
        tier = self.config.tier_for(role, escalate=escalate)
        shaped = self.config.routing.shape
        plain = self.router.model(tier, role=role)
        if not shaped and "speed" not in self.config.tiers:
            return plain
        return _Shaped(self, plain, role, subtask if shaped else None)

    def route(self, tier: str, subtask: str | None) -> tuple[str, Need | None]:
        """The tier and need of one call, from the hints as they are now."""
        hints = self.hints
        hints.on_call()
        if hints.hurry is not None and "speed" in self.config.tiers:
            if subtask is None or subtask in hints.hurried:
                return "speed", _HURRY
        slack = hints.slack.get(subtask) if subtask is not None else None
        return tier, (Need(slack=slack) if slack is not None else None)


_HURRY = Need(latency="interactive", slack=0.0)
"""The deadline's move: the fastest candidate, whatever the tier's sort."""


class _Shaped:
    """A tier model whose calls read the run's shape when they are made, not when the
    agent was made: a slack that changed mid-agent moves its next call."""

    def __init__(self, source: RouterSource, plain: TierModel, role: str, sub: str | None):
        self.name, self.context_window = plain.name, plain.context_window
        self._source, self._tier, self._role, self._sub = source, plain.tier, role, sub

    async def chat(self, request: ChatRequest) -> ChatResult:
        tier, need = self._source.route(self._tier, self._sub)
        return await self._source.router.chat(request, tier=tier, need=need, role=self._role)

    def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        tier, need = self._source.route(self._tier, self._sub)
        router, role = self._source.router, self._role
        return streamed(
            lambda sink: router.chat(request, tier=tier, need=need, role=role, on_delta=sink)
        )


class RunModels:
    """Wraps a model source: journaled (replayed on resume), timed, within the budget."""

    def __init__(
        self,
        source: ModelSource,
        journal: Journal,
        *,
        run_id: str,
        budget: Budget,
        config: SwarmConfig,
        reserves: bool,
    ) -> None:
        self.source, self.journal, self.run_id = source, journal, run_id
        self.budget, self.config = budget, config
        self._reserves = reserves
        """False when the source is the run's router, which reserves its own calls."""
        self.model_s = 0.0
        """Summed wall time of model calls made by this process (replays excluded)."""

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        tier = self.config.tier_for(role, escalate=escalate)
        inner = self.source.model(role, agent_id=agent_id, escalate=escalate)
        if self._reserves:
            inner = Budgeted(inner, self.budget, tier)
        return ReplayModel(
            _Timed(inner, self),
            self.journal,
            run_id=self.run_id,
            key=agent_id,
            on_replay=lambda result: self.budget.record(result, tier=tier),
        )


class _Timed:
    def __init__(self, inner: Model, models: RunModels) -> None:
        self.name, self._inner, self._models = inner.name, inner, models
        self.context_window = context_window(inner)

    async def chat(self, request: ChatRequest) -> ChatResult:
        return self._timed(await self._inner.chat(request))

    def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        return relay(stream_of(self._inner, request), self._timed)

    def _timed(self, result: ChatResult) -> ChatResult:
        self._models.model_s += result.timing.duration_s
        return result
