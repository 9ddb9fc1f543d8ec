"""Context management: what an agent's history becomes when it would outgrow the window.

A strategy is an async function of the conversation and a `ContextBudget`, returning a
shorter conversation (`(messages, budget) -> messages`): anything with that call shape
and a `name` plugs in. The built-ins follow what the agent frameworks converged on:

- `MaskToolOutputs`: old tool results collapse to one line (SWE-agent's observation
  elision, OpenHands' observation masking); the calls and their order stay.
- `RecentWindow`: the oldest turns go, the newest are kept (LangGraph's `trim_messages`,
  OpenHands' recent-events condenser), with a one-line note of what was dropped.
- `Summarize`: the turns `RecentWindow` would drop are summarised by a model call on a
  tier of your choice (OpenHands' LLM summarising condenser, Claude Code's compact).
- `Chain`: each in turn until the conversation fits the budget's target.

Every strategy keeps the head (system prompt and the task, the first user message) and
cuts only between turns: an assistant message that calls tools and the results of those
calls stay together or go together, since providers reject a result without its call.

Prompt caching is why compaction is triggered at a threshold rather than every step: an
append-only conversation is re-read from the cache at a fraction of the price, and every
compaction rewrites the prefix, which is then paid in full once more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from swarm.errors import ProviderError
from swarm.messages import ChatRequest, ChatResult, Message
from swarm.model import Model

__all__ = [
    "Chain",
    "ContextBudget",
    "ContextStrategy",
    "MaskToolOutputs",
    "RecentWindow",
    "Summarize",
    "default_strategy",
    "split_turns",
]


@dataclass
class ContextBudget:
    """What a strategy must fit into, and how the agent counts tokens."""

    window: int
    """The model's context window, in tokens."""
    target: int
    """Compact down to this many tokens (a strategy may stop above it; the next tries)."""
    count: Callable[[Sequence[Message]], int]
    """Tokens a list of messages takes in a request, as the agent estimates them."""
    calls: list[ChatResult] = field(default_factory=list)
    """Model calls a strategy made (a summary): the agent adds their usage and cost."""


class ContextStrategy(Protocol):
    """Shortens a conversation: `(messages, budget) -> messages`."""

    @property
    def name(self) -> str:
        """Low-cardinality label for traces (`mask`, `recent`, `summary`)."""
        ...

    async def __call__(self, messages: list[Message], budget: ContextBudget) -> list[Message]: ...


def _head_len(messages: Sequence[Message]) -> int:
    """Leading system messages plus the first user message (the task): never touched."""
    i = 0
    while i < len(messages) and messages[i].role == "system":
        i += 1
    if i < len(messages) and messages[i].role == "user":
        i += 1
    return i


