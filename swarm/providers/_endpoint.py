"""What every HTTP chat endpoint shares: setup, the `chat` skeleton, the reply being built.

`Endpoint` owns the common parts of an adapter: the pooled client (`Sender`), the URL,
headers and API key, the connect and stall timeouts, the W3C `traceparent` (sent by the
`Sender`), error mapping, timing, and assembling the `ChatResult`. An adapter subclasses
it and says only what differs:

- `path` and `fixed_headers` / `auth_header`: where requests go and how they authenticate;
- `payload`: the request body in the API's shape;
- `read_stream` / `read_whole`: folding a streamed or a whole reply into a `Reply`;
- `usage` and `finish_reason` (and `rate_limit` when the API has its own headers).

One attempt per `chat`: the router retries. Results are built with `model_construct` (no
validation on the hot path), so `chat` checks what it got instead: any reply whose shape
breaks the folding (wrong types, missing fields, null choices, non-JSON chunks) or yields
a result of the wrong types becomes a retryable `malformed` `ProviderError`, which fails
over like any other, never a TypeError out of the adapter. A stream that ends with neither
a finish reason nor its end marker is cut off, not complete; a reply over the size
bounds (`swarm.providers._bounds`) is a `MalformedReply` that is not retried. Two clocks
bound a call beyond the stall (read) timeout, which any byte resets: `token_timeout_s`
between tokens (keep-alive bytes and empty deltas do not count) and the whole call's
deadline (`total_timeout_s`, else from the model's speed: `swarm.providers._call_deadline`).
A stream that has run on past the length that deadline allowed for ends there, as a
reply cut short (`finish_reason: "deadline"`), not as an error.
A reply that comes whole (even to a streamed request) has its first token at its end, and
only a stream whose tokens came over two network reads or more is `timed` (has a rate).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx
import orjson

from swarm._tokens import estimate_input_tokens
from swarm.config._secrets import scrub
from swarm.errors import MalformedReply, ProviderError, ReplyShapeError, ReplyTooLarge
from swarm.messages import ChatRequest, ChatResult, Message, RateLimitInfo, Timing, ToolCall, Usage
from swarm.model import FirstTokenCallback, PieceSink
from swarm.providers._bounds import aread_bounded
from swarm.providers._call_deadline import DEADLINE_CUT, CallDeadline
from swarm.providers._exchange import SIMULATED_HEADER, Peer, Sender, malformed, rate_limit_info
from swarm.providers._progress import tell_progress

__all__ = [
    "SHAPE_ERRORS",
    "Endpoint",
    "FirstTokenDeadline",
    "Reply",
    "loads",
    "on_this_machine",
]

SHAPE_ERRORS = (
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
    ValueError,
    UnicodeError,
    OverflowError,
    RecursionError,
)
"""What folding a reply of an unexpected shape raises; `chat` turns them into a
`ProviderError` (kind `malformed`)."""


loads: Callable[[bytes | str], Any] = orjson.loads
"""Parse exactly one JSON value (orjson: 2-3x the stdlib on stream chunks); raises
ValueError (orjson.JSONDecodeError) on anything else."""


class Reply:
    """One reply as it arrives: text, reasoning, tool-call parts, and the fields that come
    once. Adapters subclass it with the folding of their API's events."""

    __slots__ = (
        "_seen",
        "_told",
        "calls",
        "done",
        "extras",
        "finish",
        "first_at",
        "model",
        "on_delta",
        "on_first",
        "reasoning",
        "text",
        "token_reads",
        "usage",
        "watch",
    )

    def __init__(self, on_first: FirstTokenCallback | None) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, argument parts...]
        self.finish = ""
        """The API's own stop reason; `Endpoint.finish_reason` maps it to ours."""
        self.model = ""
        self.usage: dict[str, Any] = {}
        self.extras: dict[str, Any] = {}
        self.first_at = 0.0
        self.on_first = on_first
        self.done = False
        """The stream's end marker came (`[DONE]`, `message_stop`)."""
        self.watch: _Watch | None = None
        self._seen = 0
        self.token_reads = 0
        """Network reads that brought tokens: two or more make a timed stream."""
        self.on_delta: PieceSink | None = None
        """Told the new text and reasoning after each network read that brought some."""
        self._told = (0, 0)  # text and reasoning pieces already told to `on_delta`

    def progress(self) -> None:
        """After each network read: if tokens came, the inter-token clock starts again."""
        seen = len(self.text) + len(self.reasoning) + sum(map(len, self.calls.values()))
        if seen != self._seen:
            self._seen = seen
            self.token_reads += 1
            if self.watch is not None:
                self.watch.tick()
            tell_progress()
            if self.on_delta is not None:
                self._tell(self.on_delta)

    def _tell(self, listener: PieceSink) -> None:
        told_text, told_reasoning = self._told
        if len(self.reasoning) > told_reasoning:
            listener("thinking", "".join(self.reasoning[told_reasoning:]))
        if len(self.text) > told_text:
            listener("text", "".join(self.text[told_text:]))
        self._told = (len(self.text), len(self.reasoning))

    def complete(self) -> bool:
        """Did the stream say it was over (a finish reason or its end marker)?"""
        return bool(self.finish) or self.done

    def first(self) -> None:
        """Note the first token (text, reasoning or a tool call); later calls do nothing."""
        if not self.first_at:
            self.first_at = time.perf_counter()
            if self.on_first is not None:
                self.on_first()

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall.model_construct(
                id=p[0] or f"call_{i}", name=p[1], arguments="".join(p[2:]) or "{}"
            )
            for i, p in sorted(self.calls.items())
        ]


