"""Where a run's agents get their models: the router by role, journaled and timed.

Every agent's model is wrapped once, here: replayed from the journal on resume (a replay
is counted in the budget: it was paid for), timed (the report's model time), and, for a
source other than the router, reserved from the run's budget (the router reserves its
own calls).
"""

from __future__ import annotations

from swarm.budget import Budget, Budgeted
from swarm.config import SwarmConfig
from swarm.messages import ChatRequest, ChatResult
from swarm.model import Model, context_window
from swarm.routing.router import Need, Router
from swarm.run.journal import Journal
from swarm.run.parts import ModelSource
from swarm.run.replay import ReplayModel
from swarm.run.slack import RouteHints

__all__ = ["RouterSource", "RunModels"]


class RouterSource:
    """Models from the router: each role's tier (the reasoning tier when escalating)."""

    def __init__(self, router: Router, config: SwarmConfig) -> None:
        self.router, self.config = router, config
        self.hints = RouteHints(margin=config.routing.deadline_margin)
        """Each subtask's slack and the deadline's hurry (`swarm.run.slack`), set by the
        coordinator; agent ids name their subtask (`coder:ID`, `fixer:ID:round`)."""

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        parts = agent_id.split(":")
        shaped = len(parts) > 1 and self.config.routing.shape
        slack = self.hints.slack.get(parts[1]) if shaped else None
        tier = self.config.tier_for(role, escalate=escalate)
        if self.hints.hurry is not None and "speed" in self.config.tiers:
            tier, slack = "speed", 0.0
        need = Need(slack=slack) if slack is not None else None
        return self.router.model(tier, role=role, need=need)


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
        result = await self._inner.chat(request)
        self._models.model_s += result.timing.duration_s
        return result
