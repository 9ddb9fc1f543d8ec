"""Simulated inference: the engine that plans replies and latency, and an in-process Provider.

`SimEngine` decides, for each call, what the model says (a script), how many tokens go in
and out, how long the first token and the decode take (a catalog latency profile with
log-normal jitter) and whether the call fails (fault rates). It is deterministic under its
seed: the random draws for a call are taken in call order, before the script runs.

`SimProvider` replays a plan in-process with two sleeps (TTFT, then decode), so it costs
almost no CPU and runs on trio's virtual clock. `swarm.providers.sim_server` serves the
same engine over OpenAI-compatible HTTP.

Tokens are counted as whitespace-separated words, both for prompts and for replies.
"""

from __future__ import annotations

import inspect
import itertools
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from swarm.catalog import LatencyProfile, find_model, find_profile
from swarm.errors import ConfigError, ProviderError, RateLimited
from swarm.messages import (
    ChatRequest,
    ChatResult,
    Message,
    RateLimitInfo,
    Timing,
    ToolCall,
    Usage,
)
from swarm.model import FirstTokenCallback

__all__ = [
    "Faults",
    "Quota",
    "Reply",
    "Script",
    "SimEngine",
    "SimPlan",
    "SimProvider",
    "count_tokens",
    "default_script",
]

FAULT_ERROR = "error"
FAULT_RATE_LIMIT = "rate_limit"
FAULT_DROP = "drop"
FAULT_STALL = "stall"
FAULT_MALFORMED = "malformed"


@dataclass(frozen=True)
class Faults:
    """How often simulated calls fail, and how."""

    error_rate: float = 0.0
    """Share of calls answered with HTTP 500."""
    rate_limit_rate: float = 0.0
    """Share of calls answered with 429."""
    retry_after_s: float = 1.0
    """The Retry-After a 429 carries."""
    drop_rate: float = 0.0
    """Share of calls whose connection drops mid-stream."""
    stall_rate: float = 0.0
    """Share of calls whose stream stops mid-way and never resumes."""
    malformed_rate: float = 0.0
    """Share of calls that receive a garbage chunk."""
    quota_tpm: int | None = None
    """Provider-side tokens/min quota (input + output + thinking, charged at admission);
    a call that would overdraw it gets a 429 whose Retry-After is the refill time."""
    quota_rpm: int | None = None
    """Provider-side requests/min quota."""
    quota_headers: bool = True
    """Whether successful calls report the quota left (`x-ratelimit-*`); some providers
    send none, leaving clients only the 429s."""


@dataclass(frozen=True)
class Reply:
    """What a script says: text, tool calls, or both."""

    text: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    reasoning_tokens: int | None = None
    """Hidden thinking tokens for this call; None means the profile's figure."""


Script = Callable[[ChatRequest], Reply | Awaitable[Reply]]
"""Writes the model's reply to a request (plain or async function)."""


def count_tokens(text: str) -> int:
    """Cheap token estimate: one token per whitespace-separated word."""
    return len(text.split())


_WORDS = (
    "The change keeps the public interface stable while the helper moves into its own "
    "module. Tests cover the empty input, the single item and the large batch; each one "
    "runs against a temporary repository so nothing leaks between cases. Next I will "
    "read the failing test, edit the function that parses the header, and run the suite "
    "again to confirm the fix before I report back with a short summary of the diff."
).split()
_CORPUS_WORDS = 4096
_CORPUS = " ".join(itertools.islice(itertools.cycle(_WORDS), _CORPUS_WORDS))
# _ENDS[n] is the length of the prefix of _CORPUS holding exactly n words.
_ENDS = [
    0,
    *itertools.accumulate(
        len(w) + 1 for w in itertools.islice(itertools.cycle(_WORDS), _CORPUS_WORDS)
    ),
]


def _text_of(n: int) -> str:
    """Plausible prose of exactly n words, without per-word work for n <= 4096."""
    if n <= 0:
        return ""
    parts = []
    while n > _CORPUS_WORDS:
        parts.append(_CORPUS)
        n -= _CORPUS_WORDS
    parts.append(_CORPUS[: _ENDS[n] - 1])
    return " ".join(parts)


