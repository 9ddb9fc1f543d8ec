"""The simulation engine and the in-process simulated provider."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import trio
import trio.testing

from swarm.catalog import LatencyProfile, find_profile
from swarm.errors import ProviderError, RateLimited
from swarm.messages import ChatRequest, Message, ToolCall, ToolSpec
from swarm.model import Provider
from swarm.providers.sim import (
    Faults,
    Reply,
    SimEngine,
    SimProvider,
    count_tokens,
    default_script,
)
from swarm.providers.sim._reply import prose

FAST = LatencyProfile(ttft_s=0.0, output_tps=1e9, prefill_tps=1e12, jitter=0.0)


def ask(text: str = "hello there", **kwargs: Any) -> ChatRequest:
    """A request; with `max_tokens`, the simulated answer is asked to be exactly that long
    (`sim.tokens`), as these tests need an exact length (the default answer's own length
    does not follow the cap: see the test below)."""
    n = kwargs.get("max_tokens")
    if n is not None and "metadata" not in kwargs:
        kwargs["metadata"] = {"sim.tokens": str(n)}
    return ChatRequest(messages=[Message.user(text)], **kwargs)


def read_file_tool() -> ToolSpec:
    return ToolSpec(name="read_file", parameters={"type": "object"})


def test_default_script_writes_sim_tokens_exactly() -> None:
    for n in (1, 7, 64, 500, 4096, 9000):
        reply = default_script(ask(max_tokens=n))
        assert reply.text is not None
        assert count_tokens(reply.text) == n
    assert default_script(ask(max_tokens=0)).text == ""


async def test_max_tokens_only_caps_a_reply() -> None:
    """A real model stops when it is done: "hi" is short with a cap of 16,000 or none."""
    request = ChatRequest(messages=[Message.user("hi")])
    natural = count_tokens(default_script(request).text or "")
    assert 24 <= natural <= 256
    provider = SimProvider(profile=FAST)
    capped = request.model_copy(update={"max_tokens": 16_000})
    result = await provider.chat("kimi-k2.6", capped)
    assert result.usage.output_tokens == natural and result.finish_reason == "stop"
    cut = await provider.chat("kimi-k2.6", request.model_copy(update={"max_tokens": 10}))
    assert cut.usage.output_tokens == 10 and cut.finish_reason == "length"


def test_default_script_calls_the_named_tool_once() -> None:
    meta = {"sim.tool": "read_file", "sim.args": json.dumps({"path": "a.py"})}
    request = ask(tools=[read_file_tool()], metadata=meta)
    reply = default_script(request)
    assert [c.name for c in reply.tool_calls] == ["read_file"]
    assert json.loads(reply.tool_calls[0].arguments) == {"path": "a.py"}
    call = reply.tool_calls[0]
    answered = request.model_copy(
        update={
            "messages": [
                *request.messages,
                Message.assistant(None, [call]),
                Message.tool(call, "print(1)"),
            ]
        }
    )
    assert default_script(answered).tool_calls == ()
    # a tool that is not offered is never called
    assert default_script(ask(metadata={"sim.tool": "read_file"})).tool_calls == ()


async def test_provider_result_shape_and_usage() -> None:
    provider = SimProvider(profile=FAST)
    assert isinstance(provider, Provider)
    assert (provider.name, provider.kind, provider.address) == ("sim", "sim", "")
    request = ChatRequest(
        messages=[Message.system("be brief"), Message.user("fix the three failing tests")],
        max_tokens=20,
        metadata={"sim.tokens": "20"},
    )
    result = await provider.chat("anything", request)
    assert result.simulated
    assert (result.provider, result.model) == ("sim", "anything")
    assert result.finish_reason == "stop"
    assert count_tokens(result.text) == 20
    assert result.usage.input_tokens == 2 + 5
    assert result.usage.output_tokens == 20
    assert result.usage.reasoning_tokens == 0
    await provider.aclose()


async def test_reasoning_tokens_counted_in_output() -> None:
    profile = LatencyProfile(ttft_s=0.0, output_tps=1e9, reasoning_tokens=300, jitter=0.0)
    script = lambda r: Reply(prose(10))  # noqa: E731
    result = await SimProvider(profile=profile, script=script).chat("m", ask(max_tokens=400))
    assert (result.usage.output_tokens, result.usage.reasoning_tokens) == (310, 300)
    scripted = SimProvider(profile=profile, script=lambda r: Reply("ok", reasoning_tokens=5))
    assert (await scripted.chat("m", ask())).usage.reasoning_tokens == 5


async def test_tool_call_result() -> None:
    provider = SimProvider(profile=FAST)
    request = ask(tools=[read_file_tool()], metadata={"sim.tool": "read_file"})
    result = await provider.chat("m", request)
    assert result.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in result.message.tool_calls] == [("read_file", "{}")]
    assert result.message.content is None


async def test_long_script_text_is_truncated_to_max_tokens() -> None:
    provider = SimProvider(profile=FAST)
    result = await provider.chat("m", ask(max_tokens=3, metadata={"sim.text": "a b c d e"}))
    assert (result.text, result.finish_reason) == ("a b c", "length")


async def test_async_script() -> None:
    async def script(request: ChatRequest) -> Reply:
        await anyio.lowlevel.checkpoint()
        return Reply(text=f"echo {request.messages[-1].content}")

    result = await SimProvider(profile=FAST, script=script).chat("m", ask("ping"))
    assert result.text == "echo ping"


async def test_plans_are_deterministic_under_a_seed() -> None:
    faults = Faults(error_rate=0.2, drop_rate=0.2)

    async def plans(seed: int) -> list[tuple[float, float, str | None, float]]:
        engine = SimEngine(profile="moonshot/kimi-k2.6", faults=faults, seed=seed)
        out = []
        for _ in range(20):
            p = await engine.plan("m", ask(max_tokens=50))
            out.append((p.ttft_s, p.decode_s, p.fault, p.fault_at))
        return out

    first = await plans(7)
    assert first == await plans(7)
    assert first != await plans(8)
    assert len({ttft for ttft, *_ in first}) == 20  # jitter varies per call


async def test_profile_for_catalog_refs() -> None:
    engine = SimEngine(profile=FAST)
    assert engine.profile_for("groq/llama-3.3-70b") == find_profile("groq/llama-3.3-70b")
    assert engine.profile_for("my-local-model") is FAST
    default = SimEngine()
    assert default.profile == find_profile("cerebras/kimi-k2.6")


async def test_plan_latency_follows_profile() -> None:
    engine = SimEngine(profile="moonshot/kimi-k2.6", seed=1)
    prompt = " ".join(["word"] * 10_000)
    durations = []
    for _ in range(50):
        plan = await engine.plan("m", ask(prompt, max_tokens=5_500))  # thinking + 500 visible
        durations.append(plan.ttft_s + plan.think_s + plan.decode_s)
    durations.sort()
    assert 130 < durations[25] < 200  # median near the published 163.7 s
    scaled = await SimEngine(profile="moonshot/kimi-k2.6", time_scale=0.01).plan(
        "m", ask(prompt, max_tokens=5_500)
    )
    assert 1.0 < scaled.ttft_s + scaled.think_s + scaled.decode_s < 2.5


async def test_in_process_latency_roughly_respected() -> None:
    profile = LatencyProfile(ttft_s=0.05, output_tps=1000, jitter=0.0)
    provider = SimProvider(profile=profile)
    firsts: list[float] = []
    start = time.perf_counter()
    result = await provider.chat(
        "m", ask(max_tokens=100), on_first_token=lambda: firsts.append(time.perf_counter())
    )
    elapsed = time.perf_counter() - start
    assert len(firsts) == 1
    assert 0.04 < result.timing.ttft_s < 1.0
    assert 0.14 < result.timing.duration_s <= elapsed < 2.0
    assert 0.09 < result.timing.decode_s


def test_virtual_time_under_trio_mock_clock() -> None:
    provider = SimProvider(profile="moonshot/kimi-k2.6")
    prompt = " ".join(["word"] * 10_000)

    async def run() -> float:
        result = await provider.chat("m", ask(prompt, max_tokens=5_500))
        return result.timing.duration_s

    wall = time.perf_counter()
    simulated = trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    assert 100 < simulated < 250
    assert time.perf_counter() - wall < 2


@pytest.mark.parametrize(
    ("faults", "kind", "status"),
    [
        (Faults(error_rate=1.0), "http", 500),
        (Faults(drop_rate=1.0), "connect", None),
        (Faults(stall_rate=1.0), "stall", None),
        (Faults(malformed_rate=1.0), "malformed", None),
    ],
)
async def test_faults_raise_what_an_http_client_would(
    faults: Faults, kind: str, status: int | None
) -> None:
    provider = SimProvider(profile=FAST, faults=faults, stall_timeout_s=0.01)
    with pytest.raises(ProviderError) as info:
        await provider.chat("m", ask())
    assert (info.value.kind, info.value.status, info.value.retryable) == (kind, status, True)
    assert (info.value.provider, info.value.model) == ("sim", "m")


async def test_rate_limit_fault_carries_retry_after() -> None:
    provider = SimProvider(profile=FAST, faults=Faults(rate_limit_rate=1.0, retry_after_s=2.5))
    with pytest.raises(RateLimited) as info:
        await provider.chat("m", ask())
    assert (info.value.status, info.value.retry_after) == (429, 2.5)


async def test_fault_rates_are_roughly_honoured() -> None:
    engine = SimEngine(profile=FAST, faults=Faults(error_rate=0.2, rate_limit_rate=0.1))
    faults = [(await engine.plan("m", ask())).fault for _ in range(2000)]
    assert 300 < faults.count("error") < 500
    assert 120 < faults.count("rate_limit") < 280
    assert faults.count(None) + faults.count("error") + faults.count("rate_limit") == 2000


async def test_stream_faults_arrive_after_the_first_token() -> None:
    provider = SimProvider(profile=FAST, faults=Faults(drop_rate=1.0))
    seen: list[bool] = []
    with pytest.raises(ProviderError):
        await provider.chat("m", ask(), on_first_token=lambda: seen.append(True))
    assert seen == [True]


def test_engine_and_kwargs_are_exclusive() -> None:
    with pytest.raises(TypeError):
        SimProvider(engine=SimEngine(), seed=3)


async def test_zero_latency_calls_are_cheap() -> None:
    provider = SimProvider(profile=FAST, time_scale=0.0)
    request = ChatRequest(
        messages=[Message.user("x"), Message.assistant(None, [ToolCall(id="1", name="t")])],
        max_tokens=64,
    )
    calls = 3000
    cpu = time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(calls):
            tg.start_soon(provider.chat, "m", request)
    per_call_ms = (time.process_time() - cpu) / calls * 1000
    assert per_call_ms < 5  # generous: measured well under 0.1 ms


async def test_thinking_streams_after_the_first_token_so_tokens_per_s_matches_profile() -> None:
    profile = LatencyProfile(ttft_s=0.0, output_tps=2_000, reasoning_tokens=200, jitter=0.0)
    firsts: list[float] = []
    result = await SimProvider(profile=profile).chat(
        "m", ask(max_tokens=100), on_first_token=lambda: firsts.append(anyio.current_time())
    )
    assert len(firsts) == 1
    assert result.timing.ttft_s < result.timing.duration_s / 2
    assert 500 < result.tokens_per_s < 4_000  # ~2,000: thinking and answer both decode


# -- provider-side quota ------------------------------------------------------------------


async def test_token_quota_admits_then_429s_with_the_refill_time() -> None:
    # each call: 2 input + 100 output tokens; 300 tokens/min refill 5 tokens/s
    provider = SimProvider(profile=FAST, faults=Faults(quota_tpm=300))
    first = await provider.chat("m", ask(max_tokens=100))
    assert first.rate_limit is not None
    assert first.rate_limit.remaining_tokens == 198
    assert first.rate_limit.reset_tokens_s == pytest.approx(102 / 5, rel=0.01)
    second = await provider.chat("m", ask(max_tokens=100))
    assert second.rate_limit is not None
    assert second.rate_limit.remaining_tokens in (96, 97)  # plus a sliver of refill
    with pytest.raises(RateLimited) as info:
        await provider.chat("m", ask(max_tokens=100))
    # 6 tokens short at 5 tokens/s
    assert info.value.retry_after == pytest.approx(6 / 5, abs=0.05)
    assert provider.engine.quota_rejections == 1
    assert provider.engine.tokens_quota is not None
    assert provider.engine.tokens_quota.remaining in (96, 97)  # a 429 charges nothing


async def test_request_quota_reports_remaining_requests() -> None:
    provider = SimProvider(profile=FAST, faults=Faults(quota_rpm=2))
    info = (await provider.chat("m", ask())).rate_limit
    assert info is not None
    assert (info.remaining_requests, info.remaining_tokens) == (1, None)
    await provider.chat("m", ask())
    with pytest.raises(RateLimited) as exc:
        await provider.chat("m", ask())
    assert exc.value.retry_after is not None and 0 < exc.value.retry_after <= 30


async def test_no_quota_no_rate_limit_info() -> None:
    result = await SimProvider(profile=FAST).chat("m", ask())
    assert result.rate_limit is None


def test_quota_refills_on_trio_virtual_clock() -> None:
    provider = SimProvider(profile=FAST, faults=Faults(quota_tpm=600))  # 10 tokens/s

    async def run() -> tuple[float, int]:
        start = trio.current_time()
        admitted = 0
        for _ in range(20):  # 102 tokens a call: 5 fit, then one every ~10 s
            while True:
                retry: float | None = None
                try:
                    await provider.chat("m", ask(max_tokens=100))
                except RateLimited as exc:
                    retry = exc.retry_after
                if retry is None:
                    break
                assert retry > 0
                await trio.sleep(retry)
            admitted += 1
        return trio.current_time() - start, admitted

    wall = time.perf_counter()
    elapsed, admitted = trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    assert admitted == 20
    # 20 × 102 tokens, 600 up front, the rest at 10 tokens/s
    assert elapsed == pytest.approx((20 * 102 - 600) / 10, rel=0.02)
    assert time.perf_counter() - wall < 2


def test_quota_must_be_positive() -> None:
    with pytest.raises(ValueError, match="quota_tpm"):
        SimEngine(faults=Faults(quota_tpm=-1))


async def test_max_tokens_caps_thinking_plus_answer() -> None:
    # cerebras/kimi-k2.6 thinks ~5,000 tokens: max_tokens=400 is spent before any answer
    sim = SimProvider(time_scale=0.0)
    result = await sim.chat("cerebras/kimi-k2.6", ask(max_tokens=400))
    assert result.usage.output_tokens == 400
    assert result.usage.reasoning_tokens == 400
    assert result.finish_reason == "length"
    assert result.text == ""
    # room left after thinking goes to the answer, cut at max_tokens in total
    roomy = await sim.chat("cerebras/kimi-k2.6", ask(max_tokens=5_030))
    assert (roomy.usage.reasoning_tokens, roomy.usage.output_tokens) == (5_000, 5_030)
    assert roomy.finish_reason == "length"
    assert count_tokens(roomy.text) == 30
