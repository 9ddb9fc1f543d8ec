"""Configuration: providers, tiers, roles, routing and budgets, from `swarm.toml`.

Where it comes from, first found wins: an explicit path, `$SWARM_CONFIG`, `./swarm.toml`,
`[tool.swarm]` in `./pyproject.toml`, else a default built from the catalog providers whose
key env var is set, else the simulator. Config holds only the *name* of each key's env var;
keys are read when providers are built (`swarm.providers._registry.build_providers`, which
also checks each `kind`), never stored here: they cannot leak through a repr, span or log.

The sections live beside the loader: `_run` (`[merge]`, `[sandbox]`, `[cluster]`),
`_routing` (constraints, the adaptive router), `_budget` (`[budget]`), `_faults` and
`_shifts` (the simulator's), with the rules they share: `_toml` (reading a file),
`_wire_checks` (what goes on the wire), `_duration` (`"15m"`), `_secrets` (what is kept out
of records).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from swarm.config._budget import BudgetLimits
from swarm.config._faults import Faults, RealModel
from swarm.config._routing import AdaptiveRouting, Constraints
from swarm.config._run import BatchSize, ClusterConfig, MergeConfig, SandboxConfig
from swarm.config._shifts import Shift
from swarm.config._toml import read_toml as _read_toml
from swarm.config._wire_checks import check_base_url, check_headers
from swarm.errors import ConfigError
from swarm.messages import ModelSettings

__all__ = [
    "DEFAULT_ROLES",
    "BatchSize",
    "ClusterConfig",
    "Faults",
    "MergeConfig",
    "ModelConfig",
    "ProviderConfig",
    "RoutingConfig",
    "SandboxConfig",
    "SwarmConfig",
    "TierConfig",
    "ToolCallMode",
    "config_key",
    "load_config",
    "split_ref",
]

DEFAULT_ROLES: Mapping[str, str] = {
    "planner": "reasoning",
    "coder": "speed",
    "tester": "speed",
    "fixer": "speed",
}
"""Role → tier when `[roles]` does not say otherwise."""

_STRICT = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

ToolCallMode = Literal["native", "text", "auto"]
"""How a model's tool calls arrive (`[providers.NAME] tool_calls`)."""


class ModelConfig(BaseModel):
    """Per-model overrides under `[providers.NAME.models."MODEL"]`."""

    model_config = _STRICT
    api_name: str | None = None
    """Name sent to the provider, when it differs from the name in tier refs."""
    input_usd_per_m: float | None = Field(default=None, ge=0)
    output_usd_per_m: float | None = Field(default=None, ge=0)
    profile: str | None = None
    """Catalog ref whose latency profile this model has (`cerebras/kimi-k2.6`)."""
    max_concurrency: int | None = Field(default=None, ge=1)
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    context_window: int | None = Field(default=None, ge=1)
    """Tokens one request may hold (prompt plus output), over the catalog's figure."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """Most output tokens (reasoning included) per reply, over the catalog's figure."""
    cached_input_usd_per_m: float | None = Field(default=None, ge=0)
    """Price of a million prompt-cache hits, over the catalog's figure."""
    supports: list[Literal["tools", "reasoning", "streaming"]] | None = None
    """Capabilities for `require`, over the catalog's (tools, streaming, reasoning)."""
    tool_calls: ToolCallMode | None = None
    """How this model calls tools, over the provider's `tool_calls`."""


