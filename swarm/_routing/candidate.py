"""Per-candidate routing state: one provider/model of a tier, built once from the config.

Owns `Target` (the provider, prices, limits gates, breaker, latency profile, span
attributes and the rolling TTFT window behind the hedge delay), `build_target` (resolving
a `provider/model` ref against the config and the catalog) and `Call` (per-call state
shared by attempts, retries and hedges). Everything here is request-independent, so the
router's hot path only reads it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import anyio

from swarm._routing.breaker import Breaker
from swarm._routing.gate import Gate
from swarm._routing.relay import Relay
from swarm._routing.score import Score
from swarm._tracing import semconv as sc
from swarm._tracing.file_span import SharedAttributes
from swarm.config import ProviderConfig, SwarmConfig, ToolCallMode, split_ref
from swarm.errors import ConfigError
from swarm.messages import ChatRequest
from swarm.model import Provider
from swarm.providers._endpoint import Endpoint, on_this_machine
from swarm.providers._tool_text import text_request

__all__ = ["Call", "Clock", "Target", "build_target"]

_TTFT_WINDOW = 64
_GAP_WINDOW = 512
_GAP_PRIOR_TOKENS = 64


class Target:
    """One provider/model: its provider, prices, limits, breaker and observed TTFTs."""

    def __init__(
        self,
        ref: str,
        provider: Provider,
        model: str,
        gates: tuple[Gate, ...],
        in_usd_per_m: float,
        out_usd_per_m: float,
        profile: Any,
        breaker: Breaker,
    ) -> None:
        self.ref = ref
        self.provider = provider
        self.model = model
        self.gates = gates
        self.in_price = in_usd_per_m / 1e6
        self.out_price = out_usd_per_m / 1e6
        self.profile = profile
        self.breaker = breaker
        self.cached_price = self.in_price
        """Price of one prompt-cache hit (the input price unless a discount is known)."""
        self.context_window: int | None = None
        """Tokens one request may hold, when known (catalog or config)."""
        self.simulated = provider.kind == "sim"
        self.span_name = f"{sc.OP_CHAT} {model}"
        self.attrs: dict[str, SharedAttributes] = {}
        self._ttfts: list[float] = []
        self._next = 0
        self.p95_ttft: float | None = None
        self._gaps: list[float] = []
        self._next_gap = 0
        self.p99_gap: float | None = None
        """The 99th percentile of silences between a healthy stream's token reads."""
        self.deadline: Callable[[str, ChatRequest, int], tuple[float, object, float]] | None = None
        """How long a call may take on this candidate, retries included, how that was set,
        and its first-token deadline (`Endpoint.call_deadline`); None: no deadline of its
        own (an in-process model)."""
        self.score = Score(profile, 0.3)
        """Live estimates (TTFT, decode rate, failure rates) the ranked tiers compare."""
        self.self_hedge: Target | None = None if on_this_machine(provider.address) else self
        """What this candidate hedges against when it is the tier's last: itself, unless
        it is a server on this machine."""
        self.tool_calls: ToolCallMode = "native"
        """How this model's tool calls arrive (`tool_calls` in config)."""
        self.capabilities: frozenset[str] = frozenset({"tools", "streaming"}) | (
            {"reasoning"} if profile is not None and profile.reasoning_tokens > 0 else set()
        )

    def cost(self, in_tokens: int, out_tokens: int, cached_tokens: int = 0) -> float:
        fresh = in_tokens - cached_tokens
        return (
            fresh * self.in_price + cached_tokens * self.cached_price + out_tokens * self.out_price
        )

    def expected_s(self, in_tokens: int, out_tokens: int) -> float:
        return float(self.profile.expected_s(in_tokens, out_tokens)) if self.profile else 1e9

    def observe_ttft(self, ttft: float) -> None:
        if ttft <= 0:
            return
        if len(self._ttfts) < _TTFT_WINDOW:
            self._ttfts.append(ttft)
        else:
            self._ttfts[self._next] = ttft
        self._next = (self._next + 1) % _TTFT_WINDOW
        if len(self._ttfts) >= 20 and self._next % 8 == 0:
            ordered = sorted(self._ttfts)
            self.p95_ttft = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]

    def observe_gap(self, gap: float) -> None:
        """One silence between two token reads of a healthy stream."""
        gaps = self._gaps
        if len(gaps) < _GAP_WINDOW:
            gaps.append(gap)
        else:
            gaps[self._next_gap] = gap
        self._next_gap = (self._next_gap + 1) % _GAP_WINDOW
        if len(gaps) >= 50 and self._next_gap % 16 == 0:
            ordered = sorted(gaps)
            self.p99_gap = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]

    def stall_delay(self, floor: float) -> float:
        """How long a started stream may be silent before a backup races it: 8x the p99
        gap between token reads (before 50 are seen: the time the profile takes for
        `_GAP_PRIOR_TOKENS` tokens; without a profile, `floor`), never below `floor`."""
        gap = self.p99_gap
        if gap is None:
            tps = self.profile.output_tps if self.profile is not None else 0.0
            if tps <= 0:
                return floor
            gap = _GAP_PRIOR_TOKENS / tps
        return max(floor, 8 * gap)

    def hedge_delay(self, fixed: float | None, floor: float) -> float | None:
        if fixed is not None:
            return fixed
        p95 = self.p95_ttft
        if p95 is None and self.profile is not None:
            p95 = float(self.profile.p95_ttft_s())
        return None if p95 is None else max(p95, floor)


