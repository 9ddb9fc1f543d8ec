"""Routing by the run's live shape: slack re-estimated from what has happened, and a
deadline that moves work to the speed tier or widens the fan-out before it stops a run.

The simulated hosts are `tests.test_routing_adaptive`'s (fast and dear, middling, slow and
cheap); runs go through `swarm simulate`'s machinery on trio's virtual clock.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio

from benchmarks.bench_routing import _HOSTS
from swarm._routing.router import Router
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm.config import RoutingConfig
from swarm.run._live_path import LivePath
from swarm.run._models import RouterSource
from swarm.run._plan import Plan, Subtask
from swarm.run._slack import RouteHints
from tests.test_routing_adaptive import req, virtual, world


def _st(i: str, *deps: str) -> Subtask:
    return Subtask(id=i, title=i, instructions=i, files=(f"{i}.py",), depends_on=deps)


def test_a_chain_that_falls_behind_gets_the_fast_candidate(tmp_path: Path) -> None:
    config = world(tmp_path, 'sort = "balanced"')
    plan = Plan(subtasks=[_st("a"), _st("b", "a"), _st("c", "b"), _st("x"), _st("y", "x")])

    async def go() -> tuple[list[str], dict[str, float]]:
        async with Router(config, env={}) as router:
            source = RouterSource(router, config)
            live = LivePath(plan, source.hints)
            y, c = (source.model("coder", agent_id=f"coder:{s}") for s in ("y", "c"))
            out = [(await y.chat(req())).provider, (await c.chat(req())).provider]
            live.started("a")
            live.started("x")
            await anyio.sleep(10)
            live.finished("a", 10.0)  # as planned: 10 s
            live.started("b")
            await anyio.sleep(10)
            live.finished("b", 10.0)
            live.started("c")
            await anyio.sleep(10)  # x has run 30 s, three times the others' length
            out += [(await y.chat(req())).provider, (await c.chat(req())).provider]
            return out, dict(source.hints.slack)

    providers, slack = virtual(go)
    # by the plan, y has a subtask of slack (mid) and c none (fast); x running three
    # lengths puts y on the critical path and gives c the slack: the same agents' calls move
    assert providers == ["mid", "fast", "fast", "mid"]
    assert slack == {"c": 1.0, "x": 0.0, "y": 0.0}


def test_a_fix_round_makes_its_chain_critical() -> None:
    plan = Plan(subtasks=[_st("a"), _st("b", "a"), _st("x")])

    async def go() -> list[dict[str, float]]:
        hints = RouteHints()
        live = LivePath(plan, hints)
        seen = [dict(hints.slack)]
        for s in ("a", "x"):
            live.started(s)
        await anyio.sleep(10)
        live.finished("a", 10.0)
        live.started("b")
        live.fixing("x")  # x's check is red at 10 s: a fix round ahead
        live.fixing("x")  # and a second one
        seen.append(dict(hints.slack))
        return seen

    before, after = virtual(go)
    assert before == {"a": 0.0, "b": 0.0, "x": 1.0}
    # x: its length plus two 5 s rounds, 15 s gone: 5 s ahead, as long as b: no slack
    assert after == {"b": 0.0, "x": 0.0}


def _cheap_chain(**kw: object) -> SimSpec:
    return SimSpec(
        agents=4,
        steps=40,
        shape="chain",
        virtual=True,
        traces_dir=None,
        hosts=_HOSTS,
        **kw,  # type: ignore[arg-type]
    )


def test_a_deadline_moves_a_cheap_run_to_the_fastest_candidate() -> None:
    cheap = run_simulation(_cheap_chain(sort="price"))
    fast = run_simulation(_cheap_chain(sort="order"))
    assert cheap["calls_per_host"]["fast"] == 0 < cheap["calls_per_host"]["slow"]
    deadline = round(0.8 * cheap["wall_s"], 1)
    out = run_simulation(_cheap_chain(sort="price", deadline=deadline))
    assert out["stop_reason"] is None and out["merged"] == 4
    assert out["wall_s"] <= deadline
    assert out["calls_per_host"]["fast"] > 0
    assert cheap["cost_usd"] < out["cost_usd"] < fast["cost_usd"]
    (note,) = out["notes"]  # the report says what changed and why
    assert note.startswith("deadline: the critical path ahead needs ~")
    assert "moved to the speed tier's fastest candidate" in note


def test_a_deadline_widens_the_fan_out_before_it_stops_the_run() -> None:
    spec = SimSpec(agents=8, steps=80, shape="fanout", max_agents=2, virtual=True, traces_dir=None)
    deadline = round(0.8 * run_simulation(spec)["wall_s"], 1)
    never = RoutingConfig(deadline_max_agents=0)
    stopped = run_simulation(replace(spec, deadline=deadline, routing=never))
    assert stopped["stop_reason"] == "deadline" and stopped["merged"] < 8
    out = run_simulation(replace(spec, deadline=deadline))
    assert out["stop_reason"] is None and out["merged"] == 8
    widened = [n for n in out["notes"] if "fan-out widened from 2 to" in n]
    assert widened and all(n.startswith("deadline: ~") for n in widened)
    most = int(widened[-1].rsplit(" to ", 1)[1].split()[0])
    assert 2 < most <= 4  # the default: at most twice max_agents
