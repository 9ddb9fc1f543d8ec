"""The simulator as a `swarm.model.Provider`: replays `SimEngine` plans in-process.

Each call sleeps for its TTFT, then streams its thinking and decode in pieces of 0.1 s
(telling `swarm.providers._progress` after each), so it costs little CPU and runs on
a virtual clock. A caller that listens (`on_delta`) is told the reply word by word (at
most 256 pieces); a stream that drops or stalls has told the words before the fault.
Faults raise the errors an HTTP client would. This module is also the
simulator's front door: it re-exports the engine, faults and replies
(`from swarm.providers.sim import SimEngine, Faults, Reply`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import anyio

from swarm.config import ProviderConfig
from swarm.errors import ContextWindowExceeded, ProviderError, RateLimited
from swarm.messages import ChatRequest, ChatResult, Message, Timing, Usage
from swarm.model import FirstTokenCallback, PieceSink
from swarm.providers._progress import tell_progress
from swarm.providers.sim._context import Limits, context_error_message
from swarm.providers.sim._engine import FAULT_CONTEXT, SimEngine, SimPlan
from swarm.providers.sim._faults import (
    FAULT_DROP,
    FAULT_ERROR,
    FAULT_HANG,
    FAULT_MALFORMED,
    FAULT_RATE_LIMIT,
    FAULT_REFUSE,
    FAULT_STALL,
    Faults,
    Quota,
)
from swarm.providers.sim._reply import Reply, Script, count_tokens, default_script, split_words

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
    "from_config",
]


_PIECE_S = 0.1
_MOST_PIECES = 256


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
        on_delta: PieceSink | None = None,
    ) -> ChatResult:
        """Answer `request` as `model` would, after the plan's simulated TTFT and decode;
        `on_delta` hears its text word by word.

        Raises:
            ContextWindowExceeded: the request does not fit the model's window.
            RateLimited: a 429 (random, or a quota overdrawn), with its Retry-After.
            ProviderError: a 500, a refused or dropped connection, a malformed chunk, a
                stalled or hung stream (after `stall_timeout_s`).
        """
        start = anyio.current_time()
        plan = await self.engine.plan(model, request)
        fault = plan.fault
        await self._fail_early(plan, model)
        await anyio.sleep(plan.ttft_s)
        first = anyio.current_time()
        if on_first_token is not None:
            on_first_token()
        if plan.think_s:
            await _stream(plan.think_s)
        reply = plan.reply
        words = split_words(reply.text) if on_delta is not None and reply.text else []
        if fault is not None:
            told = words[: int(len(words) * plan.fault_at)]
            await _stream(plan.decode_s * plan.fault_at, told, on_delta)
            if fault == FAULT_STALL:
                await anyio.sleep(self.stall_timeout_s)
            self._raise_stream_fault(fault, model)
        await _stream(plan.decode_s, words, on_delta)
        end = anyio.current_time()

        return ChatResult.model_construct(
            message=Message.model_construct(
                role="assistant", content=reply.text, tool_calls=list(reply.tool_calls)
            ),
            finish_reason=plan.finish_reason,
            usage=Usage.model_construct(
                input_tokens=plan.input_tokens,
                output_tokens=plan.output_tokens + plan.reasoning_tokens,
                reasoning_tokens=plan.reasoning_tokens,
                cached_input_tokens=plan.cached_tokens,
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

    async def _fail_early(self, plan: SimPlan, model: str) -> None:
        """Raise what a client sees for a fault before the first token (if `plan` has one):
        400 over the window, 429, 500, a refused connection, a hang."""
        fault = plan.fault
        if fault == FAULT_CONTEXT:
            raise _too_long(plan, self.name, model)
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
        if fault == FAULT_REFUSE:
            self._raise_stream_fault(fault, model)
        if fault == FAULT_HANG:  # no first token: the client's read timeout ends it
            await anyio.sleep(self.stall_timeout_s)
            self._raise_stream_fault(FAULT_STALL, model)

    def _raise_stream_fault(self, fault: str, model: str) -> None:
        # the errors an HTTP client raises for the same faults
        if fault in (FAULT_DROP, FAULT_REFUSE):
            what = "refused" if fault == FAULT_REFUSE else "dropped mid-stream"
            raise ProviderError(
                f"connection {what} (simulated)",
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
        """Nothing to release (no connections); here for the `Provider` protocol."""
        return None


async def _stream(
    seconds: float, words: Sequence[str] = (), on_delta: PieceSink | None = None
) -> None:
    """Stream for `seconds`, telling the attempt's progress listener after each piece
    (`_PIECE_S` of the stream, or a word or a few when `words` are told), as network reads
    would; `on_delta` hears the words due with each piece."""
    if seconds <= 0 and not words:
        return
    pieces = min(_MOST_PIECES, max(math.ceil(seconds / _PIECE_S), len(words)))
    told = 0
    for i in range(1, pieces + 1):
        await anyio.sleep(seconds / pieces)
        tell_progress()
        due = len(words) * i // pieces
        if on_delta is not None and due > told:
            on_delta("text", "".join(words[told:due]))
            told = due


def _too_long(plan: SimPlan, provider: str, model: str) -> ContextWindowExceeded:
    limit = plan.context_window or 0
    completion = plan.requested_tokens - plan.input_tokens
    return ContextWindowExceeded(
        f"HTTP 400: {context_error_message(limit, plan.input_tokens, completion)} (simulated)",
        provider=provider,
        model=model,
        limit=limit,
        requested=plan.requested_tokens,
    )


def from_config(name: str, config: ProviderConfig, api_key: str | None) -> SimProvider:
    """The simulator `[providers.NAME]` describes (`kind = "sim"`; no key needed), with
    its `faults`, the stall timeout a real client would give up after, and a model's
    `context_window` / `max_output_tokens` there over the catalog's."""
    limits = {
        model: Limits(mc.context_window, mc.max_output_tokens)
        for model, mc in config.models.items()
        if mc.context_window or mc.max_output_tokens
    }
    script = None
    if config.real_model is not None:
        from swarm.providers.sim._real_model import real_model_script

        script = real_model_script(default_script, config.real_model, config.seed)
    return SimProvider(
        name,
        script=script,
        stall_timeout_s=config.stall_timeout_s,
        seed=config.seed,
        time_scale=config.time_scale,
        faults=config.faults,
        profile=config.profile or "cerebras/kimi-k2.6",
        limits=limits,
        shifts=config.shifts,
    )