class ProviderConfig(BaseModel):
    """One endpoint under `[providers.NAME]`; a catalog preset name fills the blanks."""

    model_config = _STRICT
    kind: str | None = None
    """A provider kind (`openai`, `anthropic`, `sim`, ...: the keys of
    `swarm.providers._registry.FACTORIES`), checked when providers are built."""
    base_url: str | None = None
    api_key_env: str | None = None
    """Name of the env var holding the key (never the key itself)."""
    auth_style: Literal["bearer", "api-key"] | None = None
    query: dict[str, str] | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    max_concurrency: int | None = Field(default=None, ge=1)
    """Requests in flight at once to this provider (AIMD lowers it after 429s)."""
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    """Requests and tokens (in + out) per minute."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    stall_timeout_s: float = Field(default=30.0, gt=0)
    """Longest silence between two tokens of a reply once it has started."""
    first_token_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Longest wait for a reply's first token. None: from the model's speed, four times
    its time to first token plus the prompt read at `prefill_tokens_per_s` (the slower of
    that figure and the rate measured on this run), and never under `stall_timeout_s`."""
    prefill_tokens_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """How fast this server reads a prompt. None: the catalog's figure for a catalog
    model, else 25 tokens/s (llama.cpp on two CPU cores reads 15-40)."""
    tool_calls: ToolCallMode | None = None
    """How its models call tools: `native` (the API's `tool_calls` only), `text` (tools
    described in the prompt, calls read from the reply's text: for a server with no tool
    support) or `auto` (native, and calls a model wrote as text are read too). None:
    `native` for the catalog's clouds, `auto` for any other server."""
    seed: int = 0
    """Simulator only: random seed for jitter and faults."""
    time_scale: float = Field(default=1.0, ge=0)
    """Simulator only: multiplies every simulated duration (0.01 for quick demos)."""
    profile: str | None = None
    """Simulator only: the catalog ref whose latency model names that are not catalog
    refs get (default `cerebras/kimi-k2.6`)."""
    faults: Faults = Field(default_factory=Faults)
    real_model: RealModel | None = None
    """Simulator only: reply as a real open model does (`[providers.sim.real_model]`: calls
    written as text, wrong tool names, repeats, cut-off JSON, at the rates it sets)."""
    """Simulator only: how often its calls fail (`[providers.sim.faults] error_rate = 0.3`)."""
    shifts: list[Shift] = Field(default_factory=list)
    """Simulator only: how it changes under a run (`[[providers.sim.shifts]] at_s = 60`)."""
    token_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Longest gap between two tokens of a streamed reply (keep-alive bytes do not count);
    None: the stall timeout."""
    total_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Longest one call may take on this provider, from its first try to its last token,
    retries and their waits included (a token every 20 s, or keep-alives and no token,
    would otherwise keep a call going for hours). None: from the model's speed, its
    first-token deadline plus four times the reply (`max_tokens`, else 1,024 tokens plus
    the thinking the catalog knows of) at `decode_tokens_per_s`. Until a reply starts,
    the tries on this provider have two first-token deadlines at most."""
    decode_tokens_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """How fast this server writes a reply. None: the catalog's figure for a catalog
    model, else 10 tokens/s (llama.cpp on two CPU cores writes 5-20)."""
    models: dict[str, ModelConfig] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else check_base_url(value)

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        return check_headers(value)


class TierConfig(Constraints):
    """A tier: candidate models in order of preference, constraints, optional budgets."""

    model_config = _STRICT
    models: list[str] = Field(min_length=1)
    """Candidates as `provider/model`, e.g. `["cerebras/kimi-k2.6", "groq/kimi-k2.6"]`;
    `*/kimi-k2.6`: every configured, keyed provider serving those weights."""
    budget: BudgetLimits | None = None
    """Limits for this tier's calls (`[tiers.speed.budget] usd = 2`)."""


class RoutingConfig(AdaptiveRouting):
    """Retries, backoff, circuit breaker, hedging and AIMD settings (`[routing]`)."""

    model_config = _STRICT
    max_attempts: int = Field(default=3, ge=1)
    """Attempts per candidate before failing over to the next one."""
    tier_retries: int = Field(default=3, ge=0)
    """Times the whole tier is tried again, after a backoff, when every candidate failed
    with a retryable error (not a 429: those have `max_rate_limit_wait_s`)."""
    backoff_initial_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=20.0, ge=0)
    max_retry_after_s: float = Field(default=60.0, ge=0)
    """Longest Retry-After honoured; longer asks fail over instead of waiting."""
    max_rate_limit_wait_s: float = Field(default=300.0, ge=0)
    """Retry-After time one call may wait on a candidate before failing over. A 429 with
    Retry-After is the provider saying "later", so it does not use up `max_attempts`."""
    breaker_failures: int = Field(default=5, ge=1)
    """Consecutive failures (or stalls) that open a candidate's circuit."""
    breaker_cooldown_s: float = Field(default=15.0, ge=0)
    """How long an open circuit is skipped before one probe call is let through."""
    hedge: bool = True
    """Start the next candidate when the first token is later than the p95 TTFT."""
    hedge_min_s: float = Field(default=0.05, ge=0)
    """Never hedge sooner than this."""
    hedge_after_s: float | None = Field(default=None, gt=0)
    """Fixed hedge delay, instead of the observed p95 TTFT."""
    hedge_most: int = Field(default=10, ge=0)
    """Backups one call may start: further hedges against a hang (each after a longer
    silence while no racer has a first token) and against streams that stall."""
    stall_hedge_min_s: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    """Never hedge a started stream silent for less than this (else: 8x the p99 gap
    between its candidate's tokens, seeded from the catalog profile)."""
    aimd_recover_every: int = Field(default=10, ge=1)
    """Successes per +1 of the concurrency limit after a 429 cut it."""
    overload_sample: int = Field(default=20, ge=1)
    """Recent calls a verdict on 429s needs (fewer count as this many): below half of
    them 429s are scattered, at half or more an overload that cuts and pauses."""
    overload_hold_s: float = Field(default=1.0, ge=0)
    """How long 429s must stay at half the recent calls or more before they cut and pause
    (a provider whose headers show no quota; `swarm._routing.gate.Overload`)."""
    default_output_tokens: int = Field(default=1024, ge=1)
    """Output estimate for limits and budgets when a request sets no max_tokens."""
    subtask_retry_after_s: float = Field(default=5.0, ge=0)
    """A subtask failed by its provider calls (after every retry and fallback) starts
    again after this wait, times the retry's number (the breakers cool meanwhile)."""


