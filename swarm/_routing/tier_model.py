"""`TierModel`: a tier of a `Router` as a `swarm.model.Model`, what each agent holds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING

from swarm._routing.select import Need
from swarm.messages import ChatRequest, ChatResult
from swarm.model import DeltaSink, Streamed, streamed

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

    def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        """The call's pieces as they arrive, one attempt at a time (see `Relay`)."""

        def call(sink: DeltaSink) -> Awaitable[ChatResult]:
            return self._router.chat(
                request,
                tier=self.tier,
                need=self._need,
                priority=self._priority,
                role=self._role,
                on_delta=sink,
            )

        return streamed(call)
