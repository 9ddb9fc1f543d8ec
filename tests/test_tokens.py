"""The one token-estimate rule (`swarm._tokens`)."""

from __future__ import annotations

from swarm._tokens import estimate_input_tokens, estimate_tokens
from swarm.messages import ChatRequest, Message, ToolCall, ToolSpec
from swarm.routing.router import estimate_input_tokens as router_estimate


def test_estimate_tokens_counts_text_and_tool_calls() -> None:
    call = ToolCall(id="c1", name="read", arguments='{"p":1}')  # 4 + 7 characters
    assert estimate_tokens() == 0
    assert estimate_tokens("abcd", None) == 1
    assert estimate_tokens("abcde") == 2  # rounded up
    assert estimate_tokens("a" * 5, [call]) == 4


def test_estimate_input_tokens_matches_the_router() -> None:
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "src/app.py"}')
    request = ChatRequest(
        messages=[
            Message.system("be brief"),
            Message.user("x" * 401),
            Message(role="assistant", content=None, tool_calls=[call]),
            Message.tool(call, "def main(): ..."),
        ],
        tools=[ToolSpec(name="read_file", description="Read a file")],
    )
    assert estimate_input_tokens(request) == router_estimate(request)
    assert estimate_input_tokens(request) >= 100 + 60
