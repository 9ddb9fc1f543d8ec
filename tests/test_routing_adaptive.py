"""Routing by what each step needs: constraints, wildcard candidates, live scores, canaries,
slack, and a simulated world that changes under the run.

Three simulated providers serve the same weights with distinct catalog profiles and
prices: `fast` (Cerebras's Llama profile, dear), `mid` (Groq's, middling) and `slow`
(DeepInfra's, cheap). Runs use trio's virtual clock, so the simulated durations are
exact and no test waits in real time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._analysis.loader import load_trace
from swarm._analysis.scorecard import scorecard
from swarm._routing.router import Need, Router
from swarm._routing.tiers import tier_refs, with_task_tiers
from swarm._tracing import semconv as sc
from swarm.config import SwarmConfig, load_config
from swarm.config._shifts import Shift, parse_shift
from swarm.errors import ConfigError
from swarm.messages import ChatRequest, Message
from swarm.run._live_path import LivePath
from swarm.run._models import RouterSource
from swarm.run._plan import Plan, Subtask
from swarm.run._slack import plan_slack

PROFILES = {
    "fast": ("cerebras/llama-3.3-70b", 3.0, 9.0),
    "mid": ("groq/llama-3.3-70b", 1.0, 3.0),
    "slow": ("deepinfra/llama-3.3-70b", 0.2, 0.6),
}


def world(
    tmp_path: Path,
    tier: str = "",
    *,
    names: tuple[str, ...] = ("fast", "mid", "slow"),
    extra: str = "",
    reasons: tuple[str, ...] = (),
) -> SwarmConfig:
    text = ""
    for n in names:
        profile, inp, out = PROFILES[n]
        text += f'[providers.{n}]\nkind = "sim"\nprofile = "{profile}"\nseed = 7\n'
        text += f'[providers.{n}.models."llama"]\ninput_usd_per_m = {inp}\n'
        text += f"output_usd_per_m = {out}\n"
        if n in reasons:
            text += 'supports = ["tools", "reasoning"]\n'
    text += '[tiers.speed]\nmodels = ["*/llama"]\n' + tier + "\n"
    text += "[routing]\nhedge = false\nbackoff_initial_s = 0.01\n" + extra
    p = tmp_path / "swarm.toml"
    p.write_text(text, encoding="utf-8")
    return load_config(p, env={})


def virtual(fn: Callable[[], Awaitable[Any]]) -> Any:
    from trio.testing import MockClock

    return anyio.run(fn, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})


def req() -> ChatRequest:
    return ChatRequest(messages=[Message.user("hello")], max_tokens=100)


def calls(
    config: SwarmConfig, n: int, need: Need | None = None, role: str | None = None
) -> list[str]:
    async def go() -> list[str]:
        async with Router(config, env={}) as router:
            return [(await router.chat(req(), need=need, role=role)).provider for _ in range(n)]

    out: list[str] = virtual(go)
    return out


@pytest.mark.parametrize(
    ("sort", "winner"),
    [("order", "fast"), ("latency", "fast"), ("throughput", "fast"), ("price", "slow")],
)
def test_each_sort_picks_its_candidate(tmp_path: Path, sort: str, winner: str) -> None:
    config = world(tmp_path, f'sort = "{sort}"', names=("slow", "mid", "fast"))
    expected = "slow" if sort == "order" else winner  # `order`: as listed, slow first
    assert calls(config, 3) == [expected] * 3


def test_balanced_weighs_duration_against_price(tmp_path: Path) -> None:
    # per 100-token call: fast 0.2 s at 3x mid's price, mid 0.32 s, slow 3 s at 1/5 of mid's
    assert calls(world(tmp_path, 'sort = "balanced"'), 2) == ["mid", "mid"]


def test_price_cap_and_require_exclude(tmp_path: Path) -> None:
    capped = world(tmp_path, 'sort = "latency"\nmax_usd_per_mtok = {output = 4}')
    assert calls(capped, 2) == ["mid", "mid"]
    required = world(tmp_path, 'sort = "price"\nrequire = ["reasoning"]', reasons=("fast",))
    assert calls(required, 2) == ["fast", "fast"]


def test_a_constraint_no_one_meets_names_every_exclusion(tmp_path: Path) -> None:
    config = world(tmp_path, "max_usd_per_mtok = 0.5\nmin_context_tokens = 100000")
    with pytest.raises(ConfigError) as caught:
        Router(config, env={})
    message = str(caught.value)
    assert "tiers.speed" in message
    assert "fast/llama: input $3/M > max $0.5/M" in message
    assert "mid/llama: input $1/M > max $0.5/M" in message
    assert "slow/llama: output $0.6/M > max $0.5/M" in message
    tight = world(tmp_path, "min_context_tokens = 200000")
    with pytest.raises(ConfigError, match="context window 131,072 < 200,000"):
        Router(tight, env={})


def test_role_constraints_override_the_tier(tmp_path: Path) -> None:
    config = world(tmp_path, 'sort = "latency"', extra='[routing.roles.tester]\nsort = "price"\n')
    assert calls(config, 2, role="tester") == ["slow", "slow"]
    assert calls(config, 2, role="coder") == ["fast", "fast"]


def test_wildcard_picks_up_a_provider_added_to_the_config(tmp_path: Path) -> None:
    two = world(tmp_path, 'sort = "latency"', names=("mid", "slow"))
    assert calls(two, 2) == ["mid", "mid"]
    three = world(tmp_path, 'sort = "latency"', names=("mid", "slow", "fast"))
    assert calls(three, 2) == ["fast", "fast"]


def test_wildcard_skips_providers_without_a_key(tmp_path: Path) -> None:
    text = (
        '[providers.groq]\napi_key_env = "GROQ_KEY"\n[providers.cerebras]\n'
        'api_key_env = "CEREBRAS_KEY"\n[tiers.speed]\nmodels = ["*/llama-3.3-70b"]\n'
    )
    p = tmp_path / "swarm.toml"
    p.write_text(text, encoding="utf-8")
    config = load_config(p, env={})
    assert tier_refs(config, "speed", {"GROQ_KEY": "k"}) == ["groq/llama-3.3-70b"]
    with pytest.raises(ConfigError, match="no configured provider with its key set"):
        tier_refs(config, "speed", {})


def test_canary_weights_split_95_5(tmp_path: Path) -> None:
    config = world(tmp_path, 'weights = {"fast/llama" = 95, "mid/llama" = 5}')
    got = Counter(calls(config, 200))
    assert got["slow"] == 0
    assert abs(got["mid"] - 10) <= 2  # 5 % of 200, within 1 % of the calls
    bad = world(tmp_path, 'weights = {"other/llama" = 5}')
    with pytest.raises(ConfigError, match="not an eligible candidate"):
        Router(bad, env={})


def test_a_provider_slowed_5x_loses_traffic_and_wins_it_back(tmp_path: Path) -> None:
    # fast serves its 21st to 30th calls five times slower, then recovers
    shifts = (
        "[[providers.fast.shifts]]\nat_call = 21\nspeed = 0.2\n"
        "[[providers.fast.shifts]]\nat_call = 31\nspeed = 1.0\n"
    )
    config = world(
        tmp_path, 'sort = "latency"', names=("fast", "mid"), extra="explore_every = 5\n" + shifts
    )
    got = calls(config, 150)
    # every 5th call explores the other candidate; the rest go to the best measured
    assert got[:20].count("fast") == 16
    slowed = got.index("mid", 26)  # fast's 21st call is the router's 26th
    assert got[slowed : slowed + 40].count("mid") >= 30  # loses most of its traffic
    assert got[-40:].count("fast") >= 30  # and wins it back once it recovered


def test_failures_move_traffic_away(tmp_path: Path) -> None:
    shifts = "[[providers.fast.shifts]]\nat_call = 11\nerror_rate = 1.0\n"
    config = world(tmp_path, 'sort = "latency"', names=("fast", "mid"), extra=shifts)
    got = calls(config, 40)
    assert got[:10].count("fast") >= 8
    assert got[-20:].count("mid") >= 18


def test_slack_picks_fast_on_the_critical_path_and_cheap_off_it(tmp_path: Path) -> None:
    config = world(tmp_path, 'sort = "balanced"')
    assert calls(config, 2, Need(slack=0.0)) == ["fast", "fast"]
    assert calls(config, 2, Need(slack=1.0)) == ["mid", "mid"]  # 0.32 s fits, 3 s does not
    assert calls(config, 2, Need(slack=20.0)) == ["slow", "slow"]


def test_every_chat_span_says_why(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    calls(world(tmp_path, 'sort = "price"'), 1)
    calls(world(tmp_path, ""), 1)
    ranked, listed = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert ranked.attributes is not None and listed.attributes is not None
    assert str(ranked.attributes[sc.ROUTE_REASON]).startswith("price: cheapest")
    scores = str(ranked.attributes[sc.ROUTE_SCORES]).split()
    assert [s.split("=")[0] for s in scores] == ["slow/llama", "mid/llama", "fast/llama"]
    assert str(listed.attributes[sc.ROUTE_REASON]).startswith("order")


def test_bad_constraint_keys_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tiers\.speed\.sort"):
        world(tmp_path, 'sort = "fastest"')
    with pytest.raises(ConfigError, match=r"shifts\[0\]"):
        world(tmp_path, extra="[[providers.fast.shifts]]\nspeed = 0.5\n")


def test_plan_slack_is_zero_on_the_critical_path() -> None:
    def st(i: str, *deps: str) -> Subtask:
        return Subtask(id=i, title=i, instructions=i, files=(f"{i}.py",), depends_on=deps)

    plan = Plan(subtasks=[st("a"), st("b", "a"), st("c", "b"), st("d"), st("e", "d")])
    assert plan_slack(plan) == {"a": 0.0, "b": 0.0, "c": 0.0, "d": 1.0, "e": 1.0}


def test_the_run_routes_critical_subtasks_fast_and_others_cheap(tmp_path: Path) -> None:
    config = world(tmp_path, 'sort = "balanced"')

    async def go() -> list[str]:
        async with Router(config, env={}) as router:
            source = RouterSource(router, config)
            source.hints.slack.update({"critical": 0.0, "loose": 2.0})
            out = []
            for agent in ("coder:critical", "fixer:critical:1", "coder:loose", "planner"):
                model = source.model(agent.split(":")[0], agent_id=agent)
                out.append((await model.chat(req())).provider)
            return out

    # critical: the fastest; 2 lengths of slack: the cheapest within 3x the fastest (mid);
    # no slack known (the planner): `balanced` on duration and price (mid)
    assert virtual(go) == ["fast", "fast", "mid", "mid"]


def test_scorecard_of_a_simulated_run_with_a_shift(tmp_path: Path) -> None:
    from swarm.cli import main

    out = tmp_path / "traces"
    code = main(
        [
            "simulate",
            "--agents",
            "3",
            "--steps",
            "12",
            "--virtual",
            "--traces-dir",
            str(out),
            "--shift",
            "at_call=6,speed=0.2,error_rate=0.5",
            "--json",
        ]
    )
    assert code in (0, 1)
    (trace,) = out.glob("*.jsonl")
    card = scorecard(load_trace(trace))
    rows = card["by_candidate"]
    assert sum(r["calls"] for r in rows.values()) == card["total"]["calls"] > 12
    assert sum(r["cost_share"] for r in rows.values()) == pytest.approx(1.0)
    speed = rows["sim/cerebras/llama-3.3-70b"]  # the coders' tier, which the shift hit
    assert 0 < speed["error_rate"] < 1 and speed["rate_limited_rate"] == 0
    assert speed["ttft_p50_s"] <= speed["ttft_p95_s"] <= speed["ttft_p99_s"]
    assert speed["usd_per_mtok"] > 0 and speed["reasons"]
    assert {"coder", "planner"} <= set(card["by_role"])
    assert main(["trace", "scorecard", str(trace)]) == 0


def test_bad_shift_option_is_named() -> None:
    from swarm.cli import main

    assert main(["simulate", "--virtual", "--shift", "speed=0.5"]) != 0
    with pytest.raises(ValueError, match="expected at_s="):
        parse_shift("at=3")
    assert parse_shift("fast:at_s=60,speed=0.2") == ("fast", Shift(at_s=60, speed=0.2))


def test_task_front_matter_constraints_over_the_tier(tmp_path: Path) -> None:
    config = world(tmp_path, 'sort = "latency"')
    cheap = with_task_tiers(config, {"speed": {"sort": "price"}}, "tasks/t.md")
    assert calls(cheap, 2) == ["slow", "slow"]
    with pytest.raises(ConfigError, match=r"tasks/t\.md:tiers\.speed\.max_in_flight: unknown key"):
        with_task_tiers(config, {"speed": {"max_in_flight": 3}}, "tasks/t.md")
    with pytest.raises(ConfigError, match="unknown tier 'fast'"):
        with_task_tiers(config, {"fast": {"sort": "price"}}, "tasks/t.md")


def test_a_deadline_that_no_longer_fits_moves_work_to_the_speed_tier(tmp_path: Path) -> None:
    from swarm._simulate.simulation import SimSpec, run_simulation

    spec = SimSpec(agents=4, steps=40, shape="chain", virtual=True, traces_dir=None)
    assert run_simulation(spec)["notes"] == []  # ~39 s, no deadline
    out = run_simulation(replace(spec, deadline=30.0))
    # each chain subtask that starts while the chain does not fit is moved (one provider
    # here: moving does not help, and the deadline stops the run; later subtasks may be
    # moved too, and the fan-out widened, as the seed's latencies fall)
    first, second, *_ = out["notes"]
    assert first.startswith("deadline: the critical path ahead needs ~")
    assert "1 subtask(s) (s0001) moved to the speed tier's fastest" in first
    assert "(s0002) moved" in second and out["stop_reason"] == "deadline"


def test_a_hurried_run_sends_every_role_to_the_speed_tiers_fastest(tmp_path: Path) -> None:
    world(tmp_path, 'sort = "balanced"')  # and a reasoning tier on the slow host:
    toml = (tmp_path / "swarm.toml").read_text() + '[tiers.reasoning]\nmodels = ["slow/llama"]\n'
    (tmp_path / "swarm.toml").write_text(toml)
    config = load_config(tmp_path / "swarm.toml", env={})

    async def go() -> list[str]:
        async with Router(config, env={}) as router:
            source = RouterSource(router, config)
            models = [
                source.model(r, agent_id=a) for r, a in (("planner", "p"), ("coder", "coder:loose"))
            ]
            plan = Plan(subtasks=[Subtask(id="loose", title="t", instructions="i")])
            live = LivePath(plan, source.hints)
            source.hints.slack["loose"] = 20.0
            before = [(await m.chat(req())).provider for m in models]
            live.deadline(lambda: 1.0)
            live.started("loose")
            await anyio.sleep(10.0)  # at least ~2.5 s more (a quarter of 10 s); 1 s left
            live.refresh()
            assert source.hints.hurried == {"loose"}
            # the same agents' next calls: moved, as the slack is read per call
            return before + [(await m.chat(req())).provider for m in models]

    assert virtual(go) == ["slow", "slow", "fast", "fast"]


def test_speed_floors_exclude_on_published_figures(tmp_path: Path) -> None:
    # decode: fast 2,100 tok/s, mid 840, slow 40; first token: 0.15 s, 0.2 s, 0.5 s
    assert calls(world(tmp_path, 'sort = "price"\nmin_tokens_per_s = 500'), 1) == ["mid"]
    assert calls(world(tmp_path, 'sort = "price"\nmax_ttft_s = 0.18'), 1) == ["fast"]
    with pytest.raises(ConfigError, match=r"slow/llama: decodes 40 tok/s < 3000"):
        Router(world(tmp_path, "min_tokens_per_s = 3000"), env={})


def test_bench_routing_reports_every_mode(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from benchmarks.bench_routing import main as bench

    assert bench(["--json", "--agents", "9", "--steps", "54", "--cpu-calls", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    runs = out["runs"]
    assert set(runs) >= {"fixed_order", "latency", "balanced", "shape_aware", "oracle", "deadline"}
    assert runs["deadline"]["calls"]["slow"] > 0  # cheap routing, moved by the deadline
    assert sum(runs["all_cheap"]["calls"].values()) > 0
    assert runs["all_cheap"]["calls"]["slow"] > runs["all_cheap"]["calls"]["fast"]
    assert runs["shape_aware"]["cost_usd"] < runs["fixed_order"]["cost_usd"]
    assert set(out["goals"]["met"]) == {
        "adaptive_within_1.1x_oracle",
        "shape_aware_30pct_cheaper",
        "shape_aware_within_1.1x_all_fast",
        "deadline_met_cheaper_than_all_fast",
        "router_cpu_within_10pct",
    }
    assert out["router_cpu"]["live_slack"] > 0


def test_a_deadline_move_with_one_model_in_every_tier_says_it_changes_nothing() -> None:
    from swarm._simulate.simulation import SimSpec, run_simulation

    spec = SimSpec(agents=4, steps=40, shape="chain", virtual=True, traces_dir=None)
    out = run_simulation(replace(spec, reasoning=spec.speed, deadline=30.0))
    first, *_ = out["notes"]  # one local server: the "fastest candidate" is where it is
    assert first.startswith("deadline: the critical path ahead needs ~")
    assert first.endswith(
        "1 subtask(s) (s0001) would move to the speed tier's fastest candidate, but every "
        "tier has the one model they are on"
    )