class _Watch:
    """The deadlines of one call: `total_s` from the start, `first_s` for the first token,
    then `token_s` after each token. Its error names the setting that ran out."""

    __slots__ = ("end", "first", "scope", "started", "ticked", "token_s", "total")

    def __init__(
        self, token_s: float, total: tuple[float, object], first: tuple[float, object]
    ) -> None:
        now = self.started = anyio.current_time()
        self.token_s = token_s
        self.first = first
        self.total = total
        self.end = now + total[0]
        self.ticked = False
        self.scope = anyio.CancelScope(deadline=min(self.end, now + first[0]))

    def tick(self) -> None:
        self.ticked = True
        self.scope.deadline = min(self.end, anyio.current_time() + self.token_s)

    def overran(self) -> bool:
        """Did the whole call's deadline end the call (not the first-token or stall one)?"""
        return anyio.current_time() >= self.end - 1e-3

    def error(self, provider: str, model: str) -> ProviderError:
        if self.overran():
            took = anyio.current_time() - self.started
            what, kind = f"the call's deadline ({took:.0f} s; {self.total[1]})", "timeout"
        elif not self.ticked:
            what, kind = (
                f"no first token after {self.first[0]:.0f} s ({self.first[1]})",
                "stall",
            )
        else:
            what, kind = f"{self.token_s:g} s without a token (stall_timeout_s)", "stall"
        return ProviderError(
            f"gave up: {what}", provider=provider, model=model, kind=kind, retryable=True
        )


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_LOCAL_KEEPALIVE_S = 2.0

_FIRST_TOKEN_MARGIN = 4.0
"""The first-token deadline is this many times the expected wait: a local server that
serves one request at a time makes a prompt wait for the one before it."""
_UNKNOWN_PREFILL_TPS = 25.0
_PROMPT_BATCH = 2048
_UNKNOWN_TTFT_S = 2.0