class SwarmConfig(BaseModel):
    """The whole configuration, validated and with catalog presets resolved."""

    model_config = _STRICT
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    tiers: dict[str, TierConfig] = Field(default_factory=dict)
    roles: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, ModelSettings] = Field(default_factory=dict)
    """Model settings per role (`[settings.coder] temperature = 0.2`)."""
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    budget: BudgetLimits = Field(default_factory=BudgetLimits)
    """The run's limits (`[budget]`: usd, tokens, steps, deadline)."""
    merge: MergeConfig = Field(default_factory=MergeConfig)
    """The merge queue and the checks (`[merge]`)."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """Where commands run (`[sandbox] kind = "bwrap" | "none"`)."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """Where workspaces live (`[cluster] kind = "ray"`, `address = "auto"`)."""
    source: str | None = None
    """File the config came from; None for the built-in default."""

    @property
    def simulated(self) -> bool:
        """True when every provider is the simulator: replies and latency are not real."""
        return bool(self.providers) and all(p.kind == "sim" for p in self.providers.values())

    def tier_for_role(self, role: str) -> str:
        """The tier `[roles]` gives `role` (else its default), if that tier exists."""
        tier = self.roles.get(role) or DEFAULT_ROLES.get(role, "speed")
        return tier if tier in self.tiers else "speed"

    def tier_for(self, role: str, *, escalate: bool = False) -> str:
        """The role's tier; the reasoning tier (when there is one) for an escalation."""
        if escalate and "reasoning" in self.tiers:
            return "reasoning"
        return self.tier_for_role(role)


def split_ref(ref: str) -> tuple[str, str]:
    """`"provider/model"` as (provider, model); a ValueError for anything else."""
    provider, sep, model = ref.partition("/")
    if not sep or not provider or not model:
        raise ValueError(f"expected 'provider/model', got {ref!r}")
    return provider, model


