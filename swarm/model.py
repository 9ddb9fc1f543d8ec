"""The two seams every model call passes through.

`Model` is what agents talk to: one request in, one result out. The router's tier models,
the simulator and the test doubles in `swarm.testing` all implement it.

`Provider` is one HTTP endpoint speaking one protocol (OpenAI-compatible, Anthropic, the
in-process simulator). It makes exactly one attempt per `chat`; retries, failover, hedging,
limits, spans and prices belong to the router.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Literal, Protocol, runtime_checkable

from swarm.messages import ChatRequest, ChatResult

__all__ = [
    "FirstTokenCallback",
    "Model",
    "Provider",
    "StreamListener",
    "context_window",
    "stream_listener",
]

FirstTokenCallback = Callable[[], None]
"""Called once, synchronously, when the first content or tool-call chunk arrives."""


StreamListener = Callable[[Literal["text", "thinking"], str], None]
"""Told each piece of a streamed reply as it arrives: its kind and its text."""

stream_listener: ContextVar[StreamListener | None] = ContextVar("stream_listener", default=None)
"""Who hears the deltas of the model calls made in this context (an agent's event stream);
streaming adapters tell it after each network read. None (the default) costs one lookup."""


@runtime_checkable
class Model(Protocol):
    """Anything an agent can chat with."""

    name: str
    """A label for traces and errors (`tier:speed`, `scripted`)."""

    async def chat(self, request: ChatRequest) -> ChatResult:
        """Answer one request."""
        ...


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
    ) -> ChatResult:
        """One attempt at `request` against `model`; `ProviderError` if it fails."""
        ...

    async def aclose(self) -> None:
        """Close the provider's connections."""
        ...
