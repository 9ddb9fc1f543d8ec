"""The two seams every model call passes through.

`Model` is what agents talk to: one request in, its reply streamed out. `stream(request)`
yields the reply's pieces as they arrive (`Delta`: text or thinking, each tagged with the
attempt it came from), a `Restart` when the call starts over (a retry after a dropped
stream, or a hedge that won the race: forget the pieces before it), and `Done` with the
whole `ChatResult`, always last. `chat(request)` is the same call with only its result
(`collect(model.stream(request))`); a model may answer it faster without building pieces
nobody reads (the router does). The router's tier models, the simulator and the test
doubles in `swarm.testing` implement both. To write a model, subclass `Model` and write
`stream` (`chat` comes with it), or subclass `ChatModel` and write `chat` (its text then
arrives in one piece).

`Provider` is one HTTP endpoint speaking one protocol (OpenAI-compatible, Anthropic, the
in-process simulator). It makes exactly one attempt per `chat`, telling `on_delta` (when
given) each piece as it reads it; retries, failover, hedging, limits, spans and prices
belong to the router, which numbers the attempts and sends the caller one attempt's
pieces at a time.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import anyio

from swarm.errors import alone
from swarm.messages import ChatRequest, ChatResult

__all__ = [
    "ChatModel",
    "Delta",
    "DeltaSink",
    "Done",
    "FirstTokenCallback",
    "Model",
    "PieceSink",
    "Provider",
    "Restart",
    "Streamed",
    "closing",
    "collect",
    "context_window",
    "relay",
    "stream_of",
    "streamed",
]

FirstTokenCallback = Callable[[], None]
"""Called once, synchronously, when the first content or tool-call chunk arrives."""


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of a reply as it streamed in."""

    kind: Literal["text", "thinking"]
    """The reply's text, or the model's reasoning."""
    text: str
    attempt: int = 1
    """Which attempt of the call it came from (1, 2, ... in the order they started)."""


@dataclass(frozen=True, slots=True)
class Restart:
    """The call starts over with another attempt: the pieces before this one are void."""

    attempt: int
    """The attempt whose pieces follow."""


@dataclass(frozen=True, slots=True)
class Done:
    """The call's whole result; the last item of every stream."""

    result: ChatResult


Streamed = Delta | Restart | Done
"""What `Model.stream` yields."""

PieceSink = Callable[[Literal["text", "thinking"], str], None]
"""Told each piece of one provider attempt as it is read: its kind and its text."""

DeltaSink = Callable[[Delta | Restart], None]
"""Told each piece of a call, and each restart, as they happen (the router's callers)."""


@runtime_checkable
class Model(Protocol):
    """Anything an agent can chat with."""

    name: str
    """A label for traces and errors (`tier:speed`, `scripted`)."""

    def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        """Answer one request piece by piece: `Delta`s (a `Restart` between attempts),
        then `Done`. Iterate it to the end, or close it (`swarm.model.closing`)."""
        ...

    async def chat(self, request: ChatRequest) -> ChatResult:
        """Answer one request: what `stream` ends with."""
        return await collect(self.stream(request))


class ChatModel:
    """A model that answers whole: subclass it and write `chat`; `stream` then yields the
    reply's text in one piece."""

    name: str = "chat"

    async def chat(self, request: ChatRequest) -> ChatResult:
        """Answer one request (a subclass writes it)."""
        raise NotImplementedError

    def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        """`chat`'s answer: its text in one piece, then `Done`."""
        return _whole(self, request)


@asynccontextmanager
async def closing(items: AsyncIterator[Streamed]) -> AsyncIterator[AsyncIterator[Streamed]]:
    """`items`, closed when the block ends (a stream left early stops its call)."""
    try:
        yield items
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()


async def collect(items: AsyncIterator[Streamed]) -> ChatResult:
    """The result a stream ends with (`chat` built on `stream`)."""
    async with closing(items):
        async for item in items:
            if isinstance(item, Done):
                return item.result
    raise RuntimeError("a model's stream ended without its result")


async def stream_of(model: object, request: ChatRequest) -> AsyncIterator[Streamed]:
    """`model`'s stream of `request`; for a model with only `chat`, its text in one piece."""
    own = getattr(model, "stream", None)
    if own is not None:
        async with closing(own(request)) as items:
            async for item in items:
                yield item
        return
    async for item in _whole(model, request):
        yield item


async def _whole(model: object, request: ChatRequest) -> AsyncIterator[Streamed]:
    result: ChatResult = await model.chat(request)  # type: ignore[attr-defined]
    if result.text:
        yield Delta("text", result.text)
    yield Done(result)


async def relay(
    items: AsyncIterator[Streamed], finish: Callable[[ChatResult], ChatResult]
) -> AsyncIterator[Streamed]:
    """`items` passed on, their result through `finish` (a wrapper's `stream`)."""
    async with closing(items):
        async for item in items:
            yield Done(finish(item.result)) if isinstance(item, Done) else item


async def streamed(call: Callable[[DeltaSink], Awaitable[ChatResult]]) -> AsyncIterator[Streamed]:
    """Run `call`, which tells its sink each piece as it comes, and yield those pieces,
    then its result. The call runs in a task group of this stream's own; closing the
    stream early cancels it, and its error leaves as itself, not in an ExceptionGroup."""
    send, receive = anyio.create_memory_object_stream[Delta | Restart](math.inf)
    results: list[ChatResult] = []

    async def run() -> None:
        with send:
            results.append(await call(send.send_nowait))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            try:
                with receive:
                    async for item in receive:
                        yield item
            finally:
                tg.cancel_scope.cancel()  # a consumer that stopped early stops the call
    except BaseExceptionGroup as group:
        one = alone(group)
        if one is None:
            raise
        raise one from one.__cause__
    if results:
        yield Done(results[0])


def context_window(model: object) -> int | None:
    """The window (tokens) a model declares, if any.

    Optional on a `Model`: router tiers set `context_window` from the catalog and config,
    and wrappers (journal replay, timing, budgets) pass their inner model's on."""
    window = getattr(model, "context_window", None)
    return window if isinstance(window, int) and window > 0 else None


@runtime_checkable
class Provider(Protocol):
    """One endpoint; one attempt per call; raises `ProviderError` on failure."""

    name: str
    """Config name (`cerebras`, `local`, `sim`)."""
    kind: str
    """Protocol: `openai`, `anthropic` or `sim`."""
    address: str
    """Host (and port) for `server.address` on spans; empty for in-process."""

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
        on_delta: PieceSink | None = None,
    ) -> ChatResult:
        """One attempt at `request` against `model`; `ProviderError` if it fails.
        `on_delta` (when given) is told each piece of the reply as it is read."""
        ...

    async def aclose(self) -> None:
        """Close the provider's connections."""
        ...
