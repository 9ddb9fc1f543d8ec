"""The one token-estimate rule (`swarm._tokens`)."""

from __future__ import annotations

from swarm._tokens import estimate_input_tokens, estimate_tokens
from swarm.messages import ChatRequest, Message, ToolCall, ToolSpec


def test_estimate_tokens_counts_text_and_tool_calls() -> None:
    call = ToolCall(id="c1", name="read", arguments='{"p":1}')  # 4 + 7 characters
    assert estimate_tokens() == 0
    assert estimate_tokens("abcd", None) == 1
    assert estimate_tokens("abcde") == 2  # rounded up
    assert estimate_tokens("a" * 5, [call]) == 4


def test_estimate_input_tokens_counts_messages_tool_calls_and_tools() -> None:
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "src/app.py"}')
    tool = ToolSpec(name="read_file", description="read", parameters={"type": "object"})
    bare = ChatRequest(messages=[Message(role="user", content="x" * 400)])
    busy = ChatRequest(
        messages=[
            Message(role="user", content="x" * 400),
            Message(role="assistant", tool_calls=[call]),
        ],
        tools=[tool],
    )
    assert estimate_input_tokens(bare) >= 100
    assert estimate_input_tokens(busy) > estimate_input_tokens(bare)
