"""Test helpers for users of swarm and for swarm's own tests.

- `ScriptedModel` plays a model from a list of replies and fails on an unexpected call;
  `FunctionModel` lets a function play the model. Both implement `swarm.model.Model`
  and stream their text word by word;
  `ScriptedSource` gives each agent of a `solve` its own scripted model.
- `call(...)` and `reply(...)` build scripted replies.
- `assert_critical_path_under`, `assert_p95_call_latency_under` and
  `assert_rate_limit_waits_under` check latency budgets on a recorded trace.
- `block_network()` refuses every network connection that is not to loopback, so a test
  that would reach a real provider fails loudly instead of spending money. The pytest
  plugin `swarm.pytest_plugin` wraps every test in it when asked (`swarm_block_network =
  true` in the pytest settings) and gives it as the `block_network` fixture.

Importing this module does not import pytest.
"""

from __future__ import annotations

import inspect
import ipaddress
import itertools
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeAlias

import anyio.lowlevel

from swarm._analysis.assertions import (
    assert_critical_path_under,
    assert_p95_call_latency_under,
    assert_rate_limit_waits_under,
)
from swarm.errors import NetworkBlocked
from swarm.messages import ChatRequest, ChatResult, Message, Timing, ToolCall, Usage
from swarm.model import Delta, Done, Model, Streamed
from swarm.providers.sim._reply import split_words

__all__ = [
    "FunctionModel",
    "NetworkBlocked",
    "ScriptedModel",
    "ScriptedSource",
    "assert_critical_path_under",
    "assert_p95_call_latency_under",
    "assert_rate_limit_waits_under",
    "block_network",
    "call",
    "reply",
    "word_by_word",
]

_ids = itertools.count(1)

Scripted: TypeAlias = "ChatResult | str | ToolCall | Sequence[ToolCall]"
"""A scripted reply: a full result, plain text, one tool call, or parallel tool calls."""


def call(name: str, /, **arguments: Any) -> ToolCall:
    """A tool call as a model would make it: `call("edit_file", path="a.py", old=..., new=...)`."""
    return ToolCall(id=f"call_{next(_ids)}", name=name, arguments=json.dumps(arguments))


def reply(item: Scripted, *, output_tokens: int = 10, cost_usd: float = 0.0) -> ChatResult:
    """Turn a scripted item into a `ChatResult`."""
    if isinstance(item, ChatResult):
        return item
    if isinstance(item, str):
        message, finish = Message.assistant(item), "stop"
    else:
        calls = [item] if isinstance(item, ToolCall) else list(item)
        message, finish = Message.assistant(None, calls), "tool_calls"
    return ChatResult.model_construct(
        message=message,
        finish_reason=finish,
        usage=Usage(input_tokens=0, output_tokens=output_tokens),
        timing=Timing(),
        provider="scripted",
        model="scripted",
        cost_usd=cost_usd,
        attempts=1,
        simulated=True,
        rate_limit=None,
        extras={},
    )


class ScriptedModel:
    """Replies from a list, in order; records every request; fails past the end."""

    def __init__(self, replies: Sequence[Scripted], *, name: str = "scripted") -> None:
        self.name = name
        self._replies = list(replies)
        self.requests: list[ChatRequest] = []
        """Every request received, in order."""

    async def chat(self, request: ChatRequest) -> ChatResult:
        """The next scripted reply; records `request`.

        Raises:
            AssertionError: the script is used up (the test fails, naming the last message).
        """
        return self._next(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        """The next scripted reply, its text word by word; records `request`."""
        async for item in word_by_word(self._next(request)):
            yield item

    def _next(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        if len(self.requests) > len(self._replies):
            last = request.messages[-1].content if request.messages else None
            raise AssertionError(
                f"{self.name}: unexpected call #{len(self.requests)} "
                f"(script has {len(self._replies)}); last message: {last!r}"
            )
        return reply(self._replies[len(self.requests) - 1])

    def assert_complete(self) -> None:
        """Fail unless every scripted reply was used."""
        left = len(self._replies) - len(self.requests)
        assert left == 0, f"{self.name}: {left} scripted replies were never requested"


ModelFunction: TypeAlias = Callable[[ChatRequest], "Scripted | Awaitable[Scripted]"]


class ScriptedSource:
    """A model source for `solve(..., source=)`: each agent id gets its own scripted model.

    `scripts` maps agent ids (`coder:s1`, `fixer:s1:1`) to their replies; an agent with no
    script gets `default`, or fails the test. `models` keeps every model handed out (to
    inspect their requests); `escalated` lists the agents asked for the reasoning tier.
    """

    def __init__(self, scripts: dict[str, list[Scripted]], *, default: Model | None = None) -> None:
        self.scripts = scripts
        self.default = default
        self.models: dict[str, Model] = {}
        self.escalated: list[str] = []

    def model(self, role: str, *, agent_id: str, escalate: bool = False) -> Model:
        """`agent_id`'s model: the same `ScriptedModel` every time it is asked for.

        Raises:
            AssertionError: no script for `agent_id` and no `default`.
        """
        if escalate:
            self.escalated.append(agent_id)
        if agent_id not in self.models:
            if agent_id in self.scripts:
                self.models[agent_id] = ScriptedModel(self.scripts[agent_id], name=agent_id)
            elif self.default is not None:
                self.models[agent_id] = self.default
            else:
                raise AssertionError(f"no script for {agent_id}")
        return self.models[agent_id]


class FunctionModel:
    """A function plays the model: it gets the request and returns a scripted item."""

    def __init__(self, function: ModelFunction, *, name: str = "function") -> None:
        self.name = name
        self._function = function
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResult:
        """The function's answer to `request` (awaited if it is a coroutine); records it."""
        self.requests.append(request)
        out = self._function(request)
        if inspect.isawaitable(out):
            out = await out
        return reply(out)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        """The function's answer to `request`, its text word by word; records it."""
        async for item in word_by_word(await self.chat(request)):
            yield item


async def word_by_word(result: ChatResult) -> AsyncIterator[Streamed]:
    """`result` as a model streams it: its text word by word (a checkpoint between
    words, as between network reads), then `Done`."""
    if result.text:
        for word in split_words(result.text):
            await anyio.lowlevel.checkpoint()
            yield Delta("text", word)
    yield Done(result)


_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def _is_loopback(host: Any) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode()
    host = str(host).strip("[]")
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextmanager
def block_network() -> Iterator[None]:
    """Within the block, fail any DNS lookup or connection not to loopback (or a Unix socket).

    The pytest plugin `swarm.pytest_plugin` wraps every test in this when asked."""
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_loopback(host):
            raise NetworkBlocked(f"test tried to resolve {host!r}: only loopback is allowed")
        return real_getaddrinfo(host, *args, **kwargs)

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            raise NetworkBlocked(f"test tried to connect to {address!r}: only loopback")

    def connect(self: socket.socket, address: Any) -> None:
        check(self, address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(self, address)
        return real_connect_ex(self, address)

    patches: list[tuple[Any, str, Any]] = [
        (socket, "getaddrinfo", getaddrinfo),
        (socket.socket, "connect", connect),
        (socket.socket, "connect_ex", connect_ex),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, fake in patches:
        setattr(owner, name, fake)
    try:
        yield
    finally:
        for owner, name, real in saved:
            setattr(owner, name, real)
