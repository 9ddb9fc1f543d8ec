"""A hedged race's cancelled loser is not an error anywhere a user reads error rates: the
trace summary, the scorecard and the OTLP replay (Phoenix); a real error of an arm is."""

from __future__ import annotations

from pathlib import Path

import anyio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from swarm._analysis import load_trace, summarize
from swarm._analysis.export import otlp_requests
from swarm._analysis.scorecard import scorecard
from swarm._routing.router import Router
from swarm._tracing import semconv as sc
from swarm._tracing.setup import run_tracing, tracer
from swarm.errors import ProviderError
from tests.test_routing import Fake, config, req

_STATUS_ERROR = 2


def _race_trace(tmp_path: Path, a: Fake) -> Path:
    """One hedged call (`a` primary, a fast `b` as backup) recorded as a run's trace."""
    cfg = config(tmp_path, ["a/m", "b/m"], "hedge_after_s = 0.02\nhedge_most = 1", hedge=True)
    router = Router(cfg, providers={"a": a, "b": Fake("b", default=(0.01, 0.0))})

    async def run() -> None:
        with anyio.fail_after(10):
            await router.chat(req(), role="coder")

    with run_tracing("hedged", traces_dir=tmp_path):
        with tracer().start_as_current_span(
            "invoke_workflow swarm", attributes={sc.OPERATION: sc.OP_WORKFLOW}
        ):
            anyio.run(run)
    return tmp_path / "hedged.jsonl"


def _replayed_statuses(path: Path) -> dict[str, int]:
    """Each chat span's status code as the OTLP replay (to Phoenix) sends it, by provider."""
    out: dict[str, int] = {}
    for body, _ in otlp_requests(path):
        msg = ExportTraceServiceRequest.FromString(body)
        for rs in msg.resource_spans:
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    attrs = {kv.key: kv.value.string_value for kv in sp.attributes}
                    if sp.name.startswith("chat "):
                        out[attrs[sc.PROVIDER]] = sp.status.code
    return out


def test_a_lost_arm_is_no_error_in_summary_scorecard_or_replay(tmp_path: Path) -> None:
    path = _race_trace(tmp_path, Fake("a", default=(30.0, 0.0)))
    tr = load_trace(path)
    summary = summarize(tr)
    assert summary["totals"]["calls"] == 2
    assert summary["totals"]["errors"] == 0
    assert summary["by_provider"]["a"]["errors"] == 0
    card = scorecard(tr)
    assert card["by_candidate"]["a/m"]["error_rate"] == 0.0
    assert card["total"]["error_rate"] == 0.0
    lost = [i for i in range(len(tr)) if tr.provider[i] == "a"]
    assert [tr.attributes(i).get(sc.HEDGE_OUTCOME) for i in lost] == [sc.HEDGE_LOST]
    assert _replayed_statuses(path) == {"a": 0, "b": 0}


def test_a_failed_call_is_still_an_error(tmp_path: Path) -> None:
    reset = ProviderError("reset", kind="connect", retryable=False)
    path = _race_trace(tmp_path, Fake("a", steps=[reset]))
    tr = load_trace(path)
    assert summarize(tr)["by_provider"]["a"]["errors"] == 1
    assert scorecard(tr)["by_candidate"]["a/m"]["error_rate"] == 1.0
    assert _replayed_statuses(path)["a"] == _STATUS_ERROR