def build_target(
    ref: str, config: SwarmConfig, providers: dict[str, Provider], provider_gate: Gate
) -> Target:
    """The candidate for `ref`; a per-model `Gate` is appended when the model has limits."""
    from swarm import catalog

    pname, model = split_ref(ref)
    pc = config.providers[pname]
    provider = providers.get(pname)
    if provider is None:
        raise ConfigError(f"no provider object for {pname!r}", key=f"providers.{pname}")
    mc = pc.models.get(model)
    info = None
    # sim models and custom hosts may name a catalog ref; a sim model that does not is
    # served with the provider's default profile, so it is priced and ranked as that
    sim_default = pc.profile or "cerebras/kimi-k2.6" if pc.kind == "sim" else None
    for candidate in (ref, model, sim_default):
        try:
            info = catalog.find_model(candidate) if candidate else None
            break
        except ConfigError:
            continue
    api_name = (mc.api_name if mc and mc.api_name else None) or (
        info.api_name if info is not None and info.ref == ref else model
    )
    profile = info.profile if info is not None else None
    if mc and mc.profile:
        profile = catalog.find_profile(mc.profile)
    in_p = mc.input_usd_per_m if mc and mc.input_usd_per_m is not None else None
    out_p = mc.output_usd_per_m if mc and mc.output_usd_per_m is not None else None
    r = config.routing
    gates: tuple[Gate, ...] = (provider_gate,)
    if mc and (mc.max_concurrency or mc.rpm or mc.tpm):
        g = Gate(
            ref,
            max_concurrency=mc.max_concurrency,
            rpm=mc.rpm,
            tpm=mc.tpm,
            recover_every=r.aimd_recover_every,
            overload=provider_gate.overload,
        )
        gates = (*gates, g)
    target = Target(
        ref,
        provider,
        api_name,
        gates,
        in_p if in_p is not None else (info.input_usd_per_m if info else 0.0),
        out_p if out_p is not None else (info.output_usd_per_m if info else 0.0),
        profile,
        Breaker(r.breaker_failures, r.breaker_cooldown_s),
    )
    _set_limits(target, info, mc)
    target.tool_calls = (mc.tool_calls if mc else None) or pc.tool_calls or _default_mode(pc, pname)
    _tell_speed(provider, api_name, profile, pc.prefill_tokens_per_s)
    _tell_decode(provider, api_name, profile, pc.decode_tokens_per_s)
    if isinstance(provider, Endpoint):
        target.deadline = provider.call_deadline
    target.score.alpha = r.score_decay
    if pc.kind == "sim":
        target.score.scale = pc.time_scale
    if mc is not None and mc.supports is not None:
        target.capabilities = frozenset(mc.supports)
    return target


def _default_mode(pc: ProviderConfig, name: str) -> ToolCallMode:
    """`native` for the catalog's clouds (their servers parse tool calls), else `auto`."""
    from swarm import catalog

    cloud = name in catalog.PROVIDERS and pc.kind in (None, catalog.PROVIDERS[name].kind)
    return "native" if cloud and pc.base_url in (None, catalog.PROVIDERS[name].base_url) else "auto"


_FAST_PREFILL_TPS = 5_000.0
"""A server that reads prompts this fast always answers within the stall timeout."""


def _tell_speed(provider: Provider, model: str, profile: Any, prefill_tps: float | None) -> None:
    """Give an HTTP endpoint the model's speed, for its first-token deadline."""
    if not isinstance(provider, Endpoint):
        return
    known = profile.prefill_tps if profile is not None else None
    rate = prefill_tps or known
    if rate is not None and rate >= _FAST_PREFILL_TPS:
        return
    provider.first_token.expect(model, profile.ttft_s if profile is not None else None, rate)


