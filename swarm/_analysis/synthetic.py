"""Synthetic swarm traces: realistic large ones for benchmarks and the viewer.

`write_synthetic_trace` simulates a run (a planner on the reasoning tier, coders in
parallel under a concurrency cap, each alternating model calls and tools, waits of every
kind, fixers linked `depends_on` to the coder whose tests failed) and writes it as OTLP
JSON Lines, encoding spans by string formatting so a million spans take seconds.
`swarm._analysis.known` writes the tiny traces whose critical path and ledger are known.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from swarm._analysis.spanfile import SpanLines, at_ns
from swarm._tracing import semconv as sc
from swarm._tracing.otlp_json import (
    KIND_CLIENT,
    KIND_INTERNAL,
    STATUS_ERROR,
    OtlpSpan,
    encode_attributes,
    encode_span,
)

__all__ = ["SyntheticRun", "write_synthetic_trace"]


# per tier: (provider, model, ttft_s, output tok/s, $ in / M, $ out / M, reasoning tokens)
_MODELS = {
    "speed": [
        ("cerebras", "llama-3.3-70b", 0.15, 2100.0, 0.85, 1.2, 0),
        ("groq", "llama-3.3-70b", 0.2, 840.0, 0.59, 0.79, 0),
    ],
    "reasoning": [("moonshot", "kimi-k2.6", 1.6, 34.0, 0.6, 2.5, 400)],
}
_TOOLS = ("read_file", "search", "edit_file", "list_dir", "write_file", "git_diff")


class _Synth:
    def __init__(self, out: SpanLines, rng: random.Random, trace_id: str) -> None:
        self.out = out
        self.rng = rng
        self.trace_id = trace_id
        self.prefix = f"{rng.getrandbits(24):06x}"
        self.next_id = 0
        # static attribute fragments per model, so chat spans only format numbers
        self.static = {
            tier: [
                (
                    m,
                    encode_attributes(
                        {
                            sc.OPERATION: sc.OP_CHAT,
                            sc.PROVIDER: m[0],
                            sc.REQUEST_MODEL: m[1],
                            sc.RESPONSE_MODEL: m[1],
                            sc.REQUEST_STREAM: True,
                            sc.TIER: tier,
                            sc.SERVER_ADDRESS: f"api.{m[0]}.example",
                        }
                    )[:-1],
                )
                for m in models
            ]
            for tier, models in _MODELS.items()
        }

    def sid(self) -> str:
        self.next_id += 1
        return f"{self.prefix}{self.next_id:010x}"

    def span(
        self,
        sid: str,
        parent: str | None,
        name: str,
        during: tuple[float, float],
        attrs: Mapping[str, Any],
        links: Sequence[str] = (),
    ) -> None:
        """One internal span, `during` (start, end) in seconds from the run start."""
        self.out.add(
            encode_span(
                OtlpSpan(
                    trace_id=self.trace_id,
                    span_id=sid,
                    parent_span_id=parent,
                    name=name,
                    kind=KIND_INTERNAL,
                    start_ns=at_ns(during[0]),
                    end_ns=at_ns(during[1]),
                    attributes=attrs,
                    links=[(self.trace_id, s, {sc.LINK_TYPE: sc.LINK_DEPENDS_ON}) for s in links],
                )
            )
        )

    def wait(self, parent: str, kind: str, t0: float, t1: float, links: Sequence[str] = ()) -> None:
        self.span(
            self.sid(), parent, f"{sc.WAIT_SPAN} {kind}", (t0, t1), {sc.WAIT_KIND: kind}, links
        )

    def chat(
        self, parent: str, tier: str, t: float, input_tokens: int, output_tokens: int
    ) -> float:
        """One model call (with the waits that precede it); returns its end time."""
        rng = self.rng
        (_prov, model, ttft0, tps0, p_in, p_out, reasoning), static = rng.choice(self.static[tier])
        attempts = 1
        if rng.random() < 0.05:
            t1 = t + rng.uniform(0.2, 3.0)
            self.wait(parent, sc.WAIT_RATE_LIMIT, t, t1)
            t = t1
        if rng.random() < 0.03:
            attempts = 2
            t1 = t + rng.uniform(0.5, 2.0)
            self.wait(parent, sc.WAIT_BACKOFF, t, t1)
            t = t1
        if rng.random() < 0.02:
            t1 = t + rng.uniform(0.05, 0.5)
            self.wait(parent, sc.WAIT_HEDGE, t, t1)
            t = t1
        ttft = ttft0 * rng.lognormvariate(0, 0.25) + input_tokens / 200_000
        tps = tps0 * rng.lognormvariate(0, 0.15)
        total_out = output_tokens + reasoning
        dur = ttft + total_out / tps
        cost = (input_tokens * p_in + total_out * p_out) / 1e6
        error = "timeout" if rng.random() < 0.005 else ""
        attrs = (
            f'{static},{{"key":"{sc.TIME_TO_FIRST_CHUNK}","value":{{"doubleValue":{ttft!r}}}}}'
            f',{{"key":"{sc.INPUT_TOKENS}","value":{{"intValue":"{input_tokens}"}}}}'
            f',{{"key":"{sc.OUTPUT_TOKENS}","value":{{"intValue":"{total_out}"}}}}'
            f',{{"key":"{sc.REASONING_TOKENS}","value":{{"intValue":"{reasoning}"}}}}'
            f',{{"key":"{sc.DECODE_TPS}","value":{{"doubleValue":{tps!r}}}}}'
            f',{{"key":"{sc.COST_USD}","value":{{"doubleValue":{cost!r}}}}}'
            f',{{"key":"{sc.ATTEMPTS}","value":{{"intValue":"{attempts}"}}}}'
            f',{{"key":"{sc.FINISH_REASONS}","value":{{"arrayValue":{{"values":'
            f'[{{"stringValue":"tool_calls"}}]}}}}}}'
            + (
                f',{{"key":"{sc.ERROR_TYPE}","value":{{"stringValue":"{error}"}}}}]'
                if error
                else "]"
            )
        )
        self.out.add(
            encode_span(
                OtlpSpan(
                    trace_id=self.trace_id,
                    span_id=self.sid(),
                    parent_span_id=parent,
                    name=f"{sc.OP_CHAT} {model}",
                    kind=KIND_CLIENT,
                    start_ns=at_ns(t),
                    end_ns=at_ns(t + dur),
                    raw_attributes=attrs,
                    events=[(sc.FIRST_TOKEN_EVENT, at_ns(t + ttft), None)],
                    status_code=STATUS_ERROR if error else 0,
                    status_message=error,
                )
            )
        )
        return t + dur

    def tool(self, parent: str, name: str, t: float, dur: float, **extra: Any) -> float:
        attrs = {
            sc.OPERATION: sc.OP_TOOL,
            sc.TOOL_NAME: name,
            sc.TOOL_CALL_ID: f"call_{self.next_id:x}",
            sc.TOOL_EXIT_CODE: 0,
            **extra,
        }
        self.span(self.sid(), parent, f"{sc.OP_TOOL} {name}", (t, t + dur), attrs)
        return t + dur

    def agent(self, parent: str, a: _AgentPlan) -> tuple[str, float, bool]:
        """One agent: its calls and tools; returns (span id, end time, tests failed)."""
        sid = self.sid()
        t_ready = a.ready
        if a.dep is not None:  # waits for another subtask, linked to it
            self.wait(sid, sc.WAIT_DEPENDENCY, t_ready, a.dep[1], links=[a.dep[0]])
            t_ready = a.dep[1]
        if a.waits and a.start > t_ready:
            self.wait(sid, sc.WAIT_QUEUE, t_ready, a.start)
        t, failed = self._work(sid, a, max(a.ready, a.start))
        if a.waits and a.role != "planner":
            t1 = t + self.rng.uniform(0.05, 0.8)
            self.wait(sid, sc.WAIT_MERGE, t, t1)
            t = t1
        t += 0.002
        attrs = {
            sc.OPERATION: sc.OP_AGENT,
            sc.AGENT_NAME: a.role,
            sc.AGENT_ID: f"{a.role}-{a.index}",
            sc.SUBTASK_ID: f"t{a.index}",
            sc.ROLE: a.role,
        }
        self.span(sid, parent, f"{sc.OP_AGENT} {a.role}", (a.ready, t), attrs, a.links)
        return sid, t, failed

    def _work(self, sid: str, a: _AgentPlan, t: float) -> tuple[float, bool]:
        """The agent's model calls, each followed by tools; the last tool runs the tests."""
        rng = self.rng
        failed = False
        for c in range(a.calls):
            t = self.chat(sid, a.tier, t, rng.randint(2_000, 30_000), rng.randint(50, 1_500))
            for k in range(a.tools_per_call):
                last = c == a.calls - 1 and k == a.tools_per_call - 1
                if last and a.role != "planner":
                    failed = rng.random() < 0.2
                    dur = rng.uniform(2.0, 8.0)  # drawn before the counts: keeps seeds stable
                    tests = {
                        sc.TESTS_PASSED: rng.randint(5, 200),
                        sc.TESTS_FAILED: rng.randint(1, 5) if failed else 0,
                    }
                    t = self.tool(sid, "run_tests", t, dur, **tests)
                else:
                    t = self.tool(sid, rng.choice(_TOOLS), t, rng.uniform(0.005, 0.3))
        return t, failed