class FirstTokenDeadline:
    """How long a call may wait for its first token: a fixed setting, or its expected wait
    from the model's speed (time to first token plus the prompt at the prefill rate, the
    slower of the known and the measured) times a margin, never under the stall timeout.
    With no speed known at all, the stall timeout."""

    __slots__ = ("_fixed", "_floor", "_speeds")

    def __init__(self, fixed: float | None, floor: float) -> None:
        self._fixed, self._floor = fixed, floor
        self._speeds: dict[str, list[float]] = {}  # model -> [ttft_s, prefill_tps, measured]

    def expect(self, model: str, ttft_s: float | None, prefill_tps: float | None) -> None:
        """What `model` is known to do (None: a server the catalog does not know)."""
        self._speeds[model] = [
            _UNKNOWN_TTFT_S if ttft_s is None else ttft_s,
            _UNKNOWN_PREFILL_TPS if prefill_tps is None else prefill_tps,
            0.0,
        ]

    def gap(self, model: str, stall_s: float) -> float:
        """The longest silence allowed between two tokens: `stall_s`, or, for a slow
        server, the time it takes to read another request's prompt batch (llama.cpp reads
        up to 2,048 prompt tokens in one step, and every stream it serves waits for it)."""
        speed = self._speeds.get(model)
        if speed is None:
            return stall_s
        return max(stall_s, _FIRST_TOKEN_MARGIN * _PROMPT_BATCH / _prefill_rate(speed))

    def knows(self, model: str) -> bool:
        """Does the deadline for `model` follow its speed (and so the prompt's size)?"""
        return self._fixed is None and model in self._speeds

    def observe(self, model: str, prompt_tokens: int, ttft_s: float) -> None:
        """A first token came after `ttft_s` for a prompt of `prompt_tokens`: the measured
        prefill rate (queueing included) decays toward it."""
        speed = self._speeds.get(model)
        if speed is None or prompt_tokens < 256 or ttft_s <= speed[0]:
            return
        rate = prompt_tokens / (ttft_s - speed[0])
        speed[2] = rate if not speed[2] else 0.7 * speed[2] + 0.3 * rate

    def seconds(self, model: str, prompt_tokens: int) -> tuple[float, object]:
        """The deadline for a prompt, and how it was set (its `str` is the error
        message's words)."""
        if self._fixed is not None:
            return self._fixed, "first_token_timeout_s"
        speed = self._speeds.get(model)
        if speed is None:
            return self._floor, "stall_timeout_s"
        rate = _prefill_rate(speed)
        expected = speed[0] + prompt_tokens / rate
        deadline = max(self._floor, _FIRST_TOKEN_MARGIN * expected)
        return deadline, _FirstWhy(expected, prompt_tokens, rate)


class _FirstWhy:
    """How a first-token deadline from the model's speed was set, as the error message
    says it (written only when one is shown, off the path of every call)."""

    __slots__ = ("expected", "prompt_tokens", "rate")

    def __init__(self, expected: float, prompt_tokens: int, rate: float) -> None:
        self.expected, self.prompt_tokens, self.rate = expected, prompt_tokens, rate

    def __str__(self) -> str:
        return (
            f"first_token_timeout_s unset: {_FIRST_TOKEN_MARGIN:g} x ~{self.expected:.0f} s "
            f"expected for {self.prompt_tokens:,} prompt tokens at {self.rate:.0f} tok/s prefill"
        )


def _prefill_rate(speed: list[float]) -> float:
    """The slower of the known and the measured prefill rate (measured: 0 until one is)."""
    return min(speed[1], speed[2]) if speed[2] else speed[1]


def on_this_machine(address: str) -> bool:
    """Is `address` (`host:port`) a loopback server, on this machine?"""
    return (urlsplit(f"//{address}").hostname or "") in _LOOPBACK


