"""How big each model request was, step by step, and what compaction saved.

Steps are counted per agent: an agent's k-th successful `chat` span is its step k
(failed attempts and summary calls, children of a `swarm.compaction` span, are not). Per
step the figures are the largest and the mean request (`gen_ai.usage.input_tokens`) over
the agents that got that far. Each compaction span says how many tokens its request held
before and after; every later call of the same agent carried that many fewer, so the
input tokens saved are the tokens removed times the calls that followed (the
counterfactual run that kept them all).
"""

from __future__ import annotations

from typing import Any

from swarm._analysis.model import Trace
from swarm._tracing import semconv as sc

__all__ = ["context_summary"]


def _agent_span(tr: Trace, i: int, memo: dict[int, int]) -> int:
    """Index of the nearest enclosing `invoke_agent` span (-1 outside any agent)."""
    path = []
    j = i
    while j >= 0 and j not in memo and tr.op[j] != sc.OP_AGENT:
        path.append(j)
        j = tr.parent[j]
    found = memo.get(j, j) if j >= 0 else -1
    for k in path:
        memo[k] = found
    return found


def _steps(tr: Trace) -> tuple[dict[int, list[int]], list[int], dict[int, int]]:
    """(chat span indices per agent span in start order, compaction spans, agent memo)."""
    by_agent: dict[int, list[int]] = {}
    compactions: list[int] = []
    memo: dict[int, int] = {}
    for i in range(len(tr)):
        if tr.name[i].startswith(sc.COMPACTION_SPAN):
            compactions.append(i)
        elif tr.op[i] == sc.OP_CHAT and not tr.error[i]:  # failed attempts are not steps
            parent = tr.parent[i]
            if parent >= 0 and tr.name[parent].startswith(sc.COMPACTION_SPAN):
                continue  # a summary call, not a step
            by_agent.setdefault(_agent_span(tr, i, memo), []).append(i)
    for calls in by_agent.values():
        calls.sort(key=lambda i: tr.start[i])
    return by_agent, compactions, memo


def _per_step(tr: Trace, by_agent: dict[int, list[int]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    longest = max((len(c) for c in by_agent.values()), default=0)
    for k in range(longest):
        sizes = [tr.input_tokens[c[k]] for c in by_agent.values() if len(c) > k]
        rows.append(
            {
                "step": k + 1,
                "agents": len(sizes),
                "max_input_tokens": max(sizes),
                "mean_input_tokens": round(sum(sizes) / len(sizes)),
            }
        )
    return rows


def context_summary(tr: Trace) -> dict[str, Any]:
    """Input tokens per step, the peak request, and compactions with what they saved."""
    by_agent, compactions, memo = _steps(tr)
    later = {a: [tr.start[i] for i in calls] for a, calls in by_agent.items()}
    strategies: dict[str, int] = {}
    triggers: dict[str, int] = {}
    removed = saved = 0
    for i in compactions:
        attrs = tr.attributes(i)
        before = int(attrs.get(sc.COMPACTION_TOKENS_BEFORE, 0))
        after = int(attrs.get(sc.COMPACTION_TOKENS_AFTER, before))
        name = str(attrs.get(sc.COMPACTION_STRATEGY, "?"))
        strategies[name] = strategies.get(name, 0) + 1
        trigger = str(attrs.get(sc.COMPACTION_TRIGGER, "?"))
        triggers[trigger] = triggers.get(trigger, 0) + 1
        cut = max(0, before - after)
        removed += cut
        starts = later.get(_agent_span(tr, i, memo), [])
        saved += cut * sum(1 for s in starts if s > tr.start[i])
    peak, peak_agent, peak_step = 0, -1, 0
    for agent, calls in by_agent.items():
        for k, i in enumerate(calls):
            if tr.input_tokens[i] > peak:
                peak, peak_agent, peak_step = tr.input_tokens[i], agent, k + 1
    peak_at = None
    if peak_step:  # name the agent by its id (`coder-7`), read for this one span
        a = peak_agent
        label = str(tr.attributes(a).get(sc.AGENT_ID, tr.role[a])) if a >= 0 else "-"
        peak_at = {"agent": label, "step": peak_step}
    sent = sum(tr.input_tokens[i] for calls in by_agent.values() for i in calls)
    return {
        "input_tokens": sent,
        "peak_request_tokens": peak,
        "peak_at": peak_at,
        "input_tokens_by_step": _per_step(tr, by_agent),
        "compactions": len(compactions),
        "compactions_by_strategy": strategies,
        "compactions_by_trigger": triggers,
        "tokens_removed": removed,
        "input_tokens_saved": saved,
        "input_tokens_without_compaction": sent + saved,
    }