@dataclass(frozen=True)
class _AgentPlan:
    """One synthetic agent to write: who, on which tier, how much work, when."""

    role: str
    index: int
    tier: str
    calls: int
    tools_per_call: int
    ready: float
    """When its work could start."""
    start: float
    """When a concurrency slot let it start (queue wait in between)."""
    links: Sequence[str] = ()
    waits: bool = True
    dep: tuple[str, float] | None = None
    """(span id, end time) of a subtask it must wait for."""


@dataclass(frozen=True)
class SyntheticRun:
    """The run `write_synthetic_trace` simulates; the same seed writes the same bytes."""

    agents: int = 50
    """Coders (a fixer follows each whose tests fail)."""
    calls_per_agent: int = 10
    tools_per_call: int = 1
    seed: int = 0
    waits: bool = True
    """Write queue, merge and dependency wait spans."""
    max_agents: int = 16
    """The concurrency cap: coders beyond it queue for a slot."""
    run_id: str | None = None
    """`synthetic-{seed}` when None."""


def write_synthetic_trace(path: Path, run: SyntheticRun | None = None, **options: Any) -> int:
    """Write a realistic trace of a whole swarm run to `path`; return the span count.

    `options` are `SyntheticRun`'s fields as keywords (`agents=40, seed=3`), applied over
    `run` (or the defaults); an unknown one raises `TypeError`."""
    run = replace(run or SyntheticRun(), **options)
    rng = random.Random(run.seed)
    trace_id = f"{rng.getrandbits(128):032x}"
    run_id = run.run_id or f"synthetic-{run.seed}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        out = SpanLines(fh, run_id)
        s = _Synth(out, rng, trace_id)
        root = s.sid()
        planner_calls = max(1, min(3, run.calls_per_agent))
        planner = _AgentPlan(
            "planner", 0, "reasoning", planner_calls, run.tools_per_call, 0.01, 0.01
        )
        _, t_plan, _ = s.agent(root, planner)
        end = _coders(s, root, t_plan, run)
        attrs = {sc.OPERATION: sc.OP_WORKFLOW, sc.WORKFLOW_NAME: "swarm", sc.RUN_ID: run_id}
        s.span(root, None, f"{sc.OP_WORKFLOW} swarm", (0.0, end + 0.05), attrs)
        out.flush()
        return out.count


