"""The catalog: published figures, lookups and the latency arithmetic behind DESIGN.md."""

from __future__ import annotations

import pytest

from swarm.catalog import (
    PROVIDERS,
    LatencyProfile,
    ModelInfo,
    all_models,
    find_model,
    find_profile,
)
from swarm.errors import ConfigError


def test_kimi_k26_published_request_times() -> None:
    cerebras = find_profile("cerebras/kimi-k2.6").expected_s(10_000, 500)
    moonshot = find_profile("moonshot/kimi-k2.6").expected_s(10_000, 500)
    assert cerebras == pytest.approx(5.6, rel=0.015)
    assert moonshot == pytest.approx(163.7, rel=0.015)
    assert moonshot / cerebras == pytest.approx(29, rel=0.05)


def test_kimi_k26_speeds_and_prices() -> None:
    assert find_profile("cerebras/kimi-k2.6").output_tps == 981
    moonshot = find_model("moonshot/kimi-k2.6")
    assert moonshot.profile.output_tps == pytest.approx(34)
    assert (moonshot.input_usd_per_m, moonshot.output_usd_per_m) == (0.60, 2.50)
    assert moonshot.profile.reasoning_tokens == 5000


def test_agent_loop_arithmetic_without_reasoning() -> None:
    calls, tokens = 200, 3_000
    slow = LatencyProfile(ttft_s=0.0, output_tps=30, reasoning_tokens=0)
    fast = LatencyProfile(ttft_s=0.0, output_tps=981, reasoning_tokens=0)
    assert calls * slow.expected_s(0, tokens) / 3600 == pytest.approx(5.5, rel=0.02)
    assert calls * fast.expected_s(0, tokens) / 60 == pytest.approx(10, rel=0.03)


def test_expected_s_adds_ttft_prefill_and_decode() -> None:
    p = LatencyProfile(ttft_s=0.5, output_tps=100, prefill_tps=1_000, reasoning_tokens=50)
    assert p.expected_s(2_000, 100) == pytest.approx(0.5 + 2.0 + 1.5)
    assert p.expected_s(2_000, 100, reasoning_tokens=0) == pytest.approx(0.5 + 2.0 + 1.0)


def test_p95_ttft_derived_or_given() -> None:
    assert LatencyProfile(ttft_s=1.0, output_tps=10, jitter=0.0).p95_ttft_s() == 1.0
    derived = LatencyProfile(ttft_s=1.0, output_tps=10, jitter=0.2).p95_ttft_s()
    assert 1.3 < derived < 1.5
    assert LatencyProfile(ttft_s=1.0, output_tps=10, ttft_p95_s=3.0).p95_ttft_s() == 3.0


def test_other_published_figures() -> None:
    llama_c, llama_g = find_model("cerebras/llama-3.3-70b"), find_model("groq/llama-3.3-70b")
    assert llama_c.profile.output_tps == 2100
    assert (llama_c.input_usd_per_m, llama_c.output_usd_per_m) == (0.85, 1.20)
    assert llama_g.profile.output_tps == 840
    assert (llama_g.input_usd_per_m, llama_g.output_usd_per_m) == (0.59, 0.79)
    assert find_profile("cerebras/gpt-oss-120b").output_tps == 3000
    assert find_profile("nvidia/gpt-oss-120b").output_tps == 650
    sonnet = find_model("anthropic/claude-sonnet-4.5")
    assert (sonnet.input_usd_per_m, sonnet.output_usd_per_m) == (3.0, 15.0)


def test_providers_have_endpoints_and_key_variables() -> None:
    expected = {
        "cerebras": ("https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"),
        "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        "moonshot": ("https://api.moonshot.ai/v1", "MOONSHOT_API_KEY"),
        "nvidia": ("https://integrate.api.nvidia.com/v1", "NVIDIA_API_KEY"),
        "anthropic": ("https://api.anthropic.com", "ANTHROPIC_API_KEY"),
    }
    for name, (url, env) in expected.items():
        assert (PROVIDERS[name].base_url, PROVIDERS[name].api_key_env) == (url, env)
    for name in ("deepinfra", "together", "fireworks", "openrouter", "openai"):
        info = PROVIDERS[name]
        assert info.kind == "openai"
        assert info.base_url.startswith("https://")
        assert info.api_key_env.endswith("_API_KEY")
    assert PROVIDERS["anthropic"].kind == "anthropic"
    azure = PROVIDERS["azure"]
    assert azure.auth_style == "api-key"
    assert dict(azure.query) == {"api-version": "2024-10-21"}
    assert "set your own" in azure.notes


def test_refs_are_consistent() -> None:
    models = all_models()
    assert len({m.ref for m in models}) == len(models)
    for provider in PROVIDERS.values():
        for short, model in provider.models.items():
            assert model.ref == f"{provider.name}/{short}"
            assert find_model(model.ref) is model
            assert model.profile.output_tps > 0 and model.profile.prefill_tps > 0


def test_cost() -> None:
    model = ModelInfo("x/y", "y", 0.60, 2.50, LatencyProfile(ttft_s=1, output_tps=10))
    assert model.cost_usd(1_000_000, 0) == pytest.approx(0.60)
    assert model.cost_usd(10_000, 5_500) == pytest.approx(0.006 + 0.01375)


def test_unknown_ref_suggests_close_ones() -> None:
    with pytest.raises(ConfigError, match=r"did you mean: .*cerebras/kimi-k2\.6"):
        find_model("cerebras/kimi-k2")
    with pytest.raises(ConfigError, match=r"known models: .*groq/llama-3\.3-70b"):
        find_model("zzzz")