def _check(result: ChatResult) -> ChatResult:
    """Raise TypeError unless the fields built without validation have their types."""
    u = result.usage
    counts = (u.input_tokens, u.output_tokens, u.reasoning_tokens, u.cached_input_tokens)
    for n in counts:  # a loop, not all(<generator>): this runs on every call
        if type(n) is not int or n < 0:
            raise TypeError(f"usage counts must be non-negative integers: {counts!r}"[:200])
    if not isinstance(result.finish_reason, str) or not isinstance(result.model, str):
        raise TypeError("finish_reason and model must be strings")
    for c in result.message.tool_calls:
        if not (isinstance(c.id, str) and isinstance(c.name, str) and c.name):
            raise TypeError("a tool call needs a string id and a name")
        if not isinstance(c.arguments, str):
            raise TypeError("tool call arguments must be a string")
    return result


class _Limits:
    """One call's clocks (`Endpoint._limits`): its first-token deadline, its whole
    deadline, each with how it was set, and the longest silence between tokens."""

    __slots__ = ("first", "known", "model", "prompt_tokens", "request", "token_s", "total")

    def __init__(self, request: ChatRequest, model: str, known: bool, prompt_tokens: int) -> None:
        self.request, self.model = request, model
        self.known = known
        """Does the first-token deadline follow the model's speed (and the prompt's size)?"""
        self.prompt_tokens = prompt_tokens
        self.first: tuple[float, object] = (0.0, "")
        self.total: tuple[float, object] = (0.0, "")
        self.token_s = 0.0


R = TypeVar("R", bound=Reply)


