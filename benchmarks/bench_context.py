"""Context management on a 300-step agent: each strategy against no compaction, same run.

One agent, a scripted model (a short thought and a `read_file` call per step, ~1,550
tokens of tool output each), the simulator with the model's catalog window, latency and
prices behind the real router, on trio's virtual clock. Variants:

- `none-unbounded`: no compaction on an endpoint with no window (what the naive loop
  would send if anything accepted it): the baseline for total input tokens;
- `none`: no compaction on the real window: rejected (400) once the history outgrows it;
- `mask`, `recent`, `summary`, `mask+recent` (what `swarm solve` uses), `mask+summary`.

Figures per variant: calls, steps done, calls rejected, compactions, total input tokens
(summary calls included), peak request tokens, cached input tokens, cost with caching,
and simulated wall-clock. Goals: peak request <= 60 % of the window, total input
<= 25 % of the uncompacted run's, no call rejected.

    python -m benchmarks.bench_context [--steps 300] [--model moonshot/kimi-k2.6] [--json]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

import anyio

from swarm import Agent, Finish, tool
from swarm._routing.router import Router
from swarm.agent.compaction import ContextPolicy
from swarm.agent.context import (
    Chain,
    ContextStrategy,
    MaskToolOutputs,
    RecentWindow,
    Summarize,
)
from swarm.catalog import find_model
from swarm.config import ProviderConfig, SwarmConfig, TierConfig
from swarm.errors import ContextWindowExceeded
from swarm.messages import ChatRequest, ChatResult, ToolCall
from swarm.model import ChatModel, Model, context_window
from swarm.providers.sim import Reply, SimEngine, SimProvider
from swarm.providers.sim._context import Limits
from swarm.providers.sim._reply import prose

OUTPUT_WORDS = 1_500
THOUGHT_WORDS = 50
VARIANTS = ("none-unbounded", "none", "mask", "recent", "summary", "mask+recent", "mask+summary")


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"# {path}\n" + prose(OUTPUT_WORDS)


@tool
def finish(summary: str) -> None:
    """End the run."""
    raise Finish(summary)


@dataclass
class Script:
    """A read per step, then `finish`; the summariser gets a short summary."""

    steps: int
    reasoning: int | None
    calls: int = 0

    def __call__(self, request: ChatRequest) -> Reply:
        if request.metadata.get("role") == "summarizer":
            return Reply(prose(300), reasoning_tokens=self.reasoning)
        self.calls += 1
        if self.calls >= self.steps:
            call = ToolCall(id=f"c{self.calls}", name="finish", arguments='{"summary": "ok"}')
        else:
            args = json.dumps({"path": f"src/mod_{self.calls}.py"})
            call = ToolCall(id=f"c{self.calls}", name="read_file", arguments=args)
        return Reply(prose(THOUGHT_WORDS), (call,), reasoning_tokens=self.reasoning)


@dataclass
class Meter(ChatModel):
    """A model that notes every call's usage and cost (and rejections) for the figures."""

    inner: Model
    calls: list[ChatResult] = field(default_factory=list)
    rejected: int = 0

    def __post_init__(self) -> None:
        self.name = self.inner.name
        self.context_window = context_window(self.inner)

    async def chat(self, request: ChatRequest) -> ChatResult:
        try:
            result = await self.inner.chat(request)
        except ContextWindowExceeded:
            self.rejected += 1
            raise
        self.calls.append(result)
        return result


def _strategy(variant: str, summarizer: Model) -> ContextStrategy:
    summary = Summarize(summarizer, max_tokens=1024)
    table: dict[str, ContextStrategy] = {
        "mask": MaskToolOutputs(),
        "recent": RecentWindow(),
        "summary": summary,
        "mask+recent": Chain((MaskToolOutputs(), RecentWindow())),
        "mask+summary": Chain((MaskToolOutputs(), summary)),
    }
    return table[variant]


