"""Synthetic swarm traces: realistic large ones for benchmarks and the viewer, and small
ones with known answers for tests.

`write_synthetic_trace` simulates a run (a planner on the reasoning tier, coders in
parallel under a concurrency cap, each alternating model calls and tools, waits of every
kind, fixers linked `depends_on` to the coder whose tests failed) and writes it as OTLP
JSON Lines, encoding spans by string formatting so a million spans take seconds.
`build_chain` and `build_fanout` write tiny traces whose critical path and ledger are known.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from swarm.tracing import semconv as sc
from swarm.tracing.otlp_json import (
    KIND_CLIENT,
    KIND_INTERNAL,
    STATUS_ERROR,
    encode_attributes,
    encode_span,
    traces_data_line,
)

__all__ = [
    "BASE_NS",
    "KnownTrace",
    "SpanSpec",
    "build_chain",
    "build_fanout",
    "span_id",
    "write_spans",
    "write_synthetic_trace",
]

BASE_NS = 1_780_000_000_000_000_000
"""Start of every synthetic run, in Unix nanoseconds."""
_SPANS_PER_LINE = 1000
_SEC = 1_000_000_000

# per tier: (provider, model, ttft_s, output tok/s, $ in / M, $ out / M, reasoning tokens)
_MODELS = {
    "speed": [
        ("cerebras", "llama-3.3-70b", 0.15, 2100.0, 0.85, 1.2, 0),
        ("groq", "llama-3.3-70b", 0.2, 840.0, 0.59, 0.79, 0),
    ],
    "reasoning": [("moonshot", "kimi-k2.6", 1.6, 34.0, 0.6, 2.5, 400)],
}
_TOOLS = ("read_file", "search", "edit_file", "list_dir", "write_file", "git_diff")


class _Out:
    """Buffers encoded spans and writes one OTLP line per `_SPANS_PER_LINE` spans."""

    def __init__(self, fh: TextIO, run_id: str) -> None:
        self.fh = fh
        self.resource = {"service.name": "swarm", sc.RUN_ID: run_id}
        self.buf: list[str] = []
        self.count = 0

    def add(self, span_json: str) -> None:
        self.buf.append(span_json)
        self.count += 1
        if len(self.buf) >= _SPANS_PER_LINE:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.fh.write(traces_data_line(self.resource, "swarm", self.buf) + "\n")
            self.buf = []


def _ns(t: float) -> int:
    return BASE_NS + int(t * _SEC)


class _Synth:
    def __init__(self, out: _Out, rng: random.Random, trace_id: str) -> None:
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
        t0: float,
        t1: float,
        attrs: Mapping[str, Any],
        *,
        kind: int = KIND_INTERNAL,
        links: Sequence[str] = (),
        error: str = "",
    ) -> None:
        self.out.add(
            encode_span(
                trace_id=self.trace_id,
                span_id=sid,
                parent_span_id=parent,
                name=name,
                kind=kind,
                start_ns=_ns(t0),
                end_ns=_ns(t1),
                attributes=attrs,
                links=[(self.trace_id, s, {sc.LINK_TYPE: sc.LINK_DEPENDS_ON}) for s in links],
                status_code=STATUS_ERROR if error else 0,
                status_message=error,
            )
        )

    def wait(self, parent: str, kind: str, t0: float, t1: float, links: Sequence[str] = ()) -> None:
        self.span(
            self.sid(), parent, f"{sc.WAIT_SPAN} {kind}", t0, t1, {sc.WAIT_KIND: kind}, links=links
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
                trace_id=self.trace_id,
                span_id=self.sid(),
                parent_span_id=parent,
                name=f"{sc.OP_CHAT} {model}",
                kind=KIND_CLIENT,
                start_ns=_ns(t),
                end_ns=_ns(t + dur),
                raw_attributes=attrs,
                events=[(sc.FIRST_TOKEN_EVENT, _ns(t + ttft), None)],
                status_code=STATUS_ERROR if error else 0,
                status_message=error,
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
        self.span(self.sid(), parent, f"{sc.OP_TOOL} {name}", t, t + dur, attrs)
        return t + dur

    def agent(
        self,
        role: str,
        parent: str,
        t_ready: float,
        t_start: float,
        tier: str,
        calls: int,
        tools_per_call: int,
        index: int,
        links: Sequence[str] = (),
        waits: bool = True,
        dep: tuple[str, float] | None = None,
    ) -> tuple[str, float, bool]:
        """One agent: its calls and tools; returns (span id, end time, tests failed)."""
        rng = self.rng
        sid = self.sid()
        t = t0 = t_ready
        if dep is not None:  # waits for another subtask, linked to it
            self.wait(sid, sc.WAIT_DEPENDENCY, t_ready, dep[1], links=[dep[0]])
            t_ready = dep[1]
        if waits and t_start > t_ready:
            self.wait(sid, sc.WAIT_QUEUE, t_ready, t_start)
        t = max(t, t_start)
        failed = False
        for c in range(calls):
            t = self.chat(sid, tier, t, rng.randint(2_000, 30_000), rng.randint(50, 1_500))
            for k in range(tools_per_call):
                last = c == calls - 1 and k == tools_per_call - 1
                if last and role != "planner":
                    failed = rng.random() < 0.2
                    t = self.tool(
                        sid,
                        "run_tests",
                        t,
                        rng.uniform(2.0, 8.0),
                        **{
                            sc.TESTS_PASSED: rng.randint(5, 200),
                            sc.TESTS_FAILED: rng.randint(1, 5) if failed else 0,
                        },
                    )
                else:
                    t = self.tool(sid, rng.choice(_TOOLS), t, rng.uniform(0.005, 0.3))
        if waits and role != "planner":
            t1 = t + rng.uniform(0.05, 0.8)
            self.wait(sid, sc.WAIT_MERGE, t, t1)
            t = t1
        t += 0.002
        self.span(
            sid,
            parent,
            f"{sc.OP_AGENT} {role}",
            t0,
            t,
            {
                sc.OPERATION: sc.OP_AGENT,
                sc.AGENT_NAME: role,
                sc.AGENT_ID: f"{role}-{index}",
                sc.SUBTASK_ID: f"t{index}",
                sc.ROLE: role,
            },
            links=links,
        )
        return sid, t, failed


def write_synthetic_trace(
    path: Path,
    *,
    agents: int = 50,
    calls_per_agent: int = 10,
    tools_per_call: int = 1,
    seed: int = 0,
    waits: bool = True,
    max_agents: int = 16,
    run_id: str | None = None,
) -> int:
    """Write a realistic trace of a whole swarm run to `path`; return the span count."""
    rng = random.Random(seed)
    trace_id = f"{rng.getrandbits(128):032x}"
    run_id = run_id or f"synthetic-{seed}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        out = _Out(fh, run_id)
        s = _Synth(out, rng, trace_id)
        root = s.sid()
        _, t_plan, _ = s.agent(
            "planner",
            root,
            0.01,
            0.01,
            "reasoning",
            max(1, min(3, calls_per_agent)),
            tools_per_call,
            0,
        )
        slots = [t_plan] * max(1, max_agents)
        ends: list[tuple[str, float]] = []
        end = t_plan
        for i in range(1, agents + 1):
            ready = t_plan + rng.uniform(0.0, 0.05)
            dep = None
            if ends and rng.random() < 0.1:  # a subtask that waits for an earlier one
                dep = ends[rng.randrange(max(0, len(ends) - 20), len(ends))]
            slot = heapq.heappop(slots)
            start = max(ready, slot, dep[1] if dep else 0.0)
            sid, t_end, failed = s.agent(
                "coder",
                root,
                ready,
                start,
                "speed",
                calls_per_agent,
                tools_per_call,
                i,
                (),
                waits,
                dep,
            )
            if failed:
                f_start = t_end + rng.uniform(0.01, 0.1)
                _, t_end, _ = s.agent(
                    "fixer",
                    root,
                    f_start,
                    f_start,
                    "speed",
                    max(1, calls_per_agent // 3),
                    tools_per_call,
                    i,
                    [sid],
                    waits,
                )
            heapq.heappush(slots, t_end)
            ends.append((sid, t_end))
            end = max(end, t_end)
        s.span(
            root,
            None,
            f"{sc.OP_WORKFLOW} swarm",
            0.0,
            end + 0.05,
            {sc.OPERATION: sc.OP_WORKFLOW, sc.WORKFLOW_NAME: "swarm", sc.RUN_ID: run_id},
        )
        out.flush()
        return out.count


# -- small traces with known answers -------------------------------------------------


@dataclass
class SpanSpec:
    """One span of a hand-built trace; times in seconds from the run start."""

    name: str
    start: float
    end: float
    parent: int | None = None
    """Index of the parent in the spec list (None for the root)."""
    attrs: dict[str, Any] = field(default_factory=dict)
    links: list[int] = field(default_factory=list)
    """Indices of spans this one depends on."""
    ttft: float | None = None
    """For chat spans: time to first token (adds the attribute and the event)."""
    kind: int = KIND_INTERNAL


@dataclass
class KnownTrace:
    """A hand-built trace and the answers an analysis should give for it."""

    path: Path
    specs: list[SpanSpec]
    wall_s: float
    critical: list[str]
    """Span ids (hex) of the critical-path steps, in time order."""
    ledger: dict[str, float]
    """Expected whole-run ledger (seconds per category; zeros omitted)."""


def span_id(index: int) -> str:
    """The span id `write_spans` gives the spec at `index`."""
    return f"{index + 1:016x}"


def write_spans(path: Path, specs: Sequence[SpanSpec], run_id: str = "known") -> int:
    """Write hand-built spans as an OTLP JSON Lines trace."""
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    ids = [span_id(i) for i in range(len(specs))]
    with path.open("w", encoding="utf-8") as fh:
        out = _Out(fh, run_id)
        for i, sp in enumerate(specs):
            attrs = dict(sp.attrs)
            events: list[tuple[str, int, Mapping[str, Any] | None]] = []
            if sp.ttft is not None:
                attrs[sc.TIME_TO_FIRST_CHUNK] = sp.ttft
                events.append((sc.FIRST_TOKEN_EVENT, _ns(sp.start + sp.ttft), None))
            out.add(
                encode_span(
                    trace_id=trace_id,
                    span_id=ids[i],
                    parent_span_id=None if sp.parent is None else ids[sp.parent],
                    name=sp.name,
                    kind=sp.kind,
                    start_ns=_ns(sp.start),
                    end_ns=_ns(sp.end),
                    attributes=attrs,
                    events=events,
                    links=[
                        (trace_id, ids[j], {sc.LINK_TYPE: sc.LINK_DEPENDS_ON}) for j in sp.links
                    ],
                )
            )
        out.flush()
        return out.count


def _chat(
    parent: int,
    t0: float,
    t1: float,
    ttft: float,
    tier: str = "speed",
    model: str = "llama-3.3-70b",
    provider: str = "groq",
    inp: int = 1000,
    outp: int = 100,
    cost: float = 0.001,
) -> SpanSpec:
    return SpanSpec(
        f"chat {model}",
        t0,
        t1,
        parent,
        ttft=ttft,
        kind=KIND_CLIENT,
        attrs={
            sc.OPERATION: sc.OP_CHAT,
            sc.PROVIDER: provider,
            sc.REQUEST_MODEL: model,
            sc.TIER: tier,
            sc.INPUT_TOKENS: inp,
            sc.OUTPUT_TOKENS: outp,
            sc.COST_USD: cost,
        },
    )


def _agent(
    role: str,
    parent: int,
    t0: float,
    t1: float,
    links: list[int] | None = None,
) -> SpanSpec:
    return SpanSpec(
        f"invoke_agent {role}",
        t0,
        t1,
        parent,
        links=links or [],
        attrs={sc.OPERATION: sc.OP_AGENT, sc.AGENT_NAME: role},
    )


def _tool(name: str, parent: int, t0: float, t1: float) -> SpanSpec:
    return SpanSpec(
        f"execute_tool {name}", t0, t1, parent, attrs={sc.OPERATION: sc.OP_TOOL, sc.TOOL_NAME: name}
    )


def build_chain(
    path: Path,
    *,
    steps: int = 3,
    chat_s: float = 2.0,
    ttft_s: float = 0.5,
    tool_s: float = 1.0,
    output_tokens: int = 100,
    input_tokens: int = 1000,
) -> KnownTrace:
    """One agent doing `steps` × (chat then tool) back to back: everything is critical."""
    wall = steps * (chat_s + tool_s)
    specs = [
        SpanSpec("invoke_workflow swarm", 0.0, wall, None, attrs={sc.OPERATION: sc.OP_WORKFLOW}),
        _agent("coder", 0, 0.0, wall),
    ]
    t = 0.0
    for _ in range(steps):
        specs.append(_chat(1, t, t + chat_s, ttft_s, inp=input_tokens, outp=output_tokens))
        specs.append(_tool("run_tests", 1, t + chat_s, t + chat_s + tool_s))
        t += chat_s + tool_s
    write_spans(path, specs)
    names = [span_id(i) for i in range(2, len(specs))]
    ledger = {"ttft": steps * ttft_s, "decode": steps * (chat_s - ttft_s), "tests": steps * tool_s}
    return KnownTrace(path, specs, wall, names, ledger)


def build_fanout(
    path: Path, *, durations: Sequence[float] = (4.0, 6.0, 5.0), links: bool = True
) -> KnownTrace:
    """A planner call (2 s), then coders in parallel for `durations`, then a fixer that
    depends on the *first* coder although the longest coder finished later.

    With `depends_on` links the critical path is planner → coder 0 → fixer; without them,
    timing alone points at the coder that finished last before the fixer started."""
    plan_end = 2.0
    fix_start = plan_end + max(durations) + 0.5
    fix_end = fix_start + 3.0
    specs = [
        SpanSpec("invoke_workflow swarm", 0.0, fix_end, None, attrs={sc.OPERATION: sc.OP_WORKFLOW}),
        _agent("planner", 0, 0.0, plan_end),
    ]
    specs.append(
        _chat(1, 0.0, plan_end, 1.0, tier="reasoning", model="kimi-k2.6", provider="moonshot")
    )
    coder_idx = []
    for d in durations:
        coder_idx.append(len(specs))
        specs.append(_agent("coder", 0, plan_end, plan_end + d))
        specs.append(_chat(len(specs) - 1, plan_end, plan_end + d, 0.5))
    fixer = len(specs)
    specs.append(_agent("fixer", 0, fix_start, fix_end, links=[coder_idx[0]] if links else None))
    specs.append(_chat(fixer, fix_start, fix_end, 0.5))
    write_spans(path, specs)
    longest = max(range(len(durations)), key=lambda k: durations[k])
    coder = coder_idx[0 if links else longest]
    critical = [span_id(2), span_id(coder + 1), span_id(fixer + 1)]
    ledger = {"ttft": 2.0, "decode": 1.0 + max(durations) - 0.5 + 2.5, "orchestration": 0.5}
    return KnownTrace(path, specs, fix_end, critical, ledger)
