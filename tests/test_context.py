"""Context management: long agent runs stay inside the window, and the simulator says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._routing.router import Router
from swarm._tracing import semconv as sc
from swarm.agent._loop import Agent
from swarm.agent._tool import Finish, tool
from swarm.agent.compaction import ContextPolicy
from swarm.agent.context import (
    Chain,
    ContextBudget,
    ContextStrategy,
    MaskToolOutputs,
    RecentWindow,
    Summarize,
    split_turns,
)
from swarm.catalog import LatencyProfile, find_model
from swarm.config import ProviderConfig, SwarmConfig, TierConfig
from swarm.errors import ContextWindowExceeded
from swarm.messages import ChatRequest, ChatResult, Message, ToolCall
from swarm.model import ChatModel
from swarm.providers._anthropic import AnthropicProvider
from swarm.providers._openai import OpenAIProvider
from swarm.providers.sim import Reply, SimEngine, SimProvider
from swarm.providers.sim._context import Limits
from swarm.providers.sim._reply import count_tokens, prose
from swarm.providers.sim._server import serve_sim

FAST = LatencyProfile(ttft_s=0.0, output_tps=1e9, prefill_tps=1e12, jitter=0.0)
OUTPUT_WORDS = 1_500
"""Each step's tool output: ~1,500 tokens, so 300 steps would be ~450k uncompacted."""


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return prose(OUTPUT_WORDS)


@tool
def finish(summary: str) -> None:
    """End the run."""
    raise Finish(summary)