def _coders(s: _Synth, root: str, t_plan: float, shape: SyntheticRun) -> float:
    """Coders under the concurrency cap, a fixer after each failed test run; the last end."""
    rng = s.rng
    slots = [t_plan] * max(1, shape.max_agents)
    ends: list[tuple[str, float]] = []
    end = t_plan
    for i in range(1, shape.agents + 1):
        ready = t_plan + rng.uniform(0.0, 0.05)
        dep = None
        if ends and rng.random() < 0.1:  # a subtask that waits for an earlier one
            dep = ends[rng.randrange(max(0, len(ends) - 20), len(ends))]
        slot = heapq.heappop(slots)
        start = max(ready, slot, dep[1] if dep else 0.0)
        coder = _AgentPlan(
            "coder", i, "speed", shape.calls_per_agent, shape.tools_per_call, ready, start
        )
        sid, t_end, failed = s.agent(root, replace(coder, waits=shape.waits, dep=dep))
        if failed:
            f_start = t_end + rng.uniform(0.01, 0.1)
            calls = max(1, shape.calls_per_agent // 3)
            fixer = _AgentPlan("fixer", i, "speed", calls, shape.tools_per_call, f_start, f_start)
            _, t_end, _ = s.agent(root, replace(fixer, links=[sid], waits=shape.waits))
        heapq.heappush(slots, t_end)
        ends.append((sid, t_end))
        end = max(end, t_end)
    return end
