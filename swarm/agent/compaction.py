"""When an agent compacts its history, and what that is worth: `ContextPolicy`, `Compactor`.

The agent asks its `Compactor` to fit the conversation before each model call. Nothing
happens until a request would pass the trigger point, `min(trigger × window,
max_request_tokens)`; then the policy's strategy (`swarm.agent.context`) shortens it to
`target ×` that point, inside a `swarm.compaction` span that records tokens before and
after. A provider's `ContextWindowExceeded` forces one compaction against the window it
reported (learnt for the rest of the run), and the agent retries the call once.

The window is the policy's, else the model's `context_window` (router tiers know theirs
from the catalog and config), else unknown: then only a rejection triggers compaction.
Tokens are the agent's estimate (`swarm._tokens`), scaled by what the provider reported
for the previous request, so a tokenizer that counts differently is followed.

Why a trigger of 64k tokens by default, far below most windows: every call pays for its
whole prompt, so the run's input grows with the square of its length until something is
dropped. Measured on the 300-step loop of `benchmarks/bench_context.py`, the cap keeps the
run's input to about a fifth of the uncompacted run's; the prompt cache makes the
append-only stretches between compactions cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from opentelemetry.util.types import AttributeValue

from swarm._tokens import estimate_messages_tokens
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent.context import ContextBudget, ContextStrategy, default_strategy
from swarm.errors import ContextWindowExceeded
from swarm.messages import Message, Usage
from swarm.model import Model, context_window

__all__ = ["Compactor", "ContextPolicy"]


@dataclass(frozen=True)
class ContextPolicy:
    """When and how an agent compacts its history."""

    strategy: ContextStrategy = field(default_factory=default_strategy)
    """What compaction does (default: mask old tool outputs, then drop the oldest turns)."""
    window: int | None = None
    """The window to fit; None takes the model's (`context_window`), when it has one."""
    trigger: float = 0.5
    """Compact before a request would pass this share of the window..."""
    max_request_tokens: int | None = 64_000
    """... or this many tokens, whichever is lower (None: the share alone)."""
    target: float = 0.4
    """Compact down to this share of the trigger point."""


Trigger = Literal["threshold", "overflow"]


class Compactor:
    """One agent run's context keeper: counts, triggers, compacts, and tallies the cost."""

    def __init__(
        self, policy: ContextPolicy, model: Model, role: str, fixed_tokens: int = 0
    ) -> None:
        self.policy = policy
        self.window = policy.window or context_window(model)
        """The window in force (learnt from a rejection when nothing said it before)."""
        self.role = role
        self.fixed_tokens = fixed_tokens
        """Tokens every request carries besides its messages (the tools' schemas)."""
        self.ratio = 1.0
        """Provider's tokens per estimated token, from the last call that reported usage."""
        self.usage = Usage()
        """What summary calls cost in tokens (added to the agent's usage)."""
        self.cost_usd = 0.0
        self.compactions = 0

    def count(self, messages: Sequence[Message]) -> int:
        """Tokens `messages` take in a request, in the provider's count (estimated)."""
        return int(estimate_messages_tokens(messages) * self.ratio)

    def request_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens a request with `messages` would take: theirs plus the fixed part
        (system prompt, tool schemas), in the provider's count (estimated)."""
        return self.count(messages) + int(self.fixed_tokens * self.ratio)

    def observe(self, messages: Sequence[Message], reported_input_tokens: int) -> None:
        """Calibrate against what the provider counted for the request just made."""
        estimate = estimate_messages_tokens(messages) + self.fixed_tokens
        if reported_input_tokens > 0 and estimate > 0:
            self.ratio = reported_input_tokens / estimate

    def trigger_point(self) -> int | None:
        """The request size (tokens) past which history is compacted first: the
        policy's share of the window, capped by `max_request_tokens`; None when the
        model's window is unknown (no compaction before a `ContextWindowExceeded`)."""
        if self.window is None:
            return None
        point = int(self.policy.trigger * self.window)
        cap = self.policy.max_request_tokens
        return min(point, cap) if cap else point

    async def fit(self, messages: list[Message], step: int) -> list[Message]:
        """`messages`, compacted first if the next request would pass the trigger point."""
        point = self.trigger_point()
        if point is None or self.request_tokens(messages) <= point:
            return messages
        return await self._compact(messages, step, "threshold", point)

    async def recover(
        self, messages: list[Message], step: int, exc: ContextWindowExceeded
    ) -> list[Message] | None:
        """After a rejection: the compacted conversation to retry with, or None if
        compaction cannot shorten it."""
        before = self.request_tokens(messages)
        if exc.limit:
            self.window = min(self.window or exc.limit, exc.limit)
        else:  # the request was too long: the window is somewhat shorter than it
            self.window = min(self.window or before, int(before * 0.8))
        point = self.trigger_point()
        assert point is not None
        compacted = await self._compact(messages, step, "overflow", point)
        if self.request_tokens(compacted) >= before:
            return None
        return compacted

    async def _compact(
        self, messages: list[Message], step: int, trigger: Trigger, point: int
    ) -> list[Message]:
        strategy = self.policy.strategy
        fixed = int(self.fixed_tokens * self.ratio)
        budget = ContextBudget(
            window=self.window or point,
            target=max(0, int(self.policy.target * point) - fixed),
            count=self.count,
        )
        before = self.request_tokens(messages)
        attrs: dict[str, AttributeValue] = {
            sc.COMPACTION_STRATEGY: strategy.name,
            sc.COMPACTION_TRIGGER: trigger,
            sc.COMPACTION_TOKENS_BEFORE: before,
            sc.COMPACTION_MESSAGES_BEFORE: len(messages),
            sc.CONTEXT_WINDOW: self.window or 0,
            sc.ROLE: self.role,
            sc.STEP: step,
        }
        with tracer().start_as_current_span(
            f"{sc.COMPACTION_SPAN} {strategy.name}", attributes=attrs
        ) as span:
            compacted = await strategy(list(messages), budget)
            span.set_attribute(sc.COMPACTION_TOKENS_AFTER, self.request_tokens(compacted))
            span.set_attribute(sc.COMPACTION_MESSAGES_AFTER, len(compacted))
        for call in budget.calls:
            self.usage = self.usage + call.usage
            self.cost_usd += call.cost_usd
        self.compactions += 1
        return compacted