class Endpoint(ABC, Generic[R]):
    """An HTTP chat endpoint; one pooled client per provider. Subclasses set `kind`."""

    kind: str
    """The API this endpoint speaks (`openai`, `anthropic`); set by each subclass."""
    default_base_url: ClassVar[str | None] = None
    """Where requests go when no `base_url` is given (None: it must be given)."""

    def __init__(
        self,
        name: str,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        auth_style: str | None = None,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        connect_timeout_s: float = 10.0,
        stall_timeout_s: float = 30.0,
        token_timeout_s: float | None = None,
        total_timeout_s: float | None = None,
        first_token_timeout_s: float | None = None,
    ) -> None:
        """`auth_style` picks the key's header among the adapter's (see `auth_header`);
        `client` replaces the pooled client this provider would make (and close);
        `token_timeout_s` (default: the stall timeout) bounds the gap between tokens,
        `first_token_timeout_s` the wait for the first (default: from the model's speed
        when `first_token` knows it, else the stall timeout) and `total_timeout_s` the
        whole call (default: from the model's speed, see `deadline`)."""
        base_url = base_url or self.default_base_url
        if not base_url:
            raise TypeError(f"{type(self).__name__} needs a base_url")
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.address = urlsplit(self.base_url).netloc
        # parsed once: httpx re-parses a str URL (and params) on every request
        self._url = httpx.URL(self.base_url + self.path(), params=dict(query or {}))
        base = {"content-type": "application/json", **self.fixed_headers(), **(headers or {})}
        if api_key:
            base.update(self.auth_header(api_key, auth_style))
        self._headers = base
        self._peer = Peer(name, api_key or "")
        # no read timeout: a server reading a long prompt sends nothing for minutes, and
        # the call's own clocks (first token, between tokens, total) bound every silence
        timeout = httpx.Timeout(
            connect=connect_timeout_s, read=None, write=stall_timeout_s, pool=None
        )
        # a local server (llama.cpp: 5 s) drops idle connections sooner than a cloud;
        # reconnecting over loopback costs a fraction of a millisecond
        keepalive = _LOCAL_KEEPALIVE_S if on_this_machine(self.address) else 60.0
        self._sender = Sender(client, timeout, self._peer, keepalive_s=keepalive)
        self._token_s = stall_timeout_s if token_timeout_s is None else token_timeout_s
        if total_timeout_s is not None and not math.isfinite(total_timeout_s):
            total_timeout_s = 1e9
        self.first_token = FirstTokenDeadline(first_token_timeout_s, self._token_s)
        """The first-token deadline per model; the router tells it each model's speed."""
        self.deadline = CallDeadline(total_timeout_s)
        """The whole call's deadline per model; the router tells it each model's speed."""
        self._last_limits: _Limits | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r})"

    # -- what an adapter says ------------------------------------------------------------

    @abstractmethod
    def path(self) -> str:
        """The chat path appended to `base_url`."""
        ...

    def fixed_headers(self) -> dict[str, str]:
        """Headers every request carries (besides content-type and auth)."""
        return {}

    @abstractmethod
    def auth_header(self, api_key: str, style: str | None) -> dict[str, str]:
        """The header carrying the key; `style` is the configured auth style (None: the
        API's usual one)."""
        ...

    @abstractmethod
    def payload(self, model: str, request: ChatRequest) -> bytes:
        """The request body."""
        ...

    @abstractmethod
    def new_reply(self, on_first: FirstTokenCallback | None) -> R: ...

    @abstractmethod
    async def read_stream(self, response: httpx.Response, reply: R, model: str) -> None:
        """Fold an event stream into `reply`; raise a `ProviderError` on a bad event."""
        ...

    @abstractmethod
    def read_whole(self, response: httpx.Response, reply: R, model: str) -> None:
        """Fold a whole (read) JSON reply into `reply`; raise a `ProviderError` if bad."""
        ...

    @abstractmethod
    def usage(self, request: ChatRequest, reply: R, text: str, calls: list[ToolCall]) -> Usage: ...

    def finish_reason(self, reply: R, calls: list[ToolCall]) -> str:
        return reply.finish or ("tool_calls" if calls else "stop")

    def rate_limit(self, headers: httpx.Headers) -> RateLimitInfo | None:
        return rate_limit_info(headers)

    # -- the skeleton ----------------------------------------------------------------------

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
        on_delta: PieceSink | None = None,
    ) -> ChatResult:
        body = self.payload(model, request)
        reply = self.new_reply(on_first_token)
        reply.on_delta = on_delta
        limits = self._limits(model, request)
        self._last_limits = None  # a later try works them out again (rates are measured)
        known, prompt_tokens = limits.known, limits.prompt_tokens
        watch = reply.watch = _Watch(limits.token_s, limits.total, limits.first)
        secrets = (self._peer.secret,)
        started = time.perf_counter()
        answered: httpx.Response | None = None
        with watch.scope:
            async with self._sender.exchange(
                self._url, dict(self._headers), body, stream=request.stream, model=model
            ) as response:
                answered = response
                try:
                    if response.headers.get("content-type", "").startswith("text/event-stream"):
                        await self.read_stream(response, reply, model)
                        if not reply.complete():
                            raise self.malformed(
                                "stream ended without a finish reason or end marker",
                                response,
                                model,
                            )
                    else:
                        await aread_bounded(response)
                        self.read_whole(response, reply, model)
                        reply.first_at = 0.0  # a whole reply's first token came with its end
                    ended = time.perf_counter()
                    if known and reply.first_at:
                        self.first_token.observe(model, prompt_tokens, reply.first_at - started)
                    result = _check(self._result(model, request, reply, response, (started, ended)))
                    if reply.first_at:
                        self.deadline.observe(
                            model, result.usage.output_tokens, ended - reply.first_at
                        )
                    return result
                except ReplyTooLarge as exc:
                    raise self.malformed(f"{exc}", response, model, retryable=False) from None
                except SHAPE_ERRORS as exc:
                    named = "" if isinstance(exc, ReplyShapeError) else f"{type(exc).__name__}: "
                    what = scrub(f"malformed reply ({named}{exc})"[:300], secrets)
                    raise self.malformed(what, response, model) from None
        ran_on = watch.overran() and reply.first_at and request.max_tokens is None
        if answered is not None and ran_on:
            cut = self._cut(model, request, reply, answered, started)
            if cut is not None:
                return cut
        raise watch.error(self.name, model)

    def _cut(
        self, model: str, request: ChatRequest, reply: R, response: httpx.Response, started: float
    ) -> ChatResult | None:
        """The reply, uncapped, as it stood when the call's deadline came (`DEADLINE_CUT`),
        if it ran on past the length the deadline allowed for (None: the server was slow;
        a capped reply that is not done by then is a slow server's too)."""
        reply.finish = DEADLINE_CUT
        span = (started, time.perf_counter())
        try:
            result = _check(self._result(model, request, reply, response, span))
        except SHAPE_ERRORS:
            return None
        if result.usage.output_tokens < self.deadline.tokens(model, None):
            return None
        return result

    def malformed(
        self, what: str, response: httpx.Response, model: str, *, retryable: bool = True
    ) -> MalformedReply:
        """A reply that cannot be parsed (retryable: the next attempt may be fine, unless it
        was too large)."""
        return malformed(what, self._peer, model, response, retryable=retryable)

    def call_deadline(
        self, model: str, request: ChatRequest, prompt_tokens: int | None = None
    ) -> tuple[float, object, float]:
        """How long a call may take in all, how that was set, and its first-token deadline
        (the router holds a candidate's retries to them too). `prompt_tokens`: the
        prompt's estimate, when the caller has made it (`estimate_input_tokens`)."""
        limits = self._limits(model, request, prompt_tokens)
        return limits.total[0], limits.total[1], limits.first[0]

    def _limits(
        self, model: str, request: ChatRequest, prompt_tokens: int | None = None
    ) -> _Limits:
        """The clocks of a call of `request` to `model`, worked out once for the router's
        first try: the router asks for them first (`call_deadline`), and that try's `chat`
        finds them here, unless another call came in between (then they are worked out
        again, by the same rules, as they are for every later try)."""
        last = self._last_limits
        if last is not None and last.request is request and last.model == model:
            return last
        # the prompt's size matters only when the deadline follows the model's speed
        known = self.first_token.knows(model)
        if not known:
            prompt_tokens = 0
        elif prompt_tokens is None:
            prompt_tokens = estimate_input_tokens(request)
        first = self.first_token.seconds(model, prompt_tokens)
        total = self.deadline.seconds(model, request.max_tokens, first[0])
        if request.stream:
            token_s = self.first_token.gap(model, self._token_s) if known else self._token_s
        else:  # a whole reply sends nothing until it is done: only the total clock applies
            token_s, first = total[0], total
        limits = self._last_limits = _Limits(request, model, known, prompt_tokens)
        limits.first, limits.total, limits.token_s = first, total, token_s
        return limits

    def _result(
        self,
        model: str,
        request: ChatRequest,
        reply: R,
        response: httpx.Response,
        span: tuple[float, float],
    ) -> ChatResult:
        started, ended = span
        text = "".join(reply.text)
        calls = reply.tool_calls() if reply.calls else []
        if reply.reasoning:
            reply.extras["reasoning"] = "".join(reply.reasoning)
        # validated, not `model_construct`: pydantic-core builds these in half the time of
        # model_construct's Python loop; what came from the server (`usage` and the tool
        # calls) stays unvalidated here, `_check` reads it
        return ChatResult(
            message=Message(role="assistant", content=text or None, tool_calls=calls),
            finish_reason=self.finish_reason(reply, calls),
            usage=self.usage(request, reply, text, calls),
            timing=Timing(
                ttft_s=(reply.first_at or ended) - started,
                duration_s=ended - started,
                timed=reply.token_reads > 1,
            ),
            provider=self.name,
            model=reply.model or model,
            cost_usd=0.0,
            attempts=1,
            simulated=SIMULATED_HEADER in response.headers,
            rate_limit=self.rate_limit(response.headers),
            extras=reply.extras,
        )

    async def aclose(self) -> None:
        """Close the HTTP client, if this provider made it."""
        await self._sender.aclose()