def default_script(request: ChatRequest) -> Reply:
    """The built-in demo script.

    - metadata `sim.text`: reply with that text (truncated to max_tokens by the engine);
    - metadata `sim.tool` naming an offered tool: call it with the JSON object in `sim.args`
      (default `{}`), unless the last message is already a tool result — then answer;
    - otherwise: plausible prose of exactly `max_tokens` tokens (64 when unset).
    """
    meta = request.metadata
    tool = meta.get("sim.tool")
    if tool and any(t.name == tool for t in request.tools):
        last = request.messages[-1] if request.messages else None
        if last is None or last.role != "tool":
            args = meta.get("sim.args", "{}")
            call_id = f"call_sim_{len(request.messages)}"
            call = ToolCall.model_construct(id=call_id, name=tool, arguments=args)
            return Reply(tool_calls=(call,))
    text = meta.get("sim.text")
    if text is not None:
        return Reply(text=text)
    return Reply(text=_text_of(request.max_tokens if request.max_tokens is not None else 64))


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
    """None, `error`, `rate_limit`, `drop`, `stall` or `malformed`."""
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

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.reasoning_tokens


class Quota:
    """A provider-side bucket holding a minute's worth, refilled continuously.

    Times come from the caller (`anyio.current_time()`), so it runs on a virtual clock.
    """

    def __init__(self, per_minute: int) -> None:
        if per_minute <= 0:
            raise ConfigError(f"a quota must be positive, not {per_minute}")
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self._stamp: float | None = None

    def refill(self, now: float) -> None:
        if self._stamp is not None:
            self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    def shortfall_s(self, amount: float) -> float:
        """Seconds until `amount` is available (0 when it is there now); call after refill."""
        amount = min(amount, self.capacity)  # a call bigger than the bucket waits for a full one
        short = amount - self.level
        if short <= 1e-6:  # float dust after waiting exactly the advised time
            return 0.0
        return max(1e-3, short / self.rate)  # whole milliseconds, as retry-after-ms

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.capacity)

    @property
    def remaining(self) -> int:
        return max(0, math.floor(self.level))

    @property
    def reset_s(self) -> float:
        """Seconds until the bucket is full again (OpenAI's `x-ratelimit-reset-*`)."""
        return (self.capacity - self.level) / self.rate


def _input_tokens(messages: Sequence[Message]) -> int:
    total = 0
    for m in messages:
        if m.content:
            total += len(m.content.split())
        for call in m.tool_calls:
            total += 1 + len(call.arguments.split())
    return total


class SimEngine:
    """Plans simulated calls; shared by the in-process provider and the HTTP server."""

    def __init__(
        self,
        *,
        profile: LatencyProfile | str = "cerebras/kimi-k2.6",
        script: Script | None = None,
        faults: Faults = Faults(),
        seed: int = 0,
        time_scale: float = 1.0,
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
        f = faults
        self._thresholds = tuple(
            itertools.accumulate(
                (f.error_rate, f.rate_limit_rate, f.drop_rate, f.stall_rate, f.malformed_rate)
            )
        )
        self._any_fault = self._thresholds[-1] > 0
        self.tokens_quota = Quota(faults.quota_tpm) if faults.quota_tpm else None
        self.requests_quota = Quota(faults.quota_rpm) if faults.quota_rpm else None
        self.quota_rejections = 0
        """Calls answered 429 because they would overdraw a quota."""

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

    def _draw_fault(self, u: float) -> str | None:
        if not self._any_fault:
            return None
        kinds = (FAULT_ERROR, FAULT_RATE_LIMIT, FAULT_DROP, FAULT_STALL, FAULT_MALFORMED)
        for kind, threshold in zip(kinds, self._thresholds, strict=True):
            if u < threshold:
                return kind
        return None

    async def plan(self, model: str, request: ChatRequest) -> SimPlan:
        """Decide one call. Random draws happen first, so concurrency can't reorder them."""
        p = self.profile_for(model)
        rng = self._rng
        g_ttft, g_rate = rng.gauss(0.0, 1.0), rng.gauss(0.0, 1.0)
        fault = self._draw_fault(rng.random())
        fault_at = rng.random()

        reply = self.script(request)
        if inspect.isawaitable(reply):
            reply = await reply
        if not isinstance(reply, Reply):
            raise TypeError(f"a sim script must return Reply, not {type(reply).__name__}")

        finish = "tool_calls" if reply.tool_calls else "stop"
        out = 0
        if reply.text:
            out = len(reply.text.split())
            if request.max_tokens is not None and out > request.max_tokens:
                kept = reply.text.split()[: request.max_tokens]
                reply = Reply(" ".join(kept), reply.tool_calls, reply.reasoning_tokens)
                out, finish = request.max_tokens, "length"
        for call in reply.tool_calls:
            out += 1 + len(call.arguments.split())
        thinking = p.reasoning_tokens if reply.reasoning_tokens is None else reply.reasoning_tokens
        inp = _input_tokens(request.messages)

        ttft = p.ttft_s
        tps = p.output_tps
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
        )

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


