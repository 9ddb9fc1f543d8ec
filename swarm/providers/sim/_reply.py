"""What the simulated model says: `Reply`, the `Script` that writes it, the demo script.

A script is any function (plain or async) from a `ChatRequest` to a `Reply`; the engine
truncates its text to the request's `max_tokens`. The built-in `default_script` answers
with plausible prose of the requested length, or calls a tool the request's metadata
names.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from swarm.messages import ChatRequest, ToolCall

__all__ = [
    "Reply",
    "Script",
    "count_tokens",
    "default_script",
    "natural_length",
    "prose",
    "split_words",
]


@dataclass(frozen=True)
class Reply:
    """What a script says: text, tool calls, or both."""

    text: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    reasoning_tokens: int | None = None
    """Hidden thinking tokens for this call; None means the profile's figure."""
    cut: bool = False
    """The model ran out of tokens where the text ends (`finish_reason: length`), as a
    real one does mid-answer when `max_tokens` is too small."""


Script = Callable[[ChatRequest], Reply | Awaitable[Reply]]
"""Writes the model's reply to a request (plain or async function)."""


def count_tokens(text: str) -> int:
    """The simulator's token: one whitespace-separated word.

    Not an estimate of a real tokenizer (that is `swarm._tokens`): it is how the simulated
    world counts, so a script's reply cut at `max_tokens=N` is exactly N words, and
    `prose(n)` writes n of them.
    """
    return len(text.split())


def split_words(text: str) -> list[str]:
    """`text` as the simulator streams it: word by word, each with the whitespace before it
    (joined, they are `text`)."""
    return re.findall(r"\s*\S+\s*$|\s*\S+", text) or [text]


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


def prose(n: int) -> str:
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
    - otherwise: plausible prose of its own length, as a model that stops when it is done:
      `sim.tokens` in the metadata, else 24-256 tokens drawn from the conversation's last
      message. `max_tokens` only caps it (then `finish_reason` is `length`).
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
    wanted = meta.get("sim.tokens")
    return Reply(text=prose(int(wanted) if wanted else natural_length(request)))


def natural_length(request: ChatRequest) -> int:
    """How long the simulated model's prose answer is, whatever the cap: 24-256 tokens,
    decided by the conversation's last message (so the same question, the same length)."""
    last = request.messages[-1].content or "" if request.messages else ""
    return 24 + zlib.crc32(last.encode("utf-8", "surrogatepass")) % 233
