"""The simulator's engine: for each call, what the model says, how many tokens go in and
out, how long the first token and the decode take, and whether the call fails.

Latency comes from a catalog profile with log-normal jitter; faults from `Faults`. The
engine is deterministic under its seed: the random draws for a call are taken before the
script runs, from a generator seeded by the engine's seed, the call's agent, role and step
(request metadata) and how many calls with that key came before, so calls made at the same
moment draw the same numbers whatever order they reach the engine in (calls without an
agent draw in call order). Tokens are the simulator's own unit, words
(`sim_reply.count_tokens`), both for prompts and for replies. `SimProvider` (in-process)
and `swarm.providers.sim._server` (over HTTP) both replay its plans.
"""

from __future__ import annotations

import inspect
import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import anyio

from swarm.catalog import LatencyProfile, find_model, find_profile
from swarm.config._shifts import Shift
from swarm.errors import ConfigError
from swarm.messages import ChatRequest, Message, RateLimitInfo
from swarm.providers.sim._context import (
    Limits,
    PrefixCache,
    cap_reply,
    limits_of,
    message_tokens,
)
from swarm.providers.sim._faults import FAULT_ERROR, FAULT_KINDS, FAULT_RATE_LIMIT, Faults, Quota
from swarm.providers.sim._reply import Reply, Script, default_script

__all__ = ["FAULT_CONTEXT", "SimEngine", "SimPlan"]

FAULT_CONTEXT = "context"
"""Not drawn: the request is over the model's window, answered 400 as endpoints do."""


@dataclass(frozen=True)
class SimPlan:
    """One simulated call, decided in advance. Durations are already scaled by time_scale."""

    reply: Reply
    """What the model says (text truncated to max_tokens)."""
    input_tokens: int
    output_tokens: int
    """Visible output tokens: text plus tool-call names and arguments."""
    reasoning_tokens: int
    """Thinking tokens, decoded (and streamed as reasoning) before the visible answer."""
    ttft_s: float
    """Until the first token, thinking or visible: TTFT + prefill."""
    decode_s: float
    """From the first visible token to the last."""
    fault: str | None
    """None, or one of `sim_faults.FAULT_KINDS` (`error`, `rate_limit`, `hang`, ...)."""
    fault_at: float
    """Where in the stream a mid-stream fault strikes, as a fraction of the decode."""
    finish_reason: str = "stop"
    """`stop`, `length` (text truncated to max_tokens) or `tool_calls`."""
    think_s: float = 0.0
    """Decoding the thinking tokens, between the first token and the visible answer.
    Real providers stream reasoning chunks, so clients see their first token at the start
    of thinking and measure tokens/s over thinking and answer together."""
    retry_after_s: float = 0.0
    """For a `rate_limit` fault: the Retry-After the 429 carries."""
    rate_limit: RateLimitInfo | None = None
    """The quota left after admitting this call (what `x-ratelimit-*` headers say), when
    the engine has a quota."""

    cached_tokens: int = 0
    """Input tokens served from the prompt cache (part of input_tokens)."""
    context_window: int | None = None
    """The model's window; for a `context` fault, the limit the request went over."""
    requested_tokens: int = 0
    """Prompt plus `max_tokens`: what the window check compared."""

    @property
    def total_tokens(self) -> int:
        """Input, visible output and thinking tokens: what a tokens/min quota charges."""
        return self.input_tokens + self.output_tokens + self.reasoning_tokens


_NO_FAULTS = Faults()