class LongLoop:
    """A scripted model for N steps: read a file each step, then finish; notes every
    request's size as the simulator counts it."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.sizes: list[int] = []
        self.calls = 0

    def __call__(self, request: ChatRequest) -> Reply:
        if request.metadata.get("role") == "summarizer":
            return Reply("summary: read files 1..n; nothing is settled yet")
        self.sizes.append(sum(count_tokens(m.content or "") for m in request.messages))
        self.calls += 1  # one per accepted request: rejected ones never reach the script
        step = self.calls
        name, args = ("finish", {"summary": "done"}) if step >= self.steps else ("read_file", {})
        args = args or {"path": f"src/m{step}.py"}
        call = ToolCall(id=f"c{step}", name=name, arguments=json.dumps(args))
        return Reply("next", (call,), reasoning_tokens=0)


def sim_router(script: LongLoop, ref: str = "groq/llama-3.3-70b", **engine: object) -> Router:
    config = SwarmConfig(
        providers={"sim": ProviderConfig(kind="sim")},
        tiers={"speed": TierConfig(models=[f"sim/{ref}"])},
    )
    engine.setdefault("time_scale", 0.0)  # catalog refs get catalog latencies: none here
    sim = SimProvider("sim", engine=SimEngine(profile=FAST, script=script, **engine))  # type: ignore[arg-type]
    return Router(config, providers={"sim": sim})


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


async def test_300_steps_stay_under_a_128k_window(spans: InMemorySpanExporter) -> None:
    script = LongLoop(300)
    window = find_model("groq/llama-3.3-70b").context_window
    assert window == 131_072
    async with sim_router(script) as router:
        model = router.model("speed", role="coder")
        assert model.context_window == window
        agent = Agent[str]("coder", model=model, tools=[read_file, finish], max_steps=310)
        result = await agent.run("read the whole code base")
    assert result.finished and result.steps == 300
    assert len(script.sizes) == 300  # no call was rejected: every one reached the model
    assert max(script.sizes) < 0.6 * window
    assert result.compactions >= 3
    compactions = named(spans, sc.COMPACTION_SPAN)
    assert len(compactions) == result.compactions
    for span in compactions:
        a = attrs(span)
        assert a[sc.COMPACTION_TRIGGER] == "threshold"
        assert a[sc.COMPACTION_TOKENS_AFTER] < a[sc.COMPACTION_TOKENS_BEFORE]
        assert a[sc.COMPACTION_STRATEGY] == "mask+recent"


async def test_without_compaction_the_window_rejects_the_run() -> None:
    script = LongLoop(300)
    async with sim_router(script) as router:
        agent = Agent[str](
            "coder",
            model=router.model("speed"),
            tools=[read_file, finish],
            max_steps=310,
            compaction=None,
        )
        with pytest.raises(ContextWindowExceeded) as info:
            await agent.run("read the whole code base")
    assert info.value.status == 400 and info.value.limit == 131_072
    assert len(script.sizes) < 100  # rejected long before the end, as a real endpoint would


async def test_a_400_for_context_compacts_and_the_run_continues(
    spans: InMemorySpanExporter,
) -> None:
    """Over real HTTP: the sim server's OpenAI-shaped 400, mapped to ContextWindowExceeded,
    makes the agent compact (the window was unknown to it) and retry once."""
    script = LongLoop(40)
    limits = {"tiny": Limits(20_000, 4_096)}
    engine = SimEngine(profile=FAST, script=script, limits=limits, time_scale=0.0)
    config = SwarmConfig(
        providers={"local": ProviderConfig(kind="openai", base_url="http://unused")},
        tiers={"speed": TierConfig(models=["local/tiny"])},
    )
    async with serve_sim(engine) as url:
        provider = OpenAIProvider("local", url)
        async with Router(config, providers={"local": provider}) as router:
            model = router.model("speed")
            assert model.context_window is None  # not a catalog model: nothing known
            agent = Agent[str]("coder", model=model, tools=[read_file, finish], max_steps=50)
            result = await agent.run("read everything")
        await provider.aclose()
    assert result.finished and result.steps == 40
    overflow = [
        s for s in named(spans, sc.COMPACTION_SPAN) if attrs(s)[sc.COMPACTION_TRIGGER] == "overflow"
    ]
    assert len(overflow) == 1  # after that the learnt window triggers compaction in time
    assert attrs(overflow[0])[sc.CONTEXT_WINDOW] == 20_000
    rejected = [s for s in named(spans, "chat") if attrs(s).get(sc.ERROR_TYPE) == "400"]
    assert len(rejected) == 1
    assert max(script.sizes) <= 20_000


def history(turns: int) -> list[Message]:
    messages = [Message.system("you are a coder"), Message.user("fix the parser")]
    for i in range(turns):
        calls = [ToolCall(id=f"a{i}", name="read_file"), ToolCall(id=f"b{i}", name="search")]
        messages.append(Message.assistant(f"step {i}", calls))
        messages.extend(Message.tool(c, prose(300)) for c in calls)
        if i % 3 == 0:
            messages.append(Message.user("keep going"))
    return messages


def assert_pairs_whole(messages: list[Message]) -> None:
    called: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        called.update(c.id for c in m.tool_calls)
        if m.role == "tool":
            assert m.tool_call_id in called, f"result {m.tool_call_id} without its call"
            answered.add(m.tool_call_id or "")
    assert called == answered, f"calls without results: {called - answered}"


def word_budget(target: int) -> ContextBudget:
    return ContextBudget(
        window=10_000,
        target=target,
        count=lambda ms: sum(count_tokens(m.content or "") + 4 for m in ms),
    )


@pytest.mark.parametrize("target", [50, 500, 2_000, 5_000])
async def test_pairs_are_never_split_and_head_is_kept(target: int) -> None:
    summarized = SimProvider(time_scale=0.0)

    class Tier(ChatModel):
        name = "tier:speed"

        async def chat(self, request: ChatRequest) -> ChatResult:
            return await summarized.chat("m", request)

    strategies: list[ContextStrategy] = [
        RecentWindow(),
        MaskToolOutputs(keep_last=3),
        Summarize(Tier(), max_tokens=50),
        Chain((MaskToolOutputs(keep_last=1), RecentWindow())),
    ]
    for strategy in strategies:
        budget = word_budget(target)
        out = await strategy(history(20), budget)
        assert_pairs_whole(out)
        assert [m.content for m in out[:2]] == ["you are a coder", "fix the parser"]
        assert out[-1].role == "tool"  # the newest turn is always kept
        head, turns = split_turns(out)
        assert len(head) == 2 and all(t[0].role != "tool" for t in turns)


async def test_summary_call_is_traced_and_budgeted(spans: InMemorySpanExporter) -> None:
    script = LongLoop(80)
    async with sim_router(script) as router:
        speed = router.model("speed", role="coder")
        policy = ContextPolicy(
            Summarize(router.model("speed", role="summarizer"), max_tokens=200),
            window=40_000,
        )
        agent = Agent[str](
            "coder", model=speed, tools=[read_file, finish], max_steps=90, compaction=policy
        )
        result = await agent.run("read everything")
        spent = router.budget.spent
    assert result.finished and result.compactions >= 1
    chats = named(spans, "chat")
    summaries = [s for s in chats if attrs(s).get(sc.ROLE) == "summarizer"]
    compactions = {s.context.span_id: s for s in named(spans, sc.COMPACTION_SPAN)}
    assert summaries and all(s.parent and s.parent.span_id in compactions for s in summaries)
    assert all(attrs(s)[sc.OUTPUT_TOKENS] <= 200 for s in summaries)  # max_tokens held
    # the agent's totals and the run's budget both include the summary calls
    total_cost = sum(attrs(s).get(sc.COST_USD, 0.0) for s in chats)
    assert result.cost_usd == pytest.approx(total_cost)
    total_in = sum(attrs(s).get(sc.INPUT_TOKENS, 0) for s in chats)
    assert result.usage.input_tokens == total_in
    assert spent.usd == pytest.approx(total_cost)


async def test_openai_sdk_gets_a_context_length_exceeded_400() -> None:
    engine = SimEngine(profile=FAST, time_scale=0.0)
    async with serve_sim(engine) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="sim", max_retries=0)
        long = prose(140_000)  # words, the simulator's tokens
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="groq/llama-3.3-70b", messages=[{"role": "user", "content": long}]
            )
        assert info.value.status_code == 400
        assert info.value.code == "context_length_exceeded"
        assert info.value.type == "invalid_request_error"
        assert "maximum context length is 131072 tokens" in info.value.message
        # prompt + max_tokens counts: a prompt that fits alone is refused with a big max_tokens
        fits = prose(120_000)
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(
                model="groq/llama-3.3-70b",
                messages=[{"role": "user", "content": fits}],
                max_tokens=20_000,
            )
        await client.close()


async def test_openai_sdk_max_tokens_caps_thinking_plus_answer() -> None:
    async with serve_sim(SimEngine(profile=FAST, time_scale=0.0)) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="sim", max_retries=0)
        reply = await client.chat.completions.create(
            model="cerebras/kimi-k2.6", messages=[{"role": "user", "content": "hi"}], max_tokens=400
        )
        await client.close()
    assert reply.usage is not None and reply.usage.completion_tokens == 400
    assert reply.choices[0].finish_reason == "length"


async def test_cached_prefix_is_reported_and_priced() -> None:
    script = LongLoop(3)
    async with sim_router(script, ref="moonshot/kimi-k2.6") as router:
        model = router.model("speed")
        first = await model.chat(ChatRequest(messages=[Message.user(prose(1000))]))
        again = ChatRequest(
            messages=[Message.user(prose(1000)), Message.assistant("ok"), Message.user("more")]
        )
        second = await model.chat(again)
    assert first.usage.cached_input_tokens == 0
    assert second.usage.cached_input_tokens == 1000
    info = find_model("moonshot/kimi-k2.6")
    out = second.usage.output_tokens
    expected = (2 * 0.60 + 1000 * 0.15 + out * 2.50) / 1e6  # 2 fresh words, 1000 cached
    assert second.cost_usd == pytest.approx(expected)
    assert info.cost_usd(second.usage.input_tokens, out, 1000) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (
            "openai",
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, "
                    "you requested 9000 tokens (8000 in the messages, 1000 in the completion).",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        ),
        (
            "anthropic",
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 9000 tokens > 8192 maximum",
                },
            },
        ),
    ],
)
async def test_providers_map_a_context_400_to_context_window_exceeded(
    kind: str, body: dict[str, object]
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    provider = (
        OpenAIProvider("p", "https://example.invalid/v1", client=client)
        if kind == "openai"
        else AnthropicProvider("p", api_key="sk-ant-test-0000", client=client)
    )
    with pytest.raises(ContextWindowExceeded) as info:
        await provider.chat("m", ChatRequest(messages=[Message.user("hi")]))
    assert (info.value.limit, info.value.requested, info.value.retryable) == (8192, 9000, False)
    await client.aclose()


async def test_trace_summary_shows_steps_and_savings(tmp_path: Path) -> None:
    from swarm._analysis import summarize
    from swarm._analysis.loader import load_trace
    from swarm._tracing.setup import run_tracing

    script = LongLoop(120)
    path = tmp_path / "ctx-run.jsonl"
    with run_tracing("ctx-run", traces_dir=tmp_path):
        async with sim_router(script) as router:
            agent = Agent[str](
                "coder", model=router.model("speed"), tools=[read_file, finish], max_steps=130
            )
            result = await agent.run("read it all")
    c = summarize(load_trace(path, cache=False))["context"]
    assert c["compactions"] == result.compactions >= 1
    assert [r["step"] for r in c["input_tokens_by_step"]] == list(range(1, 121))
    assert c["peak_request_tokens"] == max(r["max_input_tokens"] for r in c["input_tokens_by_step"])
    assert c["input_tokens"] == result.usage.input_tokens
    assert c["input_tokens_saved"] > c["tokens_removed"] > 0


def test_providers_lists_limits_with_config_overrides(tmp_path: Path) -> None:
    from swarm._commands.providers import rows

    config = tmp_path / "swarm.toml"
    config.write_text('[providers.groq.models."llama-3.3-70b"]\ncontext_window = 65536\n')
    table, _ = rows(str(config), {})
    by_ref = {f"{r['provider']}/{r['model']}": r for r in table}
    assert by_ref["groq/llama-3.3-70b"]["context_window"] == 65_536
    assert by_ref["cerebras/llama-3.3-70b"]["context_window"] == 131_072
    assert by_ref["moonshot/kimi-k2.6"]["cached_usd_per_m"] == 0.15
    assert by_ref["anthropic/claude-sonnet-4.5"]["max_output"] == 64_000