async def run_variant(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    script = Script(args.steps, args.reasoning)
    limits = {args.model: Limits(None, None)} if variant == "none-unbounded" else {}
    engine = SimEngine(profile=args.model, script=script, seed=args.seed, limits=limits)
    config = SwarmConfig(
        providers={"sim": ProviderConfig(kind="sim")},
        tiers={"speed": TierConfig(models=[f"sim/{args.model}"])},
    )
    start = anyio.current_time()
    async with Router(config, providers={"sim": SimProvider("sim", engine=engine)}) as router:
        main = Meter(router.model("speed", role="coder"))
        summarizer = Meter(router.model("speed", role="summarizer"))
        policy = None
        if not variant.startswith("none"):
            policy = ContextPolicy(_strategy(variant, summarizer))
        agent = Agent[str](
            "coder",
            model=main,
            tools=[read_file, finish],
            max_steps=args.steps + 10,
            compaction=policy,
        )
        error = None
        compactions = 0
        try:
            result = await agent.run("Read the code base, one module per step, then finish.")
            compactions = result.compactions
        except ContextWindowExceeded as exc:
            error = str(exc)[:160]
    calls = main.calls + summarizer.calls
    return {
        "variant": variant,
        "steps_done": script.calls,
        "finished": error is None,
        "error": error,
        "calls": len(calls),
        "rejected": main.rejected + summarizer.rejected,
        "compactions": compactions,
        "summary_calls": len(summarizer.calls),
        "input_tokens": sum(c.usage.input_tokens for c in calls),
        "peak_request_tokens": max((c.usage.input_tokens for c in main.calls), default=0),
        "cached_input_tokens": sum(c.usage.cached_input_tokens for c in calls),
        "cost_usd": round(sum(c.cost_usd for c in calls), 4),
        "simulated_s": round(anyio.current_time() - start, 1),
    }


def _virtual(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    from trio.testing import MockClock

    out: dict[str, Any] = anyio.run(
        run_variant,
        variant,
        args,
        backend="trio",
        backend_options={"clock": MockClock(autojump_threshold=0)},
    )
    return out


def judge(rows: list[dict[str, Any]], window: int) -> None:
    """Each compacting variant's standing against the goals (in place)."""
    base = next(r for r in rows if r["variant"] == "none-unbounded")["input_tokens"]
    for r in rows:
        r["peak_share_of_window"] = round(r["peak_request_tokens"] / window, 3)
        r["input_share_of_uncompacted"] = round(r["input_tokens"] / base, 3) if base else None
        if r["variant"].startswith("none"):
            continue
        r["goals_met"] = (
            r["finished"]
            and r["rejected"] == 0
            and r["peak_share_of_window"] <= 0.60
            and (r["input_share_of_uncompacted"] or 1.0) <= 0.25
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--model", default="moonshot/kimi-k2.6", help="a catalog ref")
    parser.add_argument(
        "--reasoning", type=int, default=None, help="thinking tokens per call (profile's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    window = find_model(args.model).context_window
    variants = [v for v in args.variants.split(",") if v]
    if "none-unbounded" not in variants:
        variants.insert(0, "none-unbounded")
    rows = [_virtual(v, args) for v in variants]
    judge(rows, window)
    out = {"model": args.model, "window": window, "steps": args.steps, "variants": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"bench_context: {args.steps} steps on {args.model} (window {window:,} tokens)")
    head = f"{'variant':16} {'steps':>5} {'rej':>3} {'cmp':>4} {'input tok':>12} "
    print(head + f"{'peak':>8} {'%win':>5} {'%base':>6} {'cached':>11} {'cost $':>8} {'sim s':>9}")
    for r in rows:
        print(
            f"{r['variant']:16} {r['steps_done']:5} {r['rejected']:3} {r['compactions']:4} "
            f"{r['input_tokens']:12,} {r['peak_request_tokens']:8,} "
            f"{r['peak_share_of_window']:5.0%} {r['input_share_of_uncompacted']:6.1%} "
            f"{r['cached_input_tokens']:11,} {r['cost_usd']:8.2f} {r['simulated_s']:9.0f}"
            + ("" if "goals_met" not in r else ("  ok" if r["goals_met"] else "  MISSED"))
        )


if __name__ == "__main__":
    main()
