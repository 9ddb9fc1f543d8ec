"""Known providers and models: endpoints, key variables, prices and latency profiles.

Figures are published list prices (USD per million tokens) and measured output speeds as
of late 2025 (Artificial Analysis leaderboards, the providers' own pages and blog posts).
Where a provider publishes nothing for a model, the figure is an assumption and says so.
The simulator replays these profiles; the what-if analysis prices runs with them.

Kimi K2.6 thinks before answering: about 5,000 hidden reasoning tokens per call. That is
what makes the published comparison work: a 10,000-in / 500-out request is
(5,000 + 500) / 981 = 5.6 s on Cerebras and (5,000 + 500) / 34 + ~1.9 s = 163.7 s on
Moonshot's own endpoint.

Limits (context window and max output, in tokens) are the published figures per model:
Kimi K2.6 262,144 (Moonshot's K2 family; the same on every host is assumed), Llama 3.3 70B
131,072 (Meta's figure, which most hosts serve), gpt-oss-120b 131,072, GPT-4.1 1,047,576,
GPT-5 400,000, Claude 4.5 200,000. Max output where a host publishes none is assumed:
32,768 (Kimi, Llama on the OpenAI-compatible hosts). Cache-read prices are the published
ones where a provider bills prompt-cache hits at a discount (Moonshot, OpenAI, Anthropic,
Groq for Kimi); elsewhere cached input costs the full input price.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from swarm.errors import ConfigError

__all__ = [
    "PROVIDERS",
    "LatencyProfile",
    "ModelInfo",
    "ProviderInfo",
    "all_models",
    "find_model",
    "find_profile",
]

_Z95 = 1.6448536269514722  # the standard normal's 95th percentile


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """How fast a model answers on one provider."""

    ttft_s: float
    """Median time to first token for a small prompt, in seconds."""
    output_tps: float
    """Decode rate, output tokens per second."""
    prefill_tps: float = 100_000.0
    """Input tokens per second; prompt processing adds input_tokens / prefill_tps to TTFT."""
    reasoning_tokens: int = 0
    """Hidden thinking tokens decoded before the answer, per call."""
    jitter: float = 0.1
    """Relative spread (log-normal sigma) of time to first token and decode rate."""
    ttft_p95_s: float | None = None
    """95th percentile of time to first token; derived from ttft_s and jitter when None."""

    def expected_s(
        self, input_tokens: int, output_tokens: int, reasoning_tokens: int | None = None
    ) -> float:
        """Median duration of one call: TTFT + prefill + (reasoning + output) / decode rate."""
        thinking = self.reasoning_tokens if reasoning_tokens is None else reasoning_tokens
        return (
            self.ttft_s
            + input_tokens / self.prefill_tps
            + (thinking + output_tokens) / self.output_tps
        )

    def p95_ttft_s(self) -> float:
        """95th percentile of time to first token for a small prompt."""
        if self.ttft_p95_s is not None:
            return self.ttft_p95_s
        return self.ttft_s * math.exp(_Z95 * self.jitter)

    def ttft_sigma(self) -> float:
        """Log-normal sigma of time to first token (from ttft_p95_s when given)."""
        if self.ttft_p95_s is not None and self.ttft_s > 0 and self.ttft_p95_s > self.ttft_s:
            return math.log(self.ttft_p95_s / self.ttft_s) / _Z95
        return self.jitter


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One model as served by one provider."""

    ref: str
    """`provider/model`, the name used in config (`cerebras/kimi-k2.6`)."""
    api_name: str
    """The model name sent upstream (`llama-3.3-70b-versatile`)."""
    input_usd_per_m: float
    """Price of a million input tokens, USD."""
    output_usd_per_m: float
    """Price of a million output tokens (reasoning included), USD."""
    profile: LatencyProfile
    """Latency of this model on this provider."""
    context_window: int = 131_072
    """Prompt plus output tokens one request may hold; longer ones are rejected (400)."""
    max_output_tokens: int = 32_768
    """Most output tokens (reasoning included) one reply may have."""
    cached_input_usd_per_m: float | None = None
    """Price of a million prompt-cache hits; None when the provider gives no discount."""

    def cost_usd(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """List price of one call; `cached_tokens` (part of the input) at the cache price."""
        cached_price = self.cached_input_usd_per_m
        if cached_price is None:
            cached_price = self.input_usd_per_m
        fresh = input_tokens - cached_tokens
        return (
            fresh * self.input_usd_per_m
            + cached_tokens * cached_price
            + output_tokens * self.output_usd_per_m
        ) / 1e6


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """One endpoint: where it is, how to authenticate, what it serves."""

    name: str
    """Config name (`cerebras`)."""
    kind: Literal["openai", "anthropic"]
    """Protocol spoken."""
    base_url: str
    """API root, e.g. `https://api.cerebras.ai/v1`."""
    api_key_env: str
    """Environment variable holding the key (keys never live in config files)."""
    auth_style: Literal["bearer", "api-key"] = "bearer"
    """`Authorization: Bearer <key>` or an `api-key: <key>` header (Azure)."""
    query: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Query parameters added to every request (Azure's `api-version`)."""
    models: Mapping[str, ModelInfo] = field(default_factory=lambda: MappingProxyType({}))
    """Models by short name (`kimi-k2.6`)."""
    notes: str = ""
    """What a user should know before using it."""


_P = LatencyProfile
# (short name, api name, $ in / M, $ out / M, profile)
_Row = tuple[str, str, float, float, LatencyProfile]

# Kimi K2.6 on Cerebras: 981 tok/s. TTFT and prefill are small so that the published
# 10k-in / 500-out figure (5.6 s) holds; Cerebras prices for Kimi are assumed.
_KIMI_CEREBRAS = _P(ttft_s=0.03, output_tps=981, prefill_tps=1_000_000, reasoning_tokens=5000)
# Kimi K2.6 on Moonshot: ~34 tok/s, ~1.6 s TTFT plus ~0.33 s to prefill 10k tokens.
_KIMI_MOONSHOT = _P(
    ttft_s=1.6, output_tps=34, prefill_tps=30_000, reasoning_tokens=5000, jitter=0.2
)


@dataclass(frozen=True, slots=True)
class _Wire:
    """How a provider is spoken to, where it differs from plain OpenAI with a bearer key."""

    kind: Literal["openai", "anthropic"] = "openai"
    auth_style: Literal["bearer", "api-key"] = "bearer"
    query: Mapping[str, str] | None = None


_OPENAI = _Wire()


# (context window, max output) by short model name; see the module docstring for sources
_LIMITS: Mapping[str, tuple[int, int]] = {
    "kimi-k2.6": (262_144, 32_768),
    "llama-3.3-70b": (131_072, 32_768),
    "gpt-oss-120b": (131_072, 32_768),
    "gpt-4.1": (1_047_576, 32_768),
    "gpt-4.1-mini": (1_047_576, 32_768),
    "gpt-5": (400_000, 128_000),
    "claude-sonnet-4.5": (200_000, 64_000),
    "claude-haiku-4.5": (200_000, 64_000),
}
# $ per million prompt-cache hits, where published
_CACHED: Mapping[str, float] = {
    "moonshot/kimi-k2.6": 0.15,
    "groq/kimi-k2.6": 0.50,
    "openai/gpt-4.1": 0.50,
    "openai/gpt-4.1-mini": 0.10,
    "openai/gpt-5": 0.125,
    "azure/gpt-4.1": 0.50,
    "anthropic/claude-sonnet-4.5": 0.30,
    "anthropic/claude-haiku-4.5": 0.10,
}


def _model(name: str, row: _Row) -> ModelInfo:
    short, api, price_in, price_out, profile = row
    window, max_out = _LIMITS.get(short, (131_072, 32_768))
    ref = f"{name}/{short}"
    return ModelInfo(ref, api, price_in, price_out, profile, window, max_out, _CACHED.get(ref))


def _provider(
    name: str,
    base_url: str,
    api_key_env: str,
    rows: list[_Row],
    notes: str = "",
    wire: _Wire = _OPENAI,
) -> ProviderInfo:
    models = {row[0]: _model(name, row) for row in rows}
    return ProviderInfo(
        name=name,
        kind=wire.kind,
        base_url=base_url,
        api_key_env=api_key_env,
        auth_style=wire.auth_style,
        query=MappingProxyType(dict(wire.query or {})),
        models=MappingProxyType(models),
        notes=notes,
    )


# fmt: off
_ALL = [
    _provider("cerebras", "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY", [
        ("kimi-k2.6", "kimi-k2.6", 1.00, 3.00, _KIMI_CEREBRAS),
        ("llama-3.3-70b", "llama-3.3-70b", 0.85, 1.20,
         _P(ttft_s=0.15, output_tps=2100, prefill_tps=500_000)),
        ("gpt-oss-120b", "gpt-oss-120b", 0.25, 0.69,
         _P(ttft_s=0.15, output_tps=3000, prefill_tps=500_000, reasoning_tokens=300)),
    ], notes="Wafer-scale inference: the speed tier."),
    _provider("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY", [
        ("llama-3.3-70b", "llama-3.3-70b-versatile", 0.59, 0.79,
         _P(ttft_s=0.2, output_tps=840, prefill_tps=200_000)),
        ("gpt-oss-120b", "openai/gpt-oss-120b", 0.15, 0.75,
         _P(ttft_s=0.2, output_tps=500, prefill_tps=200_000, reasoning_tokens=300)),
        # assumed: Kimi on Groq (K2 figures: ~200 tok/s, $1/$3)
        ("kimi-k2.6", "moonshotai/kimi-k2.6", 1.00, 3.00,
         _P(ttft_s=0.3, output_tps=200, prefill_tps=100_000, reasoning_tokens=5000)),
    ]),
    _provider("moonshot", "https://api.moonshot.ai/v1", "MOONSHOT_API_KEY", [
        ("kimi-k2.6", "kimi-k2.6", 0.60, 2.50, _KIMI_MOONSHOT),
    ], notes="Kimi's official endpoint: cheap and slow (the reasoning tier)."),
    _provider("nvidia", "https://integrate.api.nvidia.com/v1", "NVIDIA_API_KEY", [
        # GB200 NVL72 figure for gpt-oss-120b; build.nvidia.com prices are assumed
        ("gpt-oss-120b", "openai/gpt-oss-120b", 0.15, 0.60,
         _P(ttft_s=0.3, output_tps=650, prefill_tps=100_000, reasoning_tokens=300)),
        ("llama-3.3-70b", "meta/llama-3.3-70b-instruct", 0.60, 0.80,
         _P(ttft_s=0.4, output_tps=120, prefill_tps=50_000)),
    ]),
    _provider("deepinfra", "https://api.deepinfra.com/v1/openai", "DEEPINFRA_API_KEY", [
        ("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct-Turbo", 0.23, 0.40,
         _P(ttft_s=0.5, output_tps=40, prefill_tps=20_000, jitter=0.2)),
        ("gpt-oss-120b", "openai/gpt-oss-120b", 0.09, 0.45,
         _P(ttft_s=0.4, output_tps=120, prefill_tps=40_000, reasoning_tokens=300)),
        ("kimi-k2.6", "moonshotai/Kimi-K2.6", 0.50, 2.00,
         _P(ttft_s=0.6, output_tps=40, prefill_tps=20_000, reasoning_tokens=5000,
            jitter=0.2)),
    ]),
    _provider("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY", [
        ("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct-Turbo", 0.88, 0.88,
         _P(ttft_s=0.4, output_tps=110, prefill_tps=50_000)),
        ("gpt-oss-120b", "openai/gpt-oss-120b", 0.15, 0.60,
         _P(ttft_s=0.3, output_tps=200, prefill_tps=60_000, reasoning_tokens=300)),
        ("kimi-k2.6", "moonshotai/Kimi-K2.6", 1.00, 3.00,
         _P(ttft_s=0.5, output_tps=80, prefill_tps=40_000, reasoning_tokens=5000)),
    ]),
    _provider("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY", [
        ("llama-3.3-70b", "accounts/fireworks/models/llama-v3p3-70b-instruct", 0.90, 0.90,
         _P(ttft_s=0.35, output_tps=130, prefill_tps=60_000)),
        ("gpt-oss-120b", "accounts/fireworks/models/gpt-oss-120b", 0.15, 0.60,
         _P(ttft_s=0.3, output_tps=250, prefill_tps=60_000, reasoning_tokens=300)),
        ("kimi-k2.6", "accounts/fireworks/models/kimi-k2p6", 0.60, 2.50,
         _P(ttft_s=0.5, output_tps=100, prefill_tps=40_000, reasoning_tokens=5000)),
    ]),
    _provider("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", [
        # a router: speed depends on the upstream it picks; median figures assumed
        ("kimi-k2.6", "moonshotai/kimi-k2.6", 0.60, 2.50,
         _P(ttft_s=0.8, output_tps=60, prefill_tps=30_000, reasoning_tokens=5000,
            jitter=0.3)),
        ("llama-3.3-70b", "meta-llama/llama-3.3-70b-instruct", 0.13, 0.40,
         _P(ttft_s=0.6, output_tps=80, prefill_tps=30_000, jitter=0.3)),
        ("gpt-oss-120b", "openai/gpt-oss-120b", 0.10, 0.50,
         _P(ttft_s=0.5, output_tps=250, prefill_tps=50_000, reasoning_tokens=300,
            jitter=0.3)),
    ], notes="Routes to other providers; speed varies with the upstream chosen."),
    _provider("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", [
        ("gpt-4.1", "gpt-4.1", 2.00, 8.00, _P(ttft_s=0.6, output_tps=80, prefill_tps=50_000)),
        ("gpt-4.1-mini", "gpt-4.1-mini", 0.40, 1.60,
         _P(ttft_s=0.4, output_tps=90, prefill_tps=60_000)),
        ("gpt-5", "gpt-5", 1.25, 10.00,
         _P(ttft_s=1.0, output_tps=70, prefill_tps=50_000, reasoning_tokens=2000,
            jitter=0.25)),
    ]),
    _provider(
        "azure",
        "https://YOUR-RESOURCE.openai.azure.com/openai/deployments/YOUR-DEPLOYMENT",
        "AZURE_OPENAI_API_KEY",
        [("gpt-4.1", "gpt-4.1", 2.00, 8.00, _P(ttft_s=0.6, output_tps=80, prefill_tps=50_000))],
        notes="Placeholder base_url: set your own resource and deployment in swarm.toml.",
        wire=_Wire(auth_style="api-key", query={"api-version": "2024-10-21"}),
    ),
    _provider("anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY", [
        ("claude-sonnet-4.5", "claude-sonnet-4-5", 3.00, 15.00,
         _P(ttft_s=1.2, output_tps=60, prefill_tps=40_000, jitter=0.2)),
        ("claude-haiku-4.5", "claude-haiku-4-5", 1.00, 5.00,
         _P(ttft_s=0.6, output_tps=110, prefill_tps=60_000, jitter=0.2)),
    ], wire=_Wire(kind="anthropic")),
]
# fmt: on

PROVIDERS: Mapping[str, ProviderInfo] = MappingProxyType({p.name: p for p in _ALL})
"""Every known provider by config name."""

_MODELS: Mapping[str, ModelInfo] = MappingProxyType(
    {m.ref: m for p in _ALL for m in p.models.values()}
)


def all_models() -> list[ModelInfo]:
    """Every known model on every provider, in catalog order."""
    return list(_MODELS.values())


def find_model(ref: str) -> ModelInfo:
    """The catalog entry for `provider/model`; ConfigError naming close refs if unknown."""
    info = _MODELS.get(ref)
    if info is not None:
        return info
    close = difflib.get_close_matches(ref, list(_MODELS), n=5, cutoff=0.5)
    hint = ", ".join(close or _MODELS)
    label = "did you mean" if close else "known models"
    raise ConfigError(f"unknown model {ref!r} ({label}: {hint})", key="model")


def find_profile(ref: str) -> LatencyProfile:
    """The latency profile of `provider/model` (ConfigError if unknown)."""
    return find_model(ref).profile
