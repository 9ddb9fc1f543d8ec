"""Small hand-built traces whose answers are known, for tests of the analyses.

`write_spans` writes a list of `SpanSpec`s; `build_chain` and `build_fanout` build the
classic shapes and return a `KnownTrace` with the critical path and ledger to expect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swarm._analysis.spanfile import SpanLines, at_ns
from swarm._tracing import semconv as sc
from swarm._tracing.otlp_json import KIND_CLIENT, KIND_INTERNAL, OtlpSpan, encode_span

__all__ = [
    "ChainSpec",
    "KnownTrace",
    "SpanSpec",
    "build_chain",
    "build_fanout",
    "span_id",
    "write_spans",
]


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
        out = SpanLines(fh, run_id)
        for i, sp in enumerate(specs):
            attrs = dict(sp.attrs)
            events: list[tuple[str, int, Mapping[str, Any] | None]] = []
            if sp.ttft is not None:
                attrs[sc.TIME_TO_FIRST_CHUNK] = sp.ttft
                events.append((sc.FIRST_TOKEN_EVENT, at_ns(sp.start + sp.ttft), None))
            out.add(
                encode_span(
                    OtlpSpan(
                        trace_id=trace_id,
                        span_id=ids[i],
                        parent_span_id=None if sp.parent is None else ids[sp.parent],
                        name=sp.name,
                        kind=sp.kind,
                        start_ns=at_ns(sp.start),
                        end_ns=at_ns(sp.end),
                        attributes=attrs,
                        events=events,
                        links=[
                            (trace_id, ids[j], {sc.LINK_TYPE: sc.LINK_DEPENDS_ON}) for j in sp.links
                        ],
                    )
                )
            )
        out.flush()
        return out.count


@dataclass(frozen=True)
class _Call:
    """What a hand-built chat span reports: which model, where, and its usage."""

    tier: str = "speed"
    model: str = "llama-3.3-70b"
    provider: str = "groq"
    inp: int = 1000
    outp: int = 100
    cost: float = 0.001


_REASONING = _Call(tier="reasoning", model="kimi-k2.6", provider="moonshot")


def _chat(parent: int, t0: float, t1: float, ttft: float, call: _Call = _Call()) -> SpanSpec:
    return SpanSpec(
        f"chat {call.model}",
        t0,
        t1,
        parent,
        ttft=ttft,
        kind=KIND_CLIENT,
        attrs={
            sc.OPERATION: sc.OP_CHAT,
            sc.PROVIDER: call.provider,
            sc.REQUEST_MODEL: call.model,
            sc.TIER: call.tier,
            sc.INPUT_TOKENS: call.inp,
            sc.OUTPUT_TOKENS: call.outp,
            sc.COST_USD: call.cost,
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


@dataclass(frozen=True)
class ChainSpec:
    """The chain `build_chain` writes: `steps` × (a chat, then a tool), back to back."""

    steps: int = 3
    chat_s: float = 2.0
    ttft_s: float = 0.5
    tool_s: float = 1.0
    output_tokens: int = 100
    input_tokens: int = 1000


def build_chain(path: Path, chain: ChainSpec | None = None, **options: Any) -> KnownTrace:
    """One agent doing `steps` × (chat then tool) back to back: everything is critical.

    `options` are `ChainSpec`'s fields as keywords (`steps=4`), applied over `chain`."""
    c = replace(chain or ChainSpec(), **options)
    steps, chat_s, ttft_s, tool_s = c.steps, c.chat_s, c.ttft_s, c.tool_s
    wall = steps * (chat_s + tool_s)
    specs = [
        SpanSpec("invoke_workflow swarm", 0.0, wall, None, attrs={sc.OPERATION: sc.OP_WORKFLOW}),
        _agent("coder", 0, 0.0, wall),
    ]
    t = 0.0
    for _ in range(steps):
        specs.append(
            _chat(1, t, t + chat_s, ttft_s, _Call(inp=c.input_tokens, outp=c.output_tokens))
        )
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
    specs.append(_chat(1, 0.0, plan_end, 1.0, _REASONING))
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
