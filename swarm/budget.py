"""Run-wide budgets (steps, USD, tokens) enforced before every model call.

`Budgeted` wraps any `Model`: it refuses a call once a budget is spent and adds each
result's usage and cost. Replayed calls count too: they were paid for by an earlier
process of the same run.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.errors import BudgetExceeded
from swarm.messages import ChatRequest, ChatResult
from swarm.model import Model

__all__ = ["Budgeted", "RunBudget"]


@dataclass
class RunBudget:
    max_steps: int | None = None
    max_usd: float | None = None
    max_tokens: int | None = None
    steps: int = 0
    usd: float = 0.0
    tokens: int = 0
    output_tokens: int = 0

    def check(self) -> None:
        """Raise `BudgetExceeded` if any budget is already spent."""
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise BudgetExceeded("steps", limit=self.max_steps, spent=self.steps)
        if self.max_usd is not None and self.usd >= self.max_usd:
            raise BudgetExceeded("usd", limit=self.max_usd, spent=round(self.usd, 6))
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            raise BudgetExceeded("tokens", limit=self.max_tokens, spent=self.tokens)

    def add(self, result: ChatResult) -> None:
        self.steps += 1
        self.usd += result.cost_usd
        self.tokens += result.usage.input_tokens + result.usage.output_tokens
        self.output_tokens += result.usage.output_tokens


class Budgeted:
    """A `Model` that spends from a shared `RunBudget`."""

    def __init__(self, inner: Model, budget: RunBudget) -> None:
        self.name = inner.name
        self._inner = inner
        self._budget = budget

    async def chat(self, request: ChatRequest) -> ChatResult:
        self._budget.check()
        result = await self._inner.chat(request)
        self._budget.add(result)
        return result
