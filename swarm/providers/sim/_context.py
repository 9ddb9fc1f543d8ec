"""What the simulator knows about windows, output caps and the prompt cache.

Real endpoints differ from an unbounded echo in three ways a long-running agent feels:

- a request whose prompt plus `max_tokens` is over the model's context window is
  rejected with a 400 (`context_length_exceeded`) before anything is generated;
- `max_tokens` bounds reasoning *and* answer together: a thinking model that spends its
  allowance thinking stops with `finish_reason: "length"` and no answer;
- a prompt that repeats an earlier prompt's prefix is served partly from the prompt cache
  (`cached_tokens`), billed at the cache price.

`PrefixCache` finds the cached prefix by chaining a hash over messages, so an
append-only conversation hits on everything but its newest messages, and a compaction
that rewrites early messages misses from the first changed one on, as real caches do.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from swarm.catalog import ModelInfo
from swarm.messages import Message
from swarm.providers.sim._reply import Reply, count_tokens

__all__ = [
    "Limits",
    "PrefixCache",
    "cap_reply",
    "context_error_body",
    "context_error_message",
    "limits_of",
    "message_tokens",
]


class _Rejected(Protocol):
    @property
    def input_tokens(self) -> int: ...
    @property
    def context_window(self) -> int | None: ...
    @property
    def requested_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """One simulated model's window and output cap, in simulator tokens."""

    context_window: int | None = None
    """None: any length is accepted (a model name the catalog does not know)."""
    max_output_tokens: int | None = None


def limits_of(info: ModelInfo | None, overrides: Mapping[str, Limits], model: str) -> Limits:
    """The config's override for `model` when there is one, else the catalog's figures."""
    found = overrides.get(model)
    if found is not None:
        return found
    if info is None:
        return Limits()
    return Limits(info.context_window, info.max_output_tokens)


def context_error_message(limit: int, prompt: int, completion: int) -> str:
    """The OpenAI wording, which clients and humans both recognise."""
    return (
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
        "completion). Please reduce the length of the messages or completion."
    )


def context_error_body(plan: _Rejected) -> dict[str, Any]:
    """The OpenAI-compatible 400 body for a request over the window."""
    prompt = plan.input_tokens
    limit = plan.context_window or 0
    message = context_error_message(limit, prompt, plan.requested_tokens - prompt)
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def cap_reply(reply: Reply, cap: int | None, thinking: int) -> tuple[Reply, int, int, str]:
    """(reply, visible tokens, thinking tokens, finish reason) within `cap` output tokens.

    Thinking comes first and counts against the cap; the visible text gets what is left,
    cut to whole words; tool calls that do not fit are dropped (a cut-off call is not
    a call), and the finish reason is then `length`.
    """
    finish = "tool_calls" if reply.tool_calls else "stop"
    if cap is not None and thinking >= cap:
        return Reply(None, (), reply.reasoning_tokens), 0, cap, "length"
    room = None if cap is None else cap - thinking
    text, out = reply.text, 0
    if text:
        out = count_tokens(text)
        if room is not None and out > room:
            return (
                Reply(" ".join(text.split()[:room]), (), reply.reasoning_tokens),
                room,
                thinking,
                "length",
            )
    calls = 0
    for call in reply.tool_calls:
        calls += 1 + count_tokens(call.arguments)
    if room is not None and out + calls > room:
        return Reply(text, (), reply.reasoning_tokens), out, thinking, "length"
    return reply, out + calls, thinking, "length" if reply.cut else finish


def message_tokens(m: Message) -> int:
    total = count_tokens(m.content) if m.content else 0
    for call in m.tool_calls:
        total += 1 + count_tokens(call.arguments)
    return total


class PrefixCache:
    """Prompt-cache hits: the longest prefix of messages some earlier request also sent.

    Keys chain a hash over (model, message 1, ..., message k), so one lookup per message
    finds the shared prefix. Bounded (least recently used out first), as real caches are.
    """

    def __init__(self, max_entries: int = 200_000) -> None:
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._max = max_entries

    def lookup_and_store(self, model: str, messages: Sequence[Message]) -> int:
        """Prompt tokens of `messages` served from the cache; remembers every prefix."""
        key = hash(model)
        cached = 0
        hit = True
        seen = self._seen
        for m in messages:
            calls = tuple((c.id, c.name, c.arguments) for c in m.tool_calls)
            key = hash((key, m.role, m.content, calls, m.tool_call_id))
            if hit and key in seen:
                cached += message_tokens(m)
                seen.move_to_end(key)
                continue
            hit = False
            seen[key] = None
        while len(seen) > self._max:
            seen.popitem(last=False)
        return cached