def _input_tokens(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


class SimEngine:
    """Plans simulated calls; shared by the in-process provider and the HTTP server."""

    def __init__(
        self,
        *,
        profile: LatencyProfile | str = "cerebras/kimi-k2.6",
        script: Script | None = None,
        faults: Faults = _NO_FAULTS,
        seed: int = 0,
        time_scale: float = 1.0,
        limits: Mapping[str, Limits] | None = None,
        shifts: Sequence[Shift] = (),
    ) -> None:
        self.profile = find_profile(profile) if isinstance(profile, str) else profile
        """The profile for model names that are not catalog refs."""
        self.profile_name = profile if isinstance(profile, str) else "custom"
        self.script: Script = script or default_script
        self.faults = faults
        self.seed = seed
        self.time_scale = time_scale
        """Multiplies every duration: 0 for zero-latency benchmarks, 0.01 for fast tests."""
        self._rng = random.Random(seed)
        self._profiles: dict[str, LatencyProfile] = {}
        self._limits_over = dict(limits or {})
        self._limits: dict[str, Limits] = {}
        self.cache = PrefixCache()
        """Prompt-cache state shared by every call to this engine."""
        rates = (getattr(faults, f"{kind}_rate") for kind in FAULT_KINDS)
        self._thresholds = tuple(itertools.accumulate(rates))
        self._any_fault = self._thresholds[-1] > 0
        self.tokens_quota = Quota(faults.quota_tpm) if faults.quota_tpm else None
        self.requests_quota = Quota(faults.quota_rpm) if faults.quota_rpm else None
        self.quota_rejections = 0
        """Calls answered 429 because they would overdraw a quota."""
        self.shifts = tuple(shifts)
        """How this provider changes under the run (`swarm.config._shifts`)."""
        self._calls = 0
        self._start: float | None = None
        self._keys: dict[str, int] = {}
        """Calls so far per agent/role/step key (a retry draws afresh)."""

    def profile_for(self, model: str) -> LatencyProfile:
        """The catalog profile when `model` is a catalog ref, else the engine's default."""
        profile = self._profiles.get(model)
        if profile is None:
            try:
                profile = find_model(model).profile
            except ConfigError:  # not a catalog ref: any model name is served
                profile = self.profile
            self._profiles[model] = profile
        return profile

    def limits_for(self, model: str) -> Limits:
        """The window and output cap of `model` (config overrides, else the catalog)."""
        found = self._limits.get(model)
        if found is None:
            info = None
            for ref in (model, self.profile_name):  # unknown names get the default's limits
                try:
                    info = find_model(ref)
                    break
                except ConfigError:
                    continue
            found = self._limits[model] = limits_of(info, self._limits_over, model)
        return found

    def _draw_fault(self, u: float) -> str | None:
        if not self._any_fault:
            return None
        for kind, threshold in zip(FAULT_KINDS, self._thresholds, strict=True):
            if u < threshold:
                return kind
        return None

    def _rng_for(self, request: ChatRequest) -> random.Random:
        """The call's generator: its own when the request names an agent, so the order in
        which simultaneous calls arrive does not change what each draws."""
        meta = request.metadata
        agent = meta.get("agent")
        if not agent:
            return self._rng
        key = f"{agent}/{meta.get('role', '')}/{meta.get('step', '')}"
        n = self._keys[key] = self._keys.get(key, 0) + 1
        return random.Random(f"{self.seed}/{key}/{n}")

    async def plan(self, model: str, request: ChatRequest) -> SimPlan:
        """Decide one call. Random draws happen first, so concurrency can't reorder them."""
        p = self.profile_for(model)
        rng = self._rng_for(request)
        g_ttft, g_rate = rng.gauss(0.0, 1.0), rng.gauss(0.0, 1.0)
        fault = self._draw_fault(rng.random())
        fault_at = rng.random()
        speed, fault = self._shifted(fault, rng)

        limits = self.limits_for(model)
        inp = _input_tokens(request.messages)
        cap = request.max_tokens or limits.max_output_tokens
        window = limits.context_window
        requested = inp + (request.max_tokens or 0)
        if window is not None and requested > window:
            return _rejected(inp, window, requested)

        reply = self.script(request)
        if inspect.isawaitable(reply):
            reply = await reply
        if not isinstance(reply, Reply):
            raise TypeError(f"a sim script must return Reply, not {type(reply).__name__}")

        thinking = p.reasoning_tokens if reply.reasoning_tokens is None else reply.reasoning_tokens
        reply, out, thinking, finish = cap_reply(reply, cap, thinking)
        cached = self.cache.lookup_and_store(model, request.messages)

        ttft = p.ttft_s / speed
        tps = p.output_tps * speed
        sigma = p.ttft_sigma()
        if sigma > 0:
            ttft *= math.exp(sigma * g_ttft)
        if p.jitter > 0:
            tps *= math.exp(p.jitter * g_rate)
        scale = self.time_scale
        retry_after: float = self.faults.retry_after_s
        info: RateLimitInfo | None = None
        if fault != FAULT_RATE_LIMIT and (self.tokens_quota or self.requests_quota):
            wait, info = self._admit(inp + out + thinking)
            if wait > 0:
                fault, retry_after, info = FAULT_RATE_LIMIT, wait, None
            elif not self.faults.quota_headers:
                info = None
        return SimPlan(
            reply=reply,
            input_tokens=inp,
            output_tokens=out,
            reasoning_tokens=thinking,
            ttft_s=(ttft + inp / p.prefill_tps) * scale,
            decode_s=out / tps * scale,
            fault=fault,
            fault_at=fault_at,
            finish_reason=finish,
            think_s=thinking / tps * scale,
            retry_after_s=retry_after,
            rate_limit=info,
            cached_tokens=cached,
            context_window=window,
            requested_tokens=requested,
        )

    def _shifted(self, fault: str | None, rng: random.Random) -> tuple[float, str | None]:
        """The speed now and the fault after the shift in force (if any) is applied; the
        extra random draw is made only when shifts are configured."""
        if not self.shifts:
            return 1.0, fault
        if self._start is None:
            self._start = anyio.current_time()
        self._calls += 1
        active = self._active(self._calls)
        u = rng.random()
        if active is None:
            return 1.0, fault
        if fault is None and active.error_rate is not None and u < active.error_rate:
            fault = FAULT_ERROR
        return active.speed, fault

    def _active(self, call: int) -> Shift | None:
        """The shift in force now, for the `call`th call."""
        now = anyio.current_time()
        start = now if self._start is None else self._start
        elapsed = (now - start) / self.time_scale if self.time_scale > 0 else 0.0
        active = None
        for shift in self.shifts:
            if shift.started(elapsed, call):
                active = shift
        return active

    def shift_now(self) -> tuple[float, float]:
        """The speed and error rate the next call would meet: what an oracle knows."""
        active = self._active(self._calls + 1) if self.shifts else None
        if active is None:
            return 1.0, 0.0
        return active.speed, active.error_rate or 0.0

    def _admit(self, tokens: int) -> tuple[float, RateLimitInfo | None]:
        """Charge the quotas for one call, or return how long until they could take it."""
        now = anyio.current_time()
        tq, rq = self.tokens_quota, self.requests_quota
        wait = 0.0
        for q, amount in ((tq, tokens), (rq, 1)):
            if q is not None:
                q.refill(now)
                wait = max(wait, q.shortfall_s(amount))
        if wait > 0:
            self.quota_rejections += 1
            return wait, None
        if tq is not None:
            tq.take(tokens)
        if rq is not None:
            rq.take(1)
        return 0.0, RateLimitInfo.model_construct(
            remaining_requests=None if rq is None else rq.remaining,
            remaining_tokens=None if tq is None else tq.remaining,
            reset_requests_s=None if rq is None else rq.reset_s,
            reset_tokens_s=None if tq is None else tq.reset_s,
        )


def _rejected(inp: int, window: int, requested: int) -> SimPlan:
    """A request over the window: answered at once with a 400, nothing generated."""
    return SimPlan(
        reply=Reply(),
        input_tokens=inp,
        output_tokens=0,
        reasoning_tokens=0,
        ttft_s=0.0,
        decode_s=0.0,
        fault=FAULT_CONTEXT,
        fault_at=0.0,
        context_window=window,
        requested_tokens=requested,
    )
