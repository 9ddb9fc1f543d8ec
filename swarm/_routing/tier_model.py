"""`TierModel`: a tier of a `Router` as a `swarm.model.Model`, what each agent holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm._routing.select import Need
from swarm.messages import ChatRequest, ChatResult

if TYPE_CHECKING:
    from swarm._routing.router import Router

__all__ = ["TierModel"]


class TierModel:
    """A tier as a `swarm.model.Model`: what agents hold."""

    def __init__(
        self,
        router: Router,
        tier: str,
        *,
        need: Need | None = None,
        priority: int = 0,
        role: str | None = None,
    ) -> None:
        self.name = f"tier:{tier}"
        self.tier = tier
        self._router = router
        self._need = need
        self._priority = priority
        self._role = role
        self.context_window = router.context_window(tier)
        """Tokens a request to this tier may hold (the smallest candidate's window)."""

    async def chat(self, request: ChatRequest) -> ChatResult:
        return await self._router.chat(
            request, tier=self.tier, need=self._need, priority=self._priority, role=self._role
        )