def load_config(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> SwarmConfig:
    """Find, parse and validate the config; raise ConfigError naming file and key.

    `env` (default `os.environ`) supplies `SWARM_CONFIG` and, when no providers are
    configured, which catalog providers have a key set.
    """
    if env is None:
        env = os.environ
    if path is None and env.get("SWARM_CONFIG"):
        path = env["SWARM_CONFIG"]
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError("config file not found", path=str(p))
        data = _read_toml(p)
        if p.name == "pyproject.toml":
            data = data.get("tool", {}).get("swarm", {})
        return _build(data, source=str(p), env=env)
    if Path("swarm.toml").is_file():
        return _build(_read_toml(Path("swarm.toml")), source="swarm.toml", env=env)
    if Path("pyproject.toml").is_file():
        tool = _read_toml(Path("pyproject.toml")).get("tool", {})
        if isinstance(tool, dict) and "swarm" in tool:
            return _build(tool["swarm"], source="pyproject.toml", env=env)
    return _build({}, source=None, env=env)


def _loc(loc: tuple[int | str, ...], prefix: str = "") -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _prefix(source: str | None) -> str:
    return "tool.swarm" if source and source.endswith("pyproject.toml") else ""


def config_key(source: str | None, *loc: int | str) -> str:
    """The dotted key a user edits for `loc` in the file `source`
    (`providers.mine.kind`, or `tool.swarm.providers.mine.kind` in a pyproject.toml)."""
    return _loc(loc, _prefix(source))


def _build(data: Mapping[str, Any], *, source: str | None, env: Mapping[str, str]) -> SwarmConfig:
    prefix = _prefix(source)
    try:
        raw = SwarmConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = _loc(err["loc"], prefix) or None
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        raise ConfigError(f"{msg}{more}", path=source, key=key) from exc
    providers = {n: _resolve(n, p, source, prefix) for n, p in raw.providers.items()}
    if not providers:
        providers = _default_providers(env)
    tiers = raw.tiers or _default_tiers(providers, source)
    _check_refs(tiers, providers, raw.roles, source, prefix)
    return raw.model_copy(update={"providers": providers, "tiers": tiers})


def _resolve(name: str, p: ProviderConfig, source: str | None, prefix: str) -> ProviderConfig:
    """Fill kind/base_url/key env/auth from the catalog preset of the same name."""
    from swarm.catalog import PROVIDERS

    preset = PROVIDERS.get(name)
    update: dict[str, Any] = {}
    if preset is not None:
        for field in ("kind", "base_url", "api_key_env", "auth_style", "query"):
            value = getattr(preset, field)
            if getattr(p, field) is None and value:
                update[field] = dict(value) if field == "query" else value
    kind = update.get("kind", p.kind)
    key = _loc(("providers", name), prefix)
    if kind is None:
        known = ", ".join(sorted(PROVIDERS))
        raise ConfigError(
            f"not a catalog provider ({known}): set kind, e.g. kind = 'openai'",
            path=source,
            key=f"{key}.kind",
        )
    if kind != "sim" and not (update.get("base_url") or p.base_url):
        raise ConfigError("base_url is required for this provider", path=source, key=key)
    return p.model_copy(update=update) if update else p


def _default_providers(env: Mapping[str, str]) -> dict[str, ProviderConfig]:
    from swarm.catalog import PROVIDERS

    out: dict[str, ProviderConfig] = {}
    for name, info in PROVIDERS.items():
        if info.api_key_env and env.get(info.api_key_env):
            out[name] = _resolve(name, ProviderConfig(), None, "")
    return out or {"sim": ProviderConfig(kind="sim")}


def _catalog_models(info: Any) -> list[Any]:
    models = info.models
    return list(models.values()) if isinstance(models, Mapping) else list(models)


def _default_tiers(
    providers: Mapping[str, ProviderConfig], source: str | None = None
) -> dict[str, TierConfig]:
    if all(p.kind == "sim" for p in providers.values()):
        name = next(iter(providers))
        return {
            # fast profiles, so a first run on the simulator takes seconds, not minutes;
            # `swarm trace whatif` shows the same run on slower providers
            "speed": TierConfig(models=[f"{name}/cerebras/gpt-oss-120b"]),
            "reasoning": TierConfig(models=[f"{name}/cerebras/kimi-k2.6"]),
        }
    from swarm.catalog import PROVIDERS

    refs: list[tuple[float, str, int]] = []
    for name in providers:
        info = PROVIDERS.get(name)
        for m in _catalog_models(info) if info else []:
            model = split_ref(m.ref)[1] if m.ref.startswith(f"{name}/") else m.api_name
            refs.append(
                (m.profile.expected_s(10_000, 500), f"{name}/{model}", m.profile.reasoning_tokens)
            )
    if not refs:
        raise ConfigError(
            "no [tiers] and no catalog models for the configured providers: add "
            '[tiers.speed] models = ["provider/model"]',
            path=source,
            key="tiers",
        )
    speed = [r for _, r, _ in sorted(refs)]
    # Reasoning tier: models that think first, then the rest, slowest-but-thinking first.
    reasoning = [r for _, r, _ in sorted(refs, key=lambda t: (-t[2], t[0]))]
    return {"speed": TierConfig(models=speed), "reasoning": TierConfig(models=reasoning)}


def _check_refs(
    tiers: Mapping[str, TierConfig],
    providers: Mapping[str, ProviderConfig],
    roles: Mapping[str, str],
    source: str | None,
    prefix: str,
) -> None:
    configured = ", ".join(sorted(providers)) or "(none)"
    for tier, t in tiers.items():
        for i, ref in enumerate(t.models):
            key = _loc(("tiers", tier, "models", i), prefix)
            try:
                provider, _ = split_ref(ref)
            except ValueError as exc:
                raise ConfigError(str(exc), path=source, key=key) from None
            if provider != "*" and provider not in providers:
                raise ConfigError(
                    f"unknown provider {provider!r} in {ref!r}; configured providers: {configured}",
                    path=source,
                    key=key,
                )
    for role, tier in roles.items():
        if tier not in tiers:
            raise ConfigError(
                f"unknown tier {tier!r}; configured tiers: {', '.join(sorted(tiers))}",
                path=source,
                key=_loc(("roles", role), prefix),
            )
