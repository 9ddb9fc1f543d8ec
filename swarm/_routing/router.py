"""The router every model call goes through: tiers, failover, retries, breakers, hedging.

`Router.chat(request, tier=..., need=...)` tries the tier's candidates in order (skipping
open circuits, filtering by price for a `Need`), takes the shared limits (`swarm._routing.gate`),
calls `provider.chat` inside a `chat {model}` CLIENT span with GenAI attributes, retries
retryable errors with tenacity (exponential backoff with jitter, honouring Retry-After),
fails over to the next candidate, and hedges: when the first token is later than the
candidate's p95 TTFT, or a started stream falls silent past its inter-token profile, the
next candidate (the same one, as the last resort) races it and the loser is cancelled.
Per-candidate state lives in `swarm._routing.candidate`, the retry policy in
`swarm._routing.retry` and the hedged race in `swarm._routing.hedge`.

Hot-path rule: everything that does not depend on the request (attribute dicts, prices,
gates, span names) is computed once per candidate in `__init__`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Mapping

import anyio
from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from swarm._routing.candidate import Call, Clock, Target, build_target
from swarm._routing.gate import Gate, Overload, Permit, admit
from swarm._routing.hedge import Delays, lost_race, race
from swarm._routing.limits import clock
from swarm._routing.relay import Relay
from swarm._routing.retry import Retrier
from swarm._routing.select import Need, Policy, apply_need
from swarm._routing.tier_model import TierModel
from swarm._routing.tiers import make_policy, tier_refs
from swarm._tokens import estimate_input_tokens
from swarm._tracing import semconv as sc
from swarm._tracing.file_span import SharedAttributes
from swarm._tracing.setup import start_span
from swarm.budget import Budget
from swarm.config import SwarmConfig, split_ref
from swarm.config._secrets import capture_content, scrub
from swarm.errors import ConfigError, ProviderError, RateLimited
from swarm.messages import ChatRequest, ChatResult
from swarm.model import DeltaSink, FirstTokenCallback, Provider
from swarm.providers._registry import build_providers
from swarm.providers._tool_text import read_calls

__all__ = ["Need", "Router", "TierModel"]

_NO_FAILOVER = frozenset({400, 422})  # the request itself is wrong: no provider will take it


def _lost() -> bool:
    """Was this cancellation a hedged race cancelling a loser (not the run, a deadline)?"""
    lost = lost_race.get()
    return lost is not None and lost()


_FIRST_TRIES_TEXT = "two tries"  # candidate.Clock's _FIRST_TRIES, in an error message


class _FirstToken:
    """An attempt's first-token callback: marks its span, restarts the call's clock, tells
    the hedged race. An object, not a closure: four cells fewer per call in flight."""

    __slots__ = ("came", "clock", "on_first", "span")

    def __init__(
        self, span: trace.Span, clock: Clock | None, on_first: FirstTokenCallback | None
    ) -> None:
        self.span, self.clock, self.on_first = span, clock, on_first
        self.came = False

    def __call__(self) -> None:
        self.came = True
        if self.clock is not None:
            self.clock.first_token()
        self.span.add_event(sc.FIRST_TOKEN_EVENT)
        if self.on_first is not None:
            self.on_first()


class Router:
    """Routes each call to a tier's candidates under the swarm's shared limits."""

    def __init__(
        self,
        config: SwarmConfig,
        *,
        providers: Mapping[str, Provider] | None = None,
        budget: Budget | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env

        self.config = config
        self._owned = providers is None
        self._providers = dict(providers) if providers is not None else build_providers(config, env)
        r = config.routing
        self._routing = r
        self._retry = Retrier(r)
        self._capture = capture_content(env)
        self._secrets = [
            env[p.api_key_env]
            for p in config.providers.values()
            if p.api_key_env and env.get(p.api_key_env)
        ]
        self.gates: dict[str, Gate] = {}
        for name, p in config.providers.items():
            self.gates[name] = Gate(
                name,
                max_concurrency=p.max_concurrency,
                rpm=p.rpm,
                tpm=p.tpm,
                recover_every=r.aimd_recover_every,
                overload=Overload(r.overload_sample, r.overload_hold_s),
            )
        self._targets: dict[str, Target] = {}
        self._tiers: dict[str, list[Target]] = {}
        for tier in config.tiers:
            self._tiers[tier] = [self._target(ref, tier) for ref in tier_refs(config, tier, env)]
        self._policies: dict[tuple[str, str | None], Policy] = {}
        for tier in config.tiers:
            self._policy(tier, None)
        for role in r.roles:
            self._policy(self.tier_for_role(role), role)
        self.budget = budget or Budget(
            config.budget, tiers={t: tc.budget for t, tc in config.tiers.items() if tc.budget}
        )
        """Spent and held by every call through this router (the run's, when given)."""

    def _target(self, ref: str, tier: str) -> Target:
        t = self._targets.get(ref)
        if t is None:
            t = self._targets[ref] = self._make_target(ref)
        attrs: dict[str, AttributeValue] = {
            sc.OPERATION: sc.OP_CHAT,
            sc.PROVIDER: t.provider.name,
            sc.REQUEST_MODEL: t.model,
            sc.TIER: tier,
            sc.SIMULATED: t.simulated,
        }
        if t.provider.address:
            attrs[sc.SERVER_ADDRESS] = t.provider.address
        t.attrs[tier] = SharedAttributes(attrs)
        return t

    def _policy(self, tier: str, role: str | None) -> Policy:
        """The tier's policy for `role` (the tier's own when the role adds no constraints)."""
        if role is not None and role not in self._routing.roles:
            role = None
        policy = self._policies.get((tier, role))
        if policy is None:
            policy = make_policy(self.config, self._tiers[tier], tier, role)
            self._policies[(tier, role)] = policy
        return policy

    def _make_target(self, ref: str) -> Target:
        t = build_target(ref, self.config, self._providers, self.gates[split_ref(ref)[0]])
        if len(t.gates) > 1:
            self.gates[ref] = t.gates[-1]
        return t

    # -- public API ---------------------------------------------------------------------

    def tier_for_role(self, role: str) -> str:
        """The tier the config gives `role` (`[roles]`, else the default for it)."""
        return self.config.tier_for_role(role)

    def model(
        self, tier: str, *, need: Need | None = None, priority: int = 0, role: str | None = None
    ) -> TierModel:
        """A `Model` that sends every call through this router to `tier`: give one to
        each agent (`role` labels its calls; `need` and `priority` shape the routing)."""
        if tier not in self._tiers:
            raise ConfigError(f"unknown tier {tier!r}; configured: {', '.join(self._tiers)}")
        return TierModel(self, tier, need=need, priority=priority, role=role)

    def context_window(self, tier: str) -> int | None:
        """The smallest known window among the tier's candidates (any may answer)."""
        windows = [t.context_window for t in self._tiers.get(tier, ()) if t.context_window]
        return min(windows) if windows else None

    def candidates(self) -> list[Target]:
        """Every provider/model a tier may call, with its live score (`Target.score`)."""
        return list(self._targets.values())

    def seed_jitter(self, seed: int) -> None:
        """Make the jitter of retry waits repeat under `seed` (a simulation's): each call's
        draws then depend on the seed and its agent and step only."""
        self._retry.reseed(seed)

    def breaker_state(self, ref: str) -> str:
        """The circuit breaker's state for one `provider/model`: closed, open, half-open."""
        return self._targets[ref].breaker.state

    async def chat(
        self,
        request: ChatRequest,
        *,
        tier: str | None = None,
        need: Need | None = None,
        priority: int = 0,
        role: str | None = None,
        on_delta: DeltaSink | None = None,
    ) -> ChatResult:
        """One call to `tier`: failover, retries, hedging, limits, span and price included.

        `on_delta` (when given) hears the reply's pieces as they arrive, one attempt at a
        time, with a `Restart` when the call goes on with another attempt (`Relay`)."""
        tier = tier or (self.tier_for_role(role) if role else "speed")
        if tier not in self._tiers:
            raise ConfigError(f"unknown tier {tier!r}; configured: {', '.join(self._tiers)}")
        policy = self._policies.get((tier, role)) or self._policy(tier, role)
        est_in = estimate_input_tokens(request)
        est_out = request.max_tokens or self._routing.default_output_tokens
        targets, reason, scores = (
            (policy.targets, "order: first healthy as listed", "")
            if policy.static
            else policy.choose(
                lambda t: t.cost(est_in, est_out + t.score.reasoning),
                est_out,
                need.slack if need is not None else None,
            )
        )
        if need is not None:
            targets = apply_need(targets, need, est_in, est_out)
            if need.latency == "interactive":
                reason = f"interactive: lowest expected duration (was {reason})"
        est_usd = targets[0].cost(est_in, est_out)
        est_tokens = est_in + est_out
        call = Call(request, tier, role, priority, est_tokens)
        call.est_in = est_in
        call.reason, call.scores = reason, scores
        if on_delta is not None:
            call.relay = Relay(on_delta)
        with self.budget.reserve(tier=tier, usd=est_usd, tokens=est_tokens) as held:
            result = await self._failover(targets, call)
            held.settle(result)
        result.attempts = call.attempts
        if call.relay is not None:
            call.relay.close(result)
        return result

    async def aclose(self) -> None:
        """Close the providers this router opened (bounded; also on `async with` exit)."""
        if not self._owned:
            return
        with anyio.move_on_after(5, shield=True):
            for p in self._providers.values():
                await p.aclose()

    async def __aenter__(self) -> Router:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- candidate selection and failover -----------------------------------------------

    async def _failover(self, targets: list[Target], call: Call) -> ChatResult:
        """Rounds over the tier: when every candidate failed with a retryable error (not a
        429, whose waits have their own budget), the tier is tried again after a backoff,
        `tier_retries` times, so one unlucky streak of 5xx does not fail the call."""
        rounds = self._routing.tier_retries + 1
        for n in range(1, rounds + 1):
            try:
                return await self._round(targets, call)
            except ProviderError as exc:
                if n == rounds or isinstance(exc, RateLimited) or not self._retry.retryable(exc):
                    raise
                if exc.status in _NO_FAILOVER:
                    raise
                await self._retry.backoff(self._retry.delay(n, exc, call))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _round(self, targets: list[Target], call: Call) -> ChatResult:
        """Each candidate in order, skipping open circuits, unless every circuit is open:
        the breaker orders candidates and never refuses the last one (failing the call for
        sure would be worse than trying a provider that fails some calls)."""
        last: ProviderError | None = None
        tried = False
        for i, t in enumerate(targets):
            if not t.breaker.allow():  # takes the half-open probe when one is due
                continue
            tried = True
            later = [b for b in targets[i + 1 :] if b.breaker.available()]
            call.last_resort = not later
            # the last resort hedges against itself: a call that hangs before its first
            # token is raced by a second one to the same candidate, not waited out (but
            # not a server on this machine: its slowness is its own queue, which a second
            # request only deepens)
            backup = (later[0] if later else t.self_hedge) if self._routing.hedge else None
            try:
                return await self._bounded(t, backup, call)
            except ProviderError as exc:
                if exc.status in _NO_FAILOVER:
                    raise
                last = exc
        if not tried:
            call.last_resort = True
            t = targets[0]
            backup = t.self_hedge if self._routing.hedge else None
            return await self._bounded(t, backup, call)
        assert last is not None
        raise last

    async def _bounded(self, t: Target, backup: Target | None, call: Call) -> ChatResult:
        """`t`'s tries (retries, hedges and their waits) within its call deadline (see
        `Clock`). Running out fails over but ends the tier's rounds: the same candidates
        would take as long again."""
        if t.deadline is None:
            return await self._retry.run(self._hedged, t, backup, call)
        total_s, how, first_s = t.deadline(t.model, call.request, call.est_in)
        attempts = call.attempts
        with anyio.CancelScope() as scope:
            clock = call.deadline = Clock(scope, total_s, first_s)
            try:
                return await self._retry.run(self._hedged, t, backup, call)
            finally:
                call.deadline = None
        t.breaker.failure()
        tries = call.attempts - attempts
        took = anyio.current_time() - clock.started
        if scope.deadline < clock.started + total_s:  # no token came
            how = f"no first token in {_FIRST_TRIES_TEXT}: {first_s:.0f} s each; {how}"
        raise ProviderError(
            f"gave up: the call's deadline ran out ({took:.0f} s, {tries} "
            f"{'try' if tries == 1 else 'tries'}; {how})",
            provider=t.provider.name,
            model=t.model,
            kind="timeout",
            retryable=False,
        )

    # -- hedging ------------------------------------------------------------------------

    def _hedged(self, t: Target, backup: Target | None, call: Call) -> Awaitable[ChatResult]:
        """One try on `t`, raced by `backup` when it is late (a plain function giving the
        awaitable: one coroutine less held by every call in flight)."""
        if backup is None:
            return self._attempt(t, call, None)
        r = self._routing
        delay = t.hedge_delay(r.hedge_after_s, r.hedge_min_s)
        if delay is None:
            return self._attempt(t, call, None)
        delays = Delays(delay, t.stall_delay(r.stall_hedge_min_s), r.hedge_most)
        return race(self._attempt, t, backup, call, delays)

    # -- one attempt --------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    async def _attempt(
        self, t: Target, call: Call, on_first: FirstTokenCallback | None
    ) -> ChatResult:
        call.attempts += 1
        n, relay = call.attempts, call.relay
        async with admit(t.gates, call.est_tokens, call.priority) as permit:
            if call.deadline is not None:
                call.deadline.admitted()
            span = self._start_span(t, call)
            started = clock()
            first = _FirstToken(span, call.deadline, on_first)

            request = call.request
            if t.tool_calls == "text" and request.tools:
                request = call.as_text()
            # the span is current while the provider runs (its traceparent goes out); what
            # `trace.use_span` does, without a generator context manager on every call
            token = context.attach(trace.set_span_in_context(span))
            try:
                if relay is None:
                    result = await t.provider.chat(t.model, request, on_first_token=first)
                else:
                    result = await t.provider.chat(
                        t.model, request, on_first_token=first, on_delta=relay.attempt(n)
                    )
            except BaseException as exc:
                context.detach(token)
                if relay is not None:
                    relay.failed(n)
                if not first.came and isinstance(exc, anyio.get_cancelled_exc_class()):
                    t.score.waited(clock() - started)
                elif first.came and call.deadline is not None:
                    call.deadline.writer_failed()
                call.scattered_429 = self._failed(t, span, exc, permit)
                raise
            context.detach(token)
            usage = result.usage
            permit.settle(usage.input_tokens + usage.output_tokens, result.rate_limit)
        read_calls(result, call.request, from_text=t.tool_calls != "native")
        self._succeeded(t, span, result)
        if relay is not None:
            relay.succeeded(n, result)
        return result

    def _start_span(self, t: Target, call: Call) -> trace.Span:
        """The attempt's `chat` span, every attribute known at its start given at once (the
        SDK takes a lock and checks the value on each `set_attribute`)."""
        request = call.request
        attrs: dict[str, AttributeValue] = {sc.ATTEMPTS: call.attempts}
        attrs[sc.ROUTE_REASON] = call.reason
        if call.scores:
            attrs[sc.ROUTE_SCORES] = call.scores
        attrs[sc.REQUEST_STREAM] = request.stream
        if call.role:
            attrs[sc.ROLE] = call.role
        if self._capture:
            attrs[sc.INPUT_MESSAGES] = json.dumps(
                [m.model_dump(exclude_defaults=True) for m in request.messages]
            )
        return start_span(t.span_name, attrs, SpanKind.CLIENT, t.attrs[call.tier])

    def _failed(self, t: Target, span: trace.Span, exc: BaseException, permit: Permit) -> bool:
        """Record why the attempt failed, on its span, breaker and (for a 429) gates;
        returns whether it was a 429 the gates took as scattered, not as overload."""
        scattered = False
        if isinstance(exc, ProviderError):
            span.set_attribute(sc.ERROR_TYPE, str(exc.status) if exc.status else exc.kind)
            span.set_status(Status(StatusCode.ERROR, self._scrub(str(exc))))
            t.score.failure(isinstance(exc, RateLimited))
            if isinstance(exc, RateLimited):
                scattered = permit.rate_limited(exc.retry_after)
                t.breaker.abandon()
            elif exc.status in _NO_FAILOVER:
                t.breaker.success()  # it answered; the request was at fault
            else:
                t.breaker.failure()
        elif isinstance(exc, anyio.get_cancelled_exc_class()) and _lost():
            span.set_attribute(sc.HEDGE_OUTCOME, sc.HEDGE_LOST)  # not an error: status unset
            t.breaker.abandon()
        elif isinstance(exc, anyio.get_cancelled_exc_class()):
            span.set_attribute(sc.ERROR_TYPE, "cancelled")
            span.set_status(Status(StatusCode.ERROR, "cancelled"))
            t.breaker.abandon()
        else:
            span.set_attribute(sc.ERROR_TYPE, type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR, self._scrub(str(exc))))
            t.breaker.abandon()
        span.end()
        return scattered

    def _succeeded(self, t: Target, span: trace.Span, result: ChatResult) -> None:
        t.breaker.success()
        usage = result.usage
        result.cost_usd = cost = t.cost(
            usage.input_tokens, usage.output_tokens, usage.cached_input_tokens
        )
        if not result.provider:
            result.provider = t.provider.name
        if t.simulated:
            result.simulated = True
        ttft = result.timing.ttft_s
        tps = result.tokens_per_s
        t.observe_ttft(ttft)
        t.score.success(ttft, tps)
        attrs: dict[str, AttributeValue] = {
            sc.RESPONSE_MODEL: result.model or t.model,
            sc.FINISH_REASONS: (result.finish_reason,),
            sc.TIME_TO_FIRST_CHUNK: ttft,
            sc.INPUT_TOKENS: usage.input_tokens,
            sc.OUTPUT_TOKENS: usage.output_tokens,
            sc.REASONING_TOKENS: usage.reasoning_tokens,
            sc.CACHED_INPUT_TOKENS: usage.cached_input_tokens,
            sc.COST_USD: cost,
        }
        if tps > 0:  # only a stream timed over its tokens has a rate
            attrs[sc.DECODE_TPS] = tps
        if result.tool_call_format:
            attrs[sc.TOOL_CALL_FORMAT] = result.tool_call_format
        if self._capture:
            attrs[sc.OUTPUT_MESSAGES] = json.dumps(
                [result.message.model_dump(exclude_defaults=True)]
            )
        span.set_attributes(attrs)  # one lock, one pass
        span.end()
