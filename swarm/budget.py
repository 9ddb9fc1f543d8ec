"""The one budget of a run: USD, tokens, steps and a deadline, at run and tier scope.

Every model call reserves before it starts, settles with what it really cost, and
releases its reservation if it fails:

    with budget.reserve(tier="speed", usd=estimate, tokens=est_tokens) as held:
        result = await provider.chat(request)
        held.settle(result)

A call is refused (`BudgetExceeded`) once what was spent plus what calls in flight hold
reaches a limit, so a swarm of concurrent agents overshoots a limit by at most the calls
already in flight: steps never (each in-flight call holds exactly one step), USD and
tokens by the difference between those calls' estimates and their real cost. The
deadline is a point on the event loop's clock, fixed by `start()`: calls are refused after
it, and the run cancels what is still in flight (see `swarm.run`).

One spelling everywhere: `usd`, `tokens`, `steps`, `deadline` in config (`[budget]`,
`[tiers.NAME.budget]`), in a task file's front matter (`budget:`) and on the command line
(`--budget usd=2,steps=300,deadline=15m`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import anyio
from pydantic import ValidationError

from swarm.config._budget import BudgetLimits
from swarm.errors import BudgetExceeded, ConfigError
from swarm.messages import ChatRequest, ChatResult
from swarm.model import Done, Model, Streamed, closing, context_window, stream_of

__all__ = ["Budget", "BudgetLimits", "Budgeted", "Reservation", "Spent", "parse_budget_flags"]


@dataclass(frozen=True)
class Spent:
    """What a scope has spent (settled calls only)."""

    usd: float = 0.0
    tokens: int = 0
    output_tokens: int = 0
    steps: int = 0


@dataclass
class _Scope:
    name: str
    limits: BudgetLimits
    usd: float = 0.0
    tokens: int = 0
    output_tokens: int = 0
    steps: int = 0
    held_usd: float = 0.0
    held_tokens: int = 0
    held_steps: int = 0

    def refuse_if_spent(self) -> None:
        lim = self.limits
        if lim.steps is not None and self.steps + self.held_steps >= lim.steps:
            raise BudgetExceeded("steps", limit=lim.steps, spent=self.steps, scope=self.name)
        if lim.usd is not None and self.usd + self.held_usd >= lim.usd:
            raise BudgetExceeded("usd", limit=lim.usd, spent=round(self.usd, 6), scope=self.name)
        if lim.tokens is not None and self.tokens + self.held_tokens >= lim.tokens:
            raise BudgetExceeded("tokens", limit=lim.tokens, spent=self.tokens, scope=self.name)

    def hold(self, usd: float, tokens: int, steps: int) -> None:
        self.held_usd += usd
        self.held_tokens += tokens
        self.held_steps += steps

    def add(self, result: ChatResult) -> None:
        self.usd += result.cost_usd
        self.tokens += result.usage.input_tokens + result.usage.output_tokens
        self.output_tokens += result.usage.output_tokens
        self.steps += 1

    def spent(self) -> Spent:
        return Spent(self.usd, self.tokens, self.output_tokens, self.steps)


class Reservation:
    """What one call holds of the budget until it settles or is released: entering it (as
    `Budget.reserve` gives it) refuses the call or holds one step and the estimates,
    leaving it releases what was not settled. A class, not a generator: every call
    enters one."""

    __slots__ = ("_budget", "_open", "_scopes", "_tokens", "_usd")

    def __init__(self, budget: Budget, scopes: list[_Scope], usd: float, tokens: int) -> None:
        self._budget, self._scopes, self._usd, self._tokens = budget, scopes, usd, tokens
        self._open = False

    def __enter__(self) -> Reservation:
        self._budget.refuse_if_late()
        scopes = self._scopes
        for s in scopes:
            s.refuse_if_spent()
        for s in scopes:
            s.hold(self._usd, self._tokens, 1)
        self._open = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()  # a no-op once settled

    def settle(self, result: ChatResult) -> None:
        """Swap the reservation for what the call really cost."""
        self.release()
        for s in self._scopes:
            s.add(result)

    def release(self) -> None:
        """Give back what the call held, without counting it (a failed call)."""
        if self._open:
            self._open = False
            for s in self._scopes:
                s.hold(-self._usd, -self._tokens, -1)


class Budget:
    """A run's limits and spending, shared by every agent of the run."""

    def __init__(
        self,
        limits: BudgetLimits | None = None,
        *,
        tiers: Mapping[str, BudgetLimits] | None = None,
    ) -> None:
        self.limits = limits or BudgetLimits()
        self._run = _Scope("run", self.limits)
        self._tiers = {t: _Scope(f"tier {t}", lim) for t, lim in (tiers or {}).items()}
        self._deadline_at: float | None = None

    def start(self) -> None:
        """Start the deadline's clock (the event loop's), once; later calls keep it."""
        if self.limits.deadline is not None and self._deadline_at is None:
            self._deadline_at = anyio.current_time() + self.limits.deadline

    def remaining_s(self) -> float:
        """Seconds left before the deadline (infinite without one)."""
        if self._deadline_at is None:
            return float("inf")
        return max(0.0, self._deadline_at - anyio.current_time())

    def refuse_if_late(self) -> None:
        """Raise `BudgetExceeded` once the deadline has passed."""
        if self._deadline_at is not None and anyio.current_time() >= self._deadline_at:
            limit = self.limits.deadline or 0.0
            raise BudgetExceeded("deadline", limit=limit, spent=limit)

    def reserve(self, *, tier: str | None = None, usd: float = 0.0, tokens: int = 0) -> Reservation:
        """`with budget.reserve(...) as held:` hold one step and the estimates while a call
        runs; see the module docstring."""
        return Reservation(self, self._scopes(tier), usd, tokens)

    def record(self, result: ChatResult, *, tier: str | None = None) -> None:
        """Count a call that was paid for without a reservation (a replayed call)."""
        for s in self._scopes(tier):
            s.add(result)

    @property
    def spent(self) -> Spent:
        """What the run has spent."""
        return self._run.spent()

    def spent_by_tier(self) -> dict[str, Spent]:
        """What each tier has spent so far."""
        return {t: s.spent() for t, s in self._tiers.items()}

    def _scopes(self, tier: str | None) -> list[_Scope]:
        if tier is None:
            return [self._run]
        scope = self._tiers.get(tier)
        if scope is None:  # a tier without limits still has its spending counted
            scope = self._tiers[tier] = _Scope(f"tier {tier}", BudgetLimits())
        return [self._run, scope]


