"""The one budget: reserve before, settle after, release on failure, at run and tier scope."""

from __future__ import annotations

import random

import anyio
import pytest

from swarm.budget import Budget, BudgetLimits, parse_budget_flags
from swarm.errors import BudgetExceeded, ConfigError
from swarm.messages import ChatResult
from swarm.testing import reply


def result(cost_usd: float, tokens: int = 10) -> ChatResult:
    return reply("ok", output_tokens=tokens, cost_usd=cost_usd)


def test_a_failed_call_releases_what_it_held() -> None:
    budget = Budget(BudgetLimits(steps=1))
    with pytest.raises(RuntimeError), budget.reserve(usd=0.5, tokens=100):
        raise RuntimeError("provider down")
    with budget.reserve() as held:  # the step was given back
        held.settle(result(0.1))
    assert budget.spent.steps == 1 and budget.spent.usd == pytest.approx(0.1)
    with pytest.raises(BudgetExceeded) as info:
        budget.reserve().__enter__()
    assert (info.value.kind, info.value.scope) == ("steps", "run")


def test_a_tier_has_its_own_limits_and_the_run_counts_every_tier() -> None:
    budget = Budget(BudgetLimits(usd=1.0), tiers={"reasoning": BudgetLimits(usd=0.2)})
    with budget.reserve(tier="reasoning") as held:
        held.settle(result(0.25))
    with pytest.raises(BudgetExceeded, match="tier reasoning"):
        budget.reserve(tier="reasoning").__enter__()
    with budget.reserve(tier="speed") as held:  # another tier still runs
        held.settle(result(0.5))
    assert budget.spent.usd == pytest.approx(0.75)
    assert budget.spent_by_tier()["speed"].usd == pytest.approx(0.5)


def test_a_replayed_call_is_counted_without_a_reservation() -> None:
    budget = Budget(BudgetLimits(steps=1))
    budget.record(result(0.1), tier="speed")
    assert budget.spent.steps == 1
    with pytest.raises(BudgetExceeded):
        budget.reserve().__enter__()


async def test_the_deadline_refuses_calls_once_passed() -> None:
    budget = Budget(BudgetLimits(deadline=0.05))
    budget.start()
    assert 0 < budget.remaining_s() <= 0.05
    await anyio.sleep(0.06)
    assert budget.remaining_s() == 0
    with pytest.raises(BudgetExceeded) as info:
        budget.reserve().__enter__()
    assert info.value.kind == "deadline"


@pytest.mark.parametrize(("estimate", "cost"), [(0.01, 0.01), (0.005, 0.01)])
async def test_300_concurrent_calls_overshoot_by_at_most_the_calls_in_flight(
    estimate: float, cost: float
) -> None:
    budget = Budget(BudgetLimits(usd=1.0))
    rng = random.Random(7)
    in_flight = 0
    in_flight_at_refusal: list[int] = []

    async def agent() -> None:
        nonlocal in_flight
        while True:
            try:
                held_cm = budget.reserve(usd=estimate)
                held = held_cm.__enter__()
            except BudgetExceeded:
                in_flight_at_refusal.append(in_flight)
                return
            in_flight += 1
            try:
                await anyio.sleep(rng.uniform(0, 0.01))
                held.settle(result(cost))
            finally:
                in_flight -= 1
                held_cm.__exit__(None, None, None)

    async with anyio.create_task_group() as tg:
        for _ in range(300):
            tg.start_soon(agent)
    overshoot = budget.spent.usd - 1.0
    worst = max(in_flight_at_refusal) * (cost - estimate)
    assert overshoot <= worst + cost + 1e-9
    if estimate == cost:  # exact estimates: at most the one call that crossed the line
        assert budget.spent.usd <= 1.0 + cost + 1e-9


def test_limits_take_precedence_in_order() -> None:
    config = BudgetLimits(usd=5, steps=100)
    task = BudgetLimits(steps=50, deadline="15m")
    flags = BudgetLimits(usd=2)
    merged = config.over(task).over(flags)
    assert merged == BudgetLimits(usd=2, steps=50, deadline=900.0)


def test_budget_flags_have_the_config_spelling() -> None:
    assert parse_budget_flags(["usd=2,steps=300", "deadline=1h30m"]) == BudgetLimits(
        usd=2, steps=300, deadline=5400.0
    )
    assert parse_budget_flags(None) is None
    with pytest.raises(ConfigError, match="KEY one of deadline, steps, tokens, usd"):
        parse_budget_flags(["dollars=2"])
    with pytest.raises(ConfigError, match="--budget: usd"):
        parse_budget_flags(["usd=-1"])
    with pytest.raises(ConfigError, match="--budget: deadline"):
        parse_budget_flags(["deadline=15x"])