class SimProvider:
    """The simulator as a `swarm.model.Provider`: one attempt per call, in-process."""

    kind = "sim"
    address = ""

    def __init__(
        self,
        name: str = "sim",
        *,
        engine: SimEngine | None = None,
        stall_timeout_s: float = 10.0,
        **engine_kwargs: Any,
    ) -> None:
        if engine is not None and engine_kwargs:
            raise TypeError("pass either engine or engine keyword arguments, not both")
        self.name = name
        self.engine = engine or SimEngine(**engine_kwargs)
        self.stall_timeout_s = stall_timeout_s
        """How long a stalled stream waits before failing, as a client's read timeout would."""

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
    ) -> ChatResult:
        start = anyio.current_time()
        plan = await self.engine.plan(model, request)
        fault = plan.fault
        if fault == FAULT_RATE_LIMIT:
            raise RateLimited(
                "rate limited (429, simulated)",
                provider=self.name,
                model=model,
                retry_after=plan.retry_after_s,
            )
        if fault == FAULT_ERROR:
            raise ProviderError(
                "server error (500, simulated)",
                provider=self.name,
                model=model,
                status=500,
                retryable=True,
            )
        await anyio.sleep(plan.ttft_s)
        first = anyio.current_time()
        if on_first_token is not None:
            on_first_token()
        if plan.think_s:
            await anyio.sleep(plan.think_s)
        if fault is not None:
            await anyio.sleep(plan.decode_s * plan.fault_at)
            if fault == FAULT_STALL:
                await anyio.sleep(self.stall_timeout_s)
            self._raise_stream_fault(fault, model)
        await anyio.sleep(plan.decode_s)
        end = anyio.current_time()

        reply = plan.reply
        return ChatResult.model_construct(
            message=Message.model_construct(
                role="assistant", content=reply.text, tool_calls=list(reply.tool_calls)
            ),
            finish_reason=plan.finish_reason,
            usage=Usage.model_construct(
                input_tokens=plan.input_tokens,
                output_tokens=plan.output_tokens + plan.reasoning_tokens,
                reasoning_tokens=plan.reasoning_tokens,
                cached_input_tokens=0,
            ),
            timing=Timing.model_construct(ttft_s=first - start, duration_s=end - start),
            provider=self.name,
            model=model,
            cost_usd=0.0,
            attempts=1,
            simulated=True,
            rate_limit=plan.rate_limit,
            extras={},
        )

    def _raise_stream_fault(self, fault: str, model: str) -> None:
        # the errors an HTTP client raises for the same faults
        if fault == FAULT_DROP:
            raise ProviderError(
                "connection dropped mid-stream (simulated)",
                provider=self.name,
                model=model,
                kind="connect",
                retryable=True,
            )
        if fault == FAULT_MALFORMED:
            raise ProviderError(
                "malformed stream chunk (simulated)",
                provider=self.name,
                model=model,
                kind="malformed",
                retryable=True,
            )
        raise ProviderError(
            f"stream stalled for {self.stall_timeout_s:g} s (simulated)",
            provider=self.name,
            model=model,
            kind="stall",
            retryable=True,
        )

    async def aclose(self) -> None:
        return None
