"""`swarm ask "PROMPT"`: one model call through the router, printed (or as JSON)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from swarm._commands._args import at_least

__all__ = ["register"]

SIMULATOR_NOTICE = "no provider keys found: running on the simulator (simulated latency)"


def register(subparsers: Any) -> None:
    """Add `ask` to the `swarm` parser."""
    p = subparsers.add_parser(
        "ask",
        help="send one prompt through the router and print the reply",
        description="Send one prompt to a tier (with retries, failover and hedging).",
    )
    p.add_argument("prompt", help="the user message")
    p.add_argument("--tier", default="speed", help="tier to route to (default: %(default)s)")
    p.add_argument("--config", metavar="FILE", help="swarm.toml (default: see `swarm providers`)")
    p.add_argument("--max-tokens", type=at_least(1), metavar="N", help="cap on output tokens")
    p.add_argument("--json", action="store_true", help="print the result and figures as JSON")
    p.set_defaults(func=_ask)


async def _ask(args: argparse.Namespace) -> int:
    from swarm._routing.router import Router
    from swarm.config import load_config
    from swarm.messages import ChatRequest, Message
    from swarm.providers._call_deadline import DEADLINE_CUT

    config = load_config(args.config, env=os.environ)
    if config.simulated:
        notice = (
            SIMULATOR_NOTICE
            if config.source is None
            else ("running on the simulator (simulated latency)")
        )
        print(notice, file=sys.stderr)
    request = ChatRequest(messages=[Message.user(args.prompt)], max_tokens=args.max_tokens)
    async with Router(config, env=os.environ) as router:
        result = await router.chat(request, tier=args.tier)
    if not args.json:
        print(result.text)
        if result.finish_reason == "length":  # say why a reply stops short (or is empty)
            u = result.usage
            print(
                f"(stopped at max_tokens: {u.output_tokens} tokens, "
                f"{u.reasoning_tokens} of them thinking)",
                file=sys.stderr,
            )
        elif result.finish_reason == DEADLINE_CUT:
            print(
                f"(stopped at the call's deadline after {result.timing.duration_s:.0f} s: "
                "set total_timeout_s on the provider to wait longer)",
                file=sys.stderr,
            )
        return 0
    out = {
        "text": result.text,
        "provider": result.provider,
        "model": result.model,
        "tier": args.tier,
        "finish_reason": result.finish_reason,
        "ttft_s": round(result.timing.ttft_s, 6),
        "duration_s": round(result.timing.duration_s, 6),
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "reasoning_tokens": result.usage.reasoning_tokens,
        "tokens_per_s": round(result.tokens_per_s, 3),
        "cost_usd": result.cost_usd,
        "attempts": result.attempts,
        "simulated": result.simulated,
        "tool_calls": [c.model_dump() for c in result.message.tool_calls],
    }
    print(json.dumps(out, indent=2))
    return 0
