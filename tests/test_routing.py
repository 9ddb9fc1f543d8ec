"""The router: retries, failover, circuit breaker, hedging, budgets and chat spans."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from swarm._routing.router import Need, Router
from swarm._tracing import semconv as sc
from swarm.budget import BudgetLimits
from swarm.config import SwarmConfig, load_config
from swarm.config._secrets import CAPTURE_CONTENT_ENV
from swarm.errors import BudgetExceeded, ProviderError, RateLimited
from swarm.messages import ChatRequest, ChatResult, Message, Timing, Usage
from swarm.model import FirstTokenCallback, Model, PieceSink, Provider

SECRET = "sk-test-secret-0123456789"


class Fake:
    """A scripted Provider: each call takes the next step (an error, or ttft/decode delays)."""

    kind = "openai"

    def __init__(
        self,
        name: str,
        steps: Sequence[BaseException | tuple[float, float]] = (),
        default: BaseException | tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.name = name
        self.address = f"{name}.example:443"
        self.steps = list(steps)
        self.default = default
        self.calls: list[str] = []
        self.cancelled = 0
        self.closed = False

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
        on_delta: PieceSink | None = None,
    ) -> ChatResult:
        self.calls.append(model)
        step = self.steps.pop(0) if self.steps else self.default
        if isinstance(step, BaseException):
            raise step
        ttft, decode = step
        try:
            await anyio.sleep(ttft)
            if on_first_token is not None:
                on_first_token()
            await anyio.sleep(decode)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        return ChatResult(
            message=Message.assistant(f"from {self.name}"),
            usage=Usage(input_tokens=1000, output_tokens=100),
            timing=Timing(ttft_s=max(ttft, 0.001), duration_s=max(ttft, 0.001) + decode + 0.01),
            model=model,
        )

    async def aclose(self) -> None:
        self.closed = True


def config(
    tmp_path: Path,
    models: Sequence[str],
    routing: str = "",
    extra: str = "",
    *,
    hedge: bool = False,
) -> SwarmConfig:
    names = sorted({m.split("/")[0] for m in models})
    text = "".join(
        f'[providers.{n}]\nkind = "openai"\nbase_url = "http://{n}.example/v1"\n'
        f'api_key_env = "{n.upper()}_KEY"\n'
        f"[providers.{n}.models.m]\ninput_usd_per_m = 1.0\noutput_usd_per_m = 10.0\n"
        for n in names
    )
    text += f"[tiers.speed]\nmodels = {list(models)!r}\n".replace("'", '"')
    text += f"[routing]\nbackoff_initial_s = 0.01\nhedge = {str(hedge).lower()}\n"
    text += routing + "\n" + extra
    p = tmp_path / "swarm.toml"
    p.write_text(text, encoding="utf-8")
    return load_config(p, env={})


def req(text: str = "hello") -> ChatRequest:
    return ChatRequest(messages=[Message.user(text)], max_tokens=100)


def chat_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]


def waits(exporter: InMemorySpanExporter, kind: str) -> list[ReadableSpan]:
    return [
        s
        for s in exporter.get_finished_spans()
        if s.name == f"{sc.WAIT_SPAN} {kind}" and (s.attributes or {}).get(sc.WAIT_KIND) == kind
    ]


async def test_success_fills_cost_attempts_and_span(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    a = Fake("a")
    router = Router(config(tmp_path, ["a/m"]), providers={"a": a})
    result = await router.chat(req(), role="coder")
    assert result.text == "from a"
    assert result.provider == "a"
    assert result.attempts == 1
    assert result.cost_usd == pytest.approx(1000 * 1e-6 + 100 * 10e-6)
    [span] = chat_spans(spans)
    assert span.name == "chat m"
    assert span.kind == SpanKind.CLIENT
    attrs = span.attributes or {}
    assert attrs[sc.OPERATION] == "chat"
    assert attrs[sc.PROVIDER] == "a"
    assert attrs[sc.REQUEST_MODEL] == "m"
    assert attrs[sc.RESPONSE_MODEL] == "m"
    assert attrs[sc.REQUEST_STREAM] is True
    assert attrs[sc.FINISH_REASONS] == ("stop",)
    assert attrs[sc.INPUT_TOKENS] == 1000 and attrs[sc.OUTPUT_TOKENS] == 100
    assert attrs[sc.SERVER_ADDRESS] == "a.example:443"
    assert attrs[sc.TIER] == "speed" and attrs[sc.ROLE] == "coder"
    assert attrs[sc.ATTEMPTS] == 1
    assert attrs[sc.SIMULATED] is False
    assert attrs[sc.COST_USD] == pytest.approx(result.cost_usd)
    assert sc.TIME_TO_FIRST_CHUNK in attrs and sc.DECODE_TPS in attrs
    assert sc.INPUT_MESSAGES not in attrs
    assert [e.name for e in span.events] == [sc.FIRST_TOKEN_EVENT]
    assert router.budget.spent.usd == pytest.approx(result.cost_usd)
    assert router.budget.spent.tokens == 1100
    assert router.budget.spent_by_tier()["speed"].tokens == 1100


async def test_retries_429_honouring_retry_after(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    a = Fake("a", [RateLimited(provider="a", retry_after=0.2)])
    router = Router(config(tmp_path, ["a/m"]), providers={"a": a})
    start = anyio.current_time()
    result = await router.chat(req())
    assert anyio.current_time() - start >= 0.19
    assert result.attempts == 2 and len(a.calls) == 2
    [backoff] = waits(spans, "backoff")
    assert backoff.end_time is not None and backoff.start_time is not None
    assert (backoff.end_time - backoff.start_time) / 1e9 >= 0.19
    first, second = chat_spans(spans)
    assert (first.attributes or {})[sc.ERROR_TYPE] == "429"
    assert first.status.status_code == StatusCode.ERROR
    assert (second.attributes or {})[sc.ATTEMPTS] == 2
    assert router.gates["a"].slots.limit == math.inf  # one 429 in a while is no overload


async def test_429s_with_retry_after_do_not_use_up_attempts(tmp_path: Path) -> None:
    limited = [RateLimited(provider="a", retry_after=0.01) for _ in range(5)]
    a = Fake("a", limited)
    router = Router(config(tmp_path, ["a/m"], "max_attempts = 3\n"), providers={"a": a})
    result = await router.chat(req())
    assert result.text == "from a"
    assert result.attempts == 6 and len(a.calls) == 6


async def test_429_waits_have_their_own_budget(tmp_path: Path) -> None:
    limited = [RateLimited(provider="a", retry_after=0.05) for _ in range(10)]
    a = Fake("a", limited)
    routing = "max_attempts = 3\nmax_rate_limit_wait_s = 0.4\n"
    router = Router(config(tmp_path, ["a/m"], routing), providers={"a": a})
    with pytest.raises(RateLimited):
        await router.chat(req())
    # waits count as waited, at least the floor (0.05 s doubling): 0.05 + 0.1 + 0.2; the
    # fourth 429 would pass 0.4 s. More calls than max_attempts: 429s do not use them up
    assert len(a.calls) == 4


async def test_retries_5xx_then_succeeds(tmp_path: Path) -> None:
    err = ProviderError("bad gateway", status=502, retryable=True)
    a = Fake("a", [err, err])
    router = Router(config(tmp_path, ["a/m"]), providers={"a": a})
    result = await router.chat(req())
    assert result.attempts == 3 and len(a.calls) == 3


async def test_no_retry_and_no_failover_on_400(tmp_path: Path) -> None:
    a = Fake("a", [ProviderError("bad request", status=400)])
    b = Fake("b")
    router = Router(config(tmp_path, ["a/m", "b/m"]), providers={"a": a, "b": b})
    with pytest.raises(ProviderError, match="bad request"):
        await router.chat(req())
    assert len(a.calls) == 1 and b.calls == []


async def test_failover_on_connect_errors(tmp_path: Path) -> None:
    a = Fake("a", default=ProviderError("refused", kind="connect", retryable=True))
    b = Fake("b")
    router = Router(
        config(tmp_path, ["a/m", "b/m"], "max_attempts = 2"), providers={"a": a, "b": b}
    )
    result = await router.chat(req())
    assert result.provider == "b"
    assert len(a.calls) == 2 and len(b.calls) == 1
    assert result.attempts == 3


async def test_all_candidates_fail_raises_last_error(tmp_path: Path) -> None:
    a = Fake("a", default=ProviderError("down", status=503, retryable=True))
    router = Router(config(tmp_path, ["a/m"], "max_attempts = 2"), providers={"a": a})
    with pytest.raises(ProviderError, match="down"):
        await router.chat(req())
    assert router.budget.spent.tokens == 0


async def test_breaker_opens_skips_then_half_open_probe(tmp_path: Path) -> None:
    down = ProviderError("unavailable", status=503, retryable=True)
    a = Fake("a", [down, down])
    b = Fake("b")
    routing = "max_attempts = 1\nbreaker_failures = 2\nbreaker_cooldown_s = 0.5"
    router = Router(config(tmp_path, ["a/m", "b/m"], routing), providers={"a": a, "b": b})
    for _ in range(2):
        assert (await router.chat(req())).provider == "b"
    assert router.breaker_state("a/m") == "open"
    assert (await router.chat(req())).provider == "b"
    assert len(a.calls) == 2  # skipped while open
    await anyio.sleep(0.6)
    assert (await router.chat(req())).provider == "a"  # the half-open probe succeeded
    assert len(a.calls) == 3
    assert router.breaker_state("a/m") == "closed"


async def test_failed_probe_reopens(tmp_path: Path) -> None:
    a = Fake("a", default=ProviderError("unavailable", status=503, retryable=True))
    b = Fake("b")
    routing = "max_attempts = 1\nbreaker_failures = 1\nbreaker_cooldown_s = 0.5"
    router = Router(config(tmp_path, ["a/m", "b/m"], routing), providers={"a": a, "b": b})
    await router.chat(req())
    await anyio.sleep(0.6)
    await router.chat(req())
    assert len(a.calls) == 2
    assert router.breaker_state("a/m") == "open"
    await router.chat(req())
    assert len(a.calls) == 2


async def test_every_circuit_open_still_tries_the_last_resort(tmp_path: Path) -> None:
    down = ProviderError("unavailable", status=503, retryable=True)
    a = Fake("a", [down])
    routing = "max_attempts = 1\ntier_retries = 0\nbreaker_failures = 1\nbreaker_cooldown_s = 60"
    router = Router(config(tmp_path, ["a/m"], routing), providers={"a": a})
    with pytest.raises(ProviderError, match="unavailable"):
        await router.chat(req())
    assert router.breaker_state("a/m") == "open"
    # failing for sure would be worse than trying: the call goes, and its success closes it
    assert (await router.chat(req())).provider == "a"
    assert router.breaker_state("a/m") == "closed"


async def test_hedge_picks_the_fast_one_and_cancels_the_loser(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    slow = Fake("a", default=(30.0, 0.0))
    fast = Fake("b", default=(0.01, 0.0))
    cfg = config(tmp_path, ["a/m", "b/m"], "hedge_after_s = 0.05", hedge=True)
    router = Router(cfg, providers={"a": slow, "b": fast})
    with anyio.fail_after(5):
        result = await router.chat(req())
    assert result.provider == "b"
    assert result.attempts == 2
    assert slow.cancelled == 1
    by_provider = {(s.attributes or {})[sc.PROVIDER]: s for s in chat_spans(spans)}
    loser = by_provider["a"]
    assert loser.status.status_code == StatusCode.UNSET  # losing a race is not an error
    assert (loser.attributes or {})[sc.HEDGE_OUTCOME] == sc.HEDGE_LOST
    assert sc.ERROR_TYPE not in (loser.attributes or {})
    assert by_provider["b"].status.status_code != StatusCode.ERROR
    [hedge] = waits(spans, "hedge")
    assert (hedge.attributes or {})[sc.HEDGE_WINNER] == "b/m"


async def test_no_hedge_when_first_token_is_on_time(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    a = Fake("a", default=(0.0, 0.05))  # first token at once, then a slow decode
    b = Fake("b")
    cfg = config(tmp_path, ["a/m", "b/m"], "hedge_after_s = 0.5", hedge=True)
    router = Router(cfg, providers={"a": a, "b": b})
    result = await router.chat(req())
    assert result.provider == "a" and b.calls == [] and a.cancelled == 0
    assert waits(spans, "hedge") == []


async def test_need_filters_by_cost_and_prefers_latency(tmp_path: Path) -> None:
    extra = "[providers.b.models.m2]\ninput_usd_per_m = 0.0\noutput_usd_per_m = 0.0\n"
    cfg = config(tmp_path, ["a/m", "b/m2"], extra=extra)
    a, b = Fake("a"), Fake("b")
    router = Router(cfg, providers={"a": a, "b": b})
    result = await router.chat(req(), need=Need(max_cost_usd=0.0001))
    assert result.provider == "b"
    with pytest.raises(BudgetExceeded):
        await router.chat(req(), need=Need(max_cost_usd=-1.0))


async def test_run_budget_stops_the_next_call(tmp_path: Path) -> None:
    a = Fake("a")
    router = Router(config(tmp_path, ["a/m"], extra="[budget]\nusd = 0.001\n"), providers={"a": a})
    await router.chat(req())  # costs 0.002: allowed (the cap was not yet reached)
    with pytest.raises(BudgetExceeded) as info:
        await router.chat(req())
    assert info.value.kind == "usd" and info.value.scope == "run"
    assert info.value.spent == pytest.approx(0.002)
    assert len(a.calls) == 1  # raised before the call was sent


async def test_tier_budget(tmp_path: Path) -> None:
    a = Fake("a")
    cfg = config(tmp_path, ["a/m"])
    tiers = {"speed": cfg.tiers["speed"].model_copy(update={"budget": BudgetLimits(tokens=500)})}
    router = Router(cfg.model_copy(update={"tiers": tiers}), providers={"a": a})
    await router.chat(req())
    with pytest.raises(BudgetExceeded, match="tier speed"):
        await router.chat(req())


async def test_api_key_never_in_spans(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    leak = ProviderError(f"401 for key {SECRET}", status=401)
    a = Fake("a", [leak])
    b = Fake("b")
    env = {"A_KEY": SECRET, "B_KEY": SECRET + "b"}
    router = Router(config(tmp_path, ["a/m", "b/m"]), providers={"a": a, "b": b}, env=env)
    assert (await router.chat(req())).provider == "b"
    for span in spans.get_finished_spans():
        for value in (span.attributes or {}).values():
            assert SECRET not in str(value)
        assert SECRET not in (span.status.description or "")
        assert SECRET not in span.to_json()


async def test_content_capture_is_opt_in(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    env = {CAPTURE_CONTENT_ENV: "true"}
    router = Router(config(tmp_path, ["a/m"]), providers={"a": Fake("a")}, env=env)
    await router.chat(req("what is 2+2"))
    [span] = chat_spans(spans)
    assert "what is 2+2" in str((span.attributes or {})[sc.INPUT_MESSAGES])
    assert "from a" in str((span.attributes or {})[sc.OUTPUT_MESSAGES])


async def test_tier_model_and_roles(tmp_path: Path) -> None:
    a = Fake("a")
    router = Router(config(tmp_path, ["a/m"]), providers={"a": a})
    model = router.model("speed", role="coder")
    assert isinstance(model, Model) and model.name == "tier:speed"
    assert (await model.chat(req())).provider == "a"
    assert router.tier_for_role("planner") == "speed"  # no reasoning tier configured
    assert (await router.chat(req(), role="planner")).provider == "a"


async def test_limits_apply_through_router(tmp_path: Path) -> None:
    a = Fake("a", default=(0.0, 0.01))
    cfg = config(tmp_path, ["a/m"])
    providers = {"a": cfg.providers["a"].model_copy(update={"max_concurrency": 3})}
    router = Router(cfg.model_copy(update={"providers": providers}), providers={"a": a})
    async with anyio.create_task_group() as tg:
        for _ in range(30):
            tg.start_soon(router.chat, req())
    assert router.gates["a"].slots.max_in_flight == 3
    assert len(a.calls) == 30


async def test_router_on_the_simulator(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    p = tmp_path / "sim.toml"
    p.write_text(
        '[providers.sim]\nkind = "sim"\ntime_scale = 0.001\n'
        '[tiers.speed]\nmodels = ["sim/cerebras/kimi-k2.6"]\n',
        encoding="utf-8",
    )
    async with Router(load_config(p, env={}), env={}) as router:
        result = await router.chat(req())
    assert result.simulated and result.provider == "sim"
    assert result.cost_usd > 0  # priced from the catalog entry the simulator plays
    [span] = chat_spans(spans)
    assert span.name == "chat cerebras/kimi-k2.6"
    assert (span.attributes or {})[sc.SIMULATED] is True


async def test_failover_on_simulator_faults(tmp_path: Path) -> None:
    from swarm.providers.sim import Faults, SimProvider

    p = tmp_path / "sim.toml"
    p.write_text(
        '[providers.bad]\nkind = "sim"\n[providers.good]\nkind = "sim"\n'
        '[tiers.speed]\nmodels = ["bad/cerebras/llama-3.3-70b", '
        '"good/cerebras/llama-3.3-70b"]\n[routing]\nbackoff_initial_s = 0.001\n'
        "hedge = false\n",
        encoding="utf-8",
    )
    bad: Provider = SimProvider("bad", faults=Faults(error_rate=1.0), time_scale=0.0)
    good: Provider = SimProvider("good", time_scale=0.0)
    router = Router(load_config(p, env={}), providers={"bad": bad, "good": good})
    result = await router.chat(req())
    assert result.provider == "good" and result.attempts == 4


async def test_hedge_on_the_simulator_prefers_the_fast_provider(tmp_path: Path) -> None:
    from swarm.providers.sim import SimProvider

    p = tmp_path / "sim.toml"
    p.write_text(
        '[providers.slow]\nkind = "sim"\n[providers.fast]\nkind = "sim"\n'
        '[tiers.speed]\nmodels = ["slow/moonshot/kimi-k2.6", "fast/cerebras/kimi-k2.6"]\n'
        "[routing]\nhedge_after_s = 0.05\n",
        encoding="utf-8",
    )
    slow = SimProvider("slow", time_scale=0.1)  # ~15 s to first token
    fast = SimProvider("fast", time_scale=0.01)  # ~0.05 s
    router = Router(load_config(p, env={}), providers={"slow": slow, "fast": fast})
    with anyio.fail_after(5):
        result = await router.chat(req())
    assert result.provider == "fast" and result.attempts == 2


async def test_hedge_primary_fails_after_hedge_started(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    class FailsLate(Fake):
        async def chat(
            self,
            model: str,
            request: ChatRequest,
            *,
            on_first_token: FirstTokenCallback | None = None,
            on_delta: PieceSink | None = None,
        ) -> ChatResult:
            self.calls.append(model)
            await anyio.sleep(0.1)
            raise ProviderError("reset", kind="connect", retryable=True)

    a = FailsLate("a")
    b = Fake("b", default=(0.2, 0.0))
    # one backup only: b is slower than the hedge delay, so more would race each other
    extra = "hedge_after_s = 0.02\nmax_attempts = 1\nhedge_most = 1"
    cfg = config(tmp_path, ["a/m", "b/m"], extra, hedge=True)
    router = Router(cfg, providers={"a": a, "b": b})
    result = await router.chat(req())
    assert result.provider == "b"
    assert len(b.calls) == 1  # the hedge carried on; no second call to b
    by_provider = {(s.attributes or {})[sc.PROVIDER]: s for s in chat_spans(spans)}
    failed = by_provider["a"]  # a real error of a hedge arm is still an error
    assert failed.status.status_code == StatusCode.ERROR
    assert sc.HEDGE_OUTCOME not in (failed.attributes or {})


async def test_queue_wait_span_through_router(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    a = Fake("a", default=(0.0, 0.02))
    cfg = config(tmp_path, ["a/m"])
    providers = {"a": cfg.providers["a"].model_copy(update={"max_concurrency": 1})}
    router = Router(cfg.model_copy(update={"providers": providers}), providers={"a": a})
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(router.chat, req())
    assert len(waits(spans, "queue")) == 2


async def test_hedge_delay_from_observed_ttft_with_catalog_prior(tmp_path: Path) -> None:
    p = tmp_path / "sim.toml"
    p.write_text(
        '[providers.sim]\nkind = "sim"\n[tiers.speed]\n'
        'models = ["sim/moonshot/kimi-k2.6", "sim/cerebras/kimi-k2.6"]\n',
        encoding="utf-8",
    )
    router = Router(load_config(p, env={}), providers={"sim": Fake("sim")})
    target = router._targets["sim/moonshot/kimi-k2.6"]
    prior = target.hedge_delay(None, 0.05)
    assert prior is not None and prior > 1.6  # the catalog's p95 before any observation
    for i in range(64):
        target.observe_ttft(0.1 + i / 1000)
    observed = target.hedge_delay(None, 0.05)
    assert observed is not None and 0.15 <= observed <= 0.17
    assert target.hedge_delay(None, 0.5) == 0.5  # never below the floor