def split_turns(messages: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """(head, turns): the protected head, then groups that may only be kept or cut whole.

    A turn is an assistant message with the tool results answering its calls, or any
    other single message. Results whose call is not in their turn (a history that was
    already cut badly) stay attached to whatever precedes them.
    """
    head_len = _head_len(messages)
    turns: list[list[Message]] = []
    for m in messages[head_len:]:
        if m.role == "tool" and turns:
            turns[-1].append(m)
        else:
            turns.append([m])
    return list(messages[:head_len]), turns


def _flat(turns: Sequence[Sequence[Message]]) -> list[Message]:
    return [m for turn in turns for m in turn]


@dataclass(frozen=True)
class MaskToolOutputs:
    """Old tool results become one line; the newest `keep_last` stay whole."""

    keep_last: int = 4
    """Tool results (the most recent) left as they are."""
    min_chars: int = 200
    """Results shorter than this are left alone: masking them saves nothing."""
    name: str = "mask"

    async def __call__(self, messages: list[Message], budget: ContextBudget) -> list[Message]:
        results = [i for i, m in enumerate(messages) if m.role == "tool"]
        old = set(results[: max(0, len(results) - self.keep_last)])
        out: list[Message] = []
        for i, m in enumerate(messages):
            text = m.content or ""
            if i in old and len(text) >= self.min_chars and not text.startswith("[elided"):
                lines = text.count("\n") + 1
                note = f"[elided: {m.name or 'tool'} output, {len(text)} chars, {lines} lines]"
                m = m.model_copy(update={"content": note})
            out.append(m)
        return out


def _keep_recent(
    head: list[Message], turns: list[list[Message]], budget: ContextBudget, note_tokens: int
) -> int:
    """How many of the oldest turns to drop so that head + note + the rest fit the target.

    Always keeps the last turn (the model must see what it just did)."""
    sizes = [budget.count(t) for t in turns]
    total = budget.count(head) + note_tokens + sum(sizes)
    drop = 0
    while drop < len(turns) - 1 and total > budget.target:
        total -= sizes[drop]
        drop += 1
    return drop


@dataclass(frozen=True)
class RecentWindow:
    """Drops the oldest turns until the conversation fits; says how many went."""

    name: str = "recent"

    async def __call__(self, messages: list[Message], budget: ContextBudget) -> list[Message]:
        head, turns = split_turns(messages)
        drop = _keep_recent(head, turns, budget, note_tokens=30)
        if drop == 0:
            return messages
        dropped = sum(len(t) for t in turns[:drop])
        note = Message.user(
            f"[{dropped} earlier messages were dropped to fit the context window; "
            "re-read any file you need.]"
        )
        return [*head, note, *_flat(turns[drop:])]


_SUMMARY_PROMPT = (
    "You are compacting an agent's working memory. Summarise the conversation below for "
    "the agent itself: what it has done, what it found (file names, functions, errors, "
    "test results), what is settled and what is still open. Be concrete and brief; no "
    "preamble."
)


def _render(messages: Sequence[Message], max_chars: int) -> str:
    """The dropped turns as plain text for the summariser, each message cut to fit."""
    per = max(200, max_chars // max(1, len(messages)))
    lines = []
    for m in messages:
        calls = "".join(f" -> {c.name}({c.arguments[:200]})" for c in m.tool_calls)
        text = (m.content or "")[:per]
        lines.append(f"[{m.role}{' ' + m.name if m.name else ''}]{calls} {text}".rstrip())
    return "\n".join(lines)[:max_chars]


@dataclass(frozen=True)
class Summarize:
    """The turns `RecentWindow` would drop, replaced by a model's summary of them.

    The summary call goes through `model` (a tier of the router, so it is a `chat` span,
    counted against the run's budget) with at most `max_tokens` out; the agent adds its
    usage and cost to its own. If the call fails, the turns are dropped unsummarised."""

    model: Model
    max_tokens: int = 1024
    """Output allowance of the summary call (reasoning included)."""
    max_input_chars: int = 200_000
    """The dropped turns are cut to this many characters before they are sent."""
    name: str = "summary"

    async def __call__(self, messages: list[Message], budget: ContextBudget) -> list[Message]:
        head, turns = split_turns(messages)
        drop = _keep_recent(head, turns, budget, note_tokens=self.max_tokens)
        if drop == 0:
            return messages
        old = _flat(turns[:drop])
        request = ChatRequest.model_construct(
            messages=[
                Message.system(_SUMMARY_PROMPT),
                Message.user(_render(old, self.max_input_chars)),
            ],
            tools=[],
            max_tokens=self.max_tokens,
            temperature=None,
            tool_choice=None,
            stream=True,
            metadata={"role": "summarizer"},
        )
        try:
            result = await self.model.chat(request)
        except ProviderError:
            return await RecentWindow()(messages, budget)
        budget.calls.append(result)
        summary = Message.user(f"[Summary of {len(old)} earlier messages]\n{result.text}")
        return [*head, summary, *_flat(turns[drop:])]


@dataclass(frozen=True)
class Chain:
    """Strategies in order, each only while the conversation is still over the target."""

    strategies: Sequence[ContextStrategy]

    @property
    def name(self) -> str:
        """Its strategies' names joined by `+` (`mask+recent`)."""
        return "+".join(s.name for s in self.strategies)

    async def __call__(self, messages: list[Message], budget: ContextBudget) -> list[Message]:
        for strategy in self.strategies:
            if budget.count(messages) <= budget.target:
                break
            messages = await strategy(messages, budget)
        return messages


def default_strategy(summarizer: Model | None = None) -> Chain:
    """Mask old tool outputs, then summarise (with `summarizer`) or drop the oldest turns."""
    last: ContextStrategy = Summarize(summarizer) if summarizer is not None else RecentWindow()
    return Chain((MaskToolOutputs(), last))