@dataclass
class Budgeted:
    """A `Model` that reserves from a `Budget` around every call (models outside a router)."""

    inner: Model
    budget: Budget
    tier: str | None = None
    name: str = field(init=False)
    context_window: int | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.name = self.inner.name
        self.context_window = context_window(self.inner)

    async def chat(self, request: ChatRequest) -> ChatResult:
        """The inner model's reply, its cost reserved before and settled after."""
        with self.budget.reserve(tier=self.tier) as held:
            result = await self.inner.chat(request)
            held.settle(result)
        return result

    async def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        """The inner model's stream, its cost reserved before and settled after."""
        with self.budget.reserve(tier=self.tier) as held:
            async with closing(stream_of(self.inner, request)) as items:
                async for item in items:
                    if isinstance(item, Done):
                        held.settle(item.result)
                    yield item


_FLAG_KEYS = frozenset(BudgetLimits.model_fields)


def parse_budget_flags(values: list[str] | None) -> BudgetLimits | None:
    """`["usd=2,steps=300", "deadline=15m"]` (from `--budget`) as limits; None if empty."""
    if not values:
        return None
    fields: dict[str, str] = {}
    for part in (p.strip() for v in values for p in v.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _FLAG_KEYS:
            raise ConfigError(
                f"--budget {part!r}: expected KEY=VALUE with KEY one of "
                f"{', '.join(sorted(_FLAG_KEYS))} (e.g. usd=2,steps=300,deadline=15m)"
            )
        fields[key.strip()] = value.strip()
    try:
        return BudgetLimits.model_validate(fields)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"])
        raise ConfigError(f"--budget: {where}: {e['msg']}") from None
