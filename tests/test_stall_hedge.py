"""Hangs and stalls on the only provider are raced by further calls to it, from its own
first-token and inter-token profile, instead of waiting out the stall timeout; only the
winner's tokens are counted, and the hedge is on the trace."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._routing.router import Router
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm._tracing import semconv as sc
from swarm.config import Faults
from swarm.messages import ChatRequest, ChatResult, Message, Timing, Usage
from swarm.model import FirstTokenCallback, PieceSink
from swarm.providers._progress import tell_progress
from tests.test_routing import config, req, waits


class Streams:
    """A scripted streaming Provider: each call streams `pieces` token reads 10 ms apart;
    the calls listed in `silent_after` go silent (until cancelled) after that many reads
    (0: before the first token), and `resume_s` ends the silence early."""

    kind = "openai"
    address = ""

    def __init__(self, silent_after: dict[int, int], pieces: int = 5, resume_s: float = 0) -> None:
        self.name = "a"
        self.silent_after = silent_after
        self.pieces = pieces
        self.resume_s = resume_s
        self.calls = 0
        self.cancelled: list[int] = []

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        on_first_token: FirstTokenCallback | None = None,
        on_delta: PieceSink | None = None,
    ) -> ChatResult:
        n = self.calls = self.calls + 1
        try:
            for piece in range(self.pieces):
                if self.silent_after.get(n) == piece:
                    await anyio.sleep(self.resume_s or 3600)
                await anyio.sleep(0.01)
                if piece == 0 and on_first_token is not None:
                    on_first_token()
                tell_progress()
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(n)
            raise
        return ChatResult(
            message=Message.assistant(f"call {n}"),
            usage=Usage(input_tokens=1000, output_tokens=100 * n),
            timing=Timing(ttft_s=0.01, duration_s=0.01 * self.pieces),
            model=model,
        )

    async def aclose(self) -> None:
        return None


HEDGING = "hedge_after_s = 0.2\nstall_hedge_min_s = 0.2"


async def test_a_stalled_stream_is_raced_and_only_the_winner_counts(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    a = Streams({1: 3})  # the first call stalls after three token reads, for an hour
    router = Router(config(tmp_path, ["a/m"], HEDGING, hedge=True), providers={"a": a})
    with anyio.fail_after(5):  # not the hour, nor the 30 s stall timeout
        result = await router.chat(req())
    assert result.text == "call 2" and result.attempts == 2
    assert a.cancelled == [1]
    # the stalled stream's tokens are not counted: only the winner's usage is spent
    assert result.usage.output_tokens == 200
    assert router.budget.spent.tokens == 1200
    [hedge] = waits(spans, "hedge")
    assert (hedge.attributes or {})[sc.HEDGE_REASON] == sc.HEDGE_STALL
    assert (hedge.attributes or {})[sc.HEDGE_WINNER] == "a/m"


async def test_a_stream_resuming_before_the_backup_wins(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    # the first call is silent for 0.25 s after a read: the backup starts at 0.2 s, and the
    # first call's next token (at 0.26 s) comes before the backup's second hang ends
    a = Streams({1: 2, 2: 0}, resume_s=0.25)
    router = Router(config(tmp_path, ["a/m"], HEDGING, hedge=True), providers={"a": a})
    with anyio.fail_after(5):
        result = await router.chat(req())
    assert result.text == "call 1" and a.cancelled == [2]
    [hedge] = waits(spans, "hedge")
    assert (hedge.attributes or {})[sc.HEDGE_REASON] == sc.HEDGE_STALL


async def test_hangs_are_hedged_again_until_one_answers(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    a = Streams({1: 0, 2: 0, 3: 0})  # three calls in a row never send a first token
    router = Router(config(tmp_path, ["a/m"], HEDGING, hedge=True), providers={"a": a})
    with anyio.fail_after(5):
        result = await router.chat(req())
    assert result.text == "call 4" and result.attempts == 4
    assert sorted(a.cancelled) == [1, 2, 3]
    [hedge] = waits(spans, "hedge")  # one contention, however many backups it took
    assert (hedge.attributes or {})[sc.HEDGE_REASON] == sc.HEDGE_FIRST_TOKEN


async def test_hedges_per_call_are_bounded(tmp_path: Path) -> None:
    a = Streams(dict.fromkeys(range(1, 100), 0), resume_s=1.0)  # every call hangs 1 s
    cfg = config(tmp_path, ["a/m"], HEDGING + "\nhedge_most = 2", hedge=True)
    router = Router(cfg, providers={"a": a})
    with anyio.fail_after(5):
        await router.chat(req())
    assert a.calls == 3  # the primary and two backups, not one per hedge delay


BASE = SimSpec(agents=50, steps=500, tool_s=0.5, check_s=1.0, virtual=True, traces_dir=None)


# at 30 %, 2.08x: the planner's one long call stalls once (5.4 s of a 15.8 s run), and
# nothing can save the tokens a stall threw away
@pytest.mark.parametrize(("rate", "most"), [(0.05, 1.5), (0.3, 2.5)])
def test_stalls_on_the_only_provider_cost_little(rate: float, most: float) -> None:
    clean = run_simulation(BASE)
    out = run_simulation(replace(BASE, faults=Faults(stall_rate=rate)))
    assert out["merged"] == 50
    # each stall waited the 30 s stall timeout before (7.7x / 28x on the 100-agent matrix)
    assert out["wall_s"] <= most * clean["wall_s"]
