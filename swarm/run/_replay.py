"""Replaying an agent's model calls from the journal, so a resumed run pays nothing twice.

A call is keyed by (run, agent key, call index, request hash): an agent's n-th call is
answered with what its n-th call got, as long as the conversation is the same one.
`request_hash` covers what decides a model's reply; `replay_hash`, the key, leaves out
what a resumed agent cannot reproduce and the model's reply does not hinge on: the text
of tool results (the agent's replayed tool calls run again, in a worktree that may start
from a newer head, and a test run's output carries its own timings) and wall times
anywhere (`in 0.31s`). Measured before: 12 of 16 resumed runs re-sent 1 to 7 completed
calls, every one a request that differed only there.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable

import anyio.lowlevel

from swarm._tracing import semconv as sc
from swarm.messages import ChatRequest, ChatResult, ToolSpec
from swarm.model import Delta, Done, Model, Streamed, closing, context_window, stream_of
from swarm.run.journal import Journal

__all__ = ["ReplayModel", "replay_hash", "request_hash"]

_WALL_TIME = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|sec|secs|seconds)\b")
"""A duration such as `0.31s`, `12 ms` or `3 seconds` in a message."""


def replay_hash(request: ChatRequest) -> str:
    """sha256 of the request as replay matches it: `request_hash` with tool results' text
    left out and wall times in other messages masked (see the module docstring)."""
    return request_hash(request, for_replay=True)


def request_hash(request: ChatRequest, *, for_replay: bool = False) -> str:
    """sha256 of what decides a model's reply: messages, tools and the model settings;
    `metadata` and `stream` are left out.

    Every text field is framed by its length (unambiguous, and far cheaper than JSON for
    long conversations); tool specs are canonical JSON, cached per ToolSpec object.
    """
    parts = [
        f"swarm-request-v1|{request.max_tokens}|{request.temperature}|{request.tool_choice}|",
        *(_tool_text(t) for t in request.tools),
    ]
    extra = (request.top_p, request.reasoning_effort, request.parallel_tool_calls)
    if extra != (None, None, None):  # left out when unset: older journals still match
        parts.append(f"settings|{extra}|")
    for m in request.messages:
        content = m.content
        if for_replay and content is not None:
            content = "" if m.role == "tool" else _WALL_TIME.sub("#s", content)
        parts.append(f"{m.role}|{_f(content)}{_f(m.tool_call_id)}{_f(m.name)}{len(m.tool_calls)}|")
        parts.extend(f"{_f(c.id)}{_f(c.name)}{_f(c.arguments)}" for c in m.tool_calls)
    return hashlib.sha256("".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _f(text: str | None) -> str:
    return "~" if text is None else f"{len(text)}:{text}"


_TOOL_CACHE: dict[int, tuple[ToolSpec, str]] = {}


def _tool_text(tool: ToolSpec) -> str:
    """Canonical JSON of a tool spec; agents resend the same specs, so keep the encoding."""
    hit = _TOOL_CACHE.get(id(tool))
    if hit is not None and hit[0] is tool:  # the entry holds the object, so ids can't be reused
        return hit[1]
    text = _f(json.dumps([tool.name, tool.description, tool.parameters], sort_keys=True))
    if len(_TOOL_CACHE) >= 1024:
        _TOOL_CACHE.clear()
    _TOOL_CACHE[id(tool)] = (tool, text)
    return text


class ReplayModel:
    """A `Model` that answers from the journal when it can and journals what it cannot.

    Calls are keyed by (run, agent key, call index, `replay_hash`): a resumed agent that
    asks the same questions in the same order gets the recorded answers without a model
    call, whatever its tools printed this time; from the first question that differs,
    calls go to the inner model. Give each
    agent its own ReplayModel with a key that is stable across runs (`coder:<subtask>`).
    Replayed results carry `extras["swarm.replayed"] = True`.
    """

    def __init__(
        self,
        inner: Model,
        journal: Journal,
        *,
        run_id: str,
        key: str,
        on_replay: Callable[[ChatResult], None] | None = None,
    ) -> None:
        self.name = inner.name
        self.context_window = context_window(inner)
        self.on_replay = on_replay
        """Told of every replayed result (the run's budget counts it: it was paid for)."""
        self.inner = inner
        self.journal = journal
        self.run_id = run_id
        self.key = key
        self.replayed = 0
        """Calls answered from the journal."""
        self.recorded = 0
        """Calls made to the inner model and journaled."""
        self._next_index = 0

    async def chat(self, request: ChatRequest) -> ChatResult:
        """The journaled reply to this call, or the inner model's (journaled)."""
        call_key, digest, stored = self._look_up(request)
        if stored is not None:
            await anyio.lowlevel.checkpoint()  # a replayed agent still yields and can be cancelled
            return stored
        result = await self.inner.chat(request)
        return self._recorded(call_key, digest, result)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Streamed]:
        """`chat`'s answer as a stream: a journaled reply in one piece, the inner model's
        as it streams (journaled when it is done)."""
        call_key, digest, stored = self._look_up(request)
        if stored is not None:
            await anyio.lowlevel.checkpoint()
            if stored.text:
                yield Delta("text", stored.text)
            yield Done(stored)
            return
        async with closing(stream_of(self.inner, request)) as items:
            async for item in items:
                if isinstance(item, Done):
                    item = Done(self._recorded(call_key, digest, item.result))
                yield item

    def _look_up(self, request: ChatRequest) -> tuple[str, str, ChatResult | None]:
        """The call's journal key and digest, and its journaled result if there is one."""
        index = self._next_index  # taken before any await: call order decides the index
        self._next_index += 1
        call_key = f"{self.key}#{index}"
        digest = replay_hash(request)
        stored = self.journal.find_call(self.run_id, call_key, digest)
        if stored is None:
            return call_key, digest, None
        self.replayed += 1
        result = ChatResult.model_validate_json(stored)
        if self.on_replay is not None:
            self.on_replay(result)
        replayed = result.model_copy(update={"extras": {**result.extras, sc.REPLAYED: True}})
        return call_key, digest, replayed

    def _recorded(self, call_key: str, digest: str, result: ChatResult) -> ChatResult:
        self.journal.record_call(self.run_id, call_key, digest, result.model_dump_json())
        self.recorded += 1
        return result
