"""Token estimates: the one rule (about 4 characters a token) for counts nobody reported.

Used before a call (limits and budgets need a figure up front) and after one whose server
sent no usage. Cheap on purpose: a character count, no tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from swarm.messages import ChatRequest, Message, ToolCall

__all__ = ["estimate_input_tokens", "estimate_messages_tokens", "estimate_tokens"]

CHARS_PER_TOKEN = 4
"""Characters per token, a fair average for English prose and code."""
TOKENS_PER_MESSAGE = 4
"""Role and framing tokens each message adds to a prompt."""
TOKENS_PER_TOOL = 60
"""A tool's name, description and schema as a prompt carries them, on average."""


def estimate_tokens(*parts: str | Iterable[ToolCall] | None) -> int:
    """Tokens in some text and tool calls (names plus arguments), rounded up."""
    chars = 0
    for part in parts:
        if part is None:
            continue
        if isinstance(part, str):
            chars += len(part)
        else:
            chars += sum(len(c.name) + len(c.arguments) for c in part)
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def estimate_messages_tokens(messages: Sequence[Message]) -> int:
    """Messages as a prompt carries them: text, tool calls and framing."""
    chars = 0
    for m in messages:
        if m.content:
            chars += len(m.content)
        for tc in m.tool_calls:
            chars += len(tc.name) + len(tc.arguments)
    return chars // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE * len(messages)


def estimate_input_tokens(request: ChatRequest) -> int:
    """The prompt of `request`: its messages' text and tool calls, framing, and tools."""
    return estimate_messages_tokens(request.messages) + TOKENS_PER_TOOL * len(request.tools)