def _tell_decode(provider: Provider, model: str, profile: Any, decode_tps: float | None) -> None:
    """Give an HTTP endpoint the model's decode rate and thinking, for its call deadline."""
    if not isinstance(provider, Endpoint):
        return
    known = profile.output_tps if profile is not None else None
    thinking = profile.reasoning_tokens if profile is not None else 0
    provider.deadline.expect(model, decode_tps or known, thinking)


def _set_limits(target: Target, info: Any, mc: Any) -> None:
    """The window and cache price: the config's figures over the catalog's."""
    window = info.context_window if info is not None else None
    cached = info.cached_input_usd_per_m if info is not None else None
    if mc is not None:
        window = mc.context_window or window
        if mc.cached_input_usd_per_m is not None:
            cached = mc.cached_input_usd_per_m
    target.context_window = window
    if cached is not None:
        target.cached_price = cached / 1e6


_FIRST_TRIES = 2
_CUT_GRACE_S = 2.0
"""How long after the whole call's deadline the router waits for the try that is writing
to end its reply there (`swarm.providers._call_deadline.DEADLINE_CUT`): that try's own
clock started a little after this one."""


class Clock:
    """The deadline of one call's tries on one candidate, counted from the first try's
    admission (a wait for a slot at the gates is not the provider's time). Until a first
    token comes it is two first-token deadlines (a try and one retry of a hang: a server
    that sends keep-alives and nothing else fails every try the same way); from the
    first token on, the whole call's deadline, and a grace in which the try that is
    writing may end its reply there itself."""

    __slots__ = ("first_s", "scope", "started", "total_s")

    def __init__(self, scope: anyio.CancelScope, total_s: float, first_s: float) -> None:
        self.scope = scope
        self.total_s = total_s
        self.first_s = first_s
        self.started = math.inf

    def admitted(self) -> None:
        """A try was admitted at the gates: the first one starts the clock."""
        if self.started == math.inf:
            self.started = anyio.current_time()
            until_first = _FIRST_TRIES * self.first_s + 1.0
            self.scope.deadline = self.started + min(self.total_s, until_first)

    def first_token(self) -> None:
        """A reply started: the whole call's deadline applies."""
        self.scope.deadline = self.started + self.total_s + _CUT_GRACE_S

    def writer_failed(self) -> None:
        """A try that had started its reply failed: its grace ends with it."""
        self.scope.deadline = min(self.scope.deadline, self.started + self.total_s)


class Call:
    """Per-call state shared by attempts, retries and hedges."""

    __slots__ = (
        "as_text_request",
        "attempts",
        "deadline",
        "est_in",
        "est_tokens",
        "last_resort",
        "priority",
        "reason",
        "relay",
        "request",
        "rng",
        "role",
        "scattered_429",
        "scores",
        "tier",
    )

    def __init__(
        self, request: ChatRequest, tier: str, role: str | None, priority: int, est_tokens: int
    ) -> None:
        self.request = request
        self.tier = tier
        self.role = role
        self.priority = priority
        self.est_tokens = est_tokens
        """The call's tokens as estimated up front, prompt and reply (its gates' share)."""
        self.est_in = 0
        """The prompt's tokens as estimated up front (the candidates' deadlines read it)."""
        self.attempts = 0
        self.last_resort = False
        self.scattered_429 = False
        """Was the last failed attempt a 429 the gates took as scattered (few 429s among
        recent calls, no quota shown), not overload? Its retry then needs no Retry-After."""
        self.rng: random.Random | None = None
        """The jitter of this call's waits (`Retrier.jitter`), made at its first retry."""
        self.reason = ""
        """Why the first candidate was chosen (`swarm.route.reason` on each chat span)."""
        self.scores = ""
        """The scores the choice compared, `ref=score` best first."""
        self.deadline: Clock | None = None
        """The deadline of the tries on the current candidate (`Router._bounded`)."""
        self.relay: Relay | None = None
        """Who hears the attempts' pieces (a streamed call), one attempt at a time."""
        self.as_text_request: ChatRequest | None = None
        """The request with its tools written as text, made on first need (`as_text`)."""

    def as_text(self) -> ChatRequest:
        """The request for a model that takes tools as text (`tool_calls = "text"`)."""
        if self.as_text_request is None:
            self.as_text_request = text_request(self.request)
        return self.as_text_request
