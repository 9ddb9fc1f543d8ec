"""Hand a trace to other tools: Chrome trace-event JSON (Perfetto, chrome://tracing) and
replay into any OTLP/HTTP endpoint as protobuf (Jaeger, Phoenix, Tempo, a collector)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx

from swarm.analysis.model import Trace
from swarm.tracing import semconv as sc

__all__ = ["export_chrome", "otlp_requests", "send_otlp"]

_RETRY_STATUS = {429, 502, 503, 504}


def _agent_of(tr: Trace, i: int) -> int:
    j = i
    while j >= 0 and tr.op[j] != sc.OP_AGENT:
        j = tr.parent[j]
    return j


def export_chrome(trace: Trace) -> dict[str, Any]:
    """Chrome trace-event JSON: one lane (thread) per agent, times in microseconds."""
    tr = trace
    t0 = tr.start_ns
    events: list[dict[str, Any]] = []
    lanes: dict[int, int] = {}
    lane_cache: dict[int, int] = {}
    for i in range(len(tr)):
        p = tr.parent[i]
        agent = lane_cache.get(p) if p >= 0 else None
        if agent is None:
            agent = _agent_of(tr, i)
            if p >= 0:
                lane_cache[p] = agent if tr.op[i] != sc.OP_AGENT else _agent_of(tr, p)
        tid = lanes.setdefault(agent, len(lanes))
        ts = (tr.start[i] - t0) / 1e3
        args: dict[str, Any] = {"span_id": tr.span_id[i], "role": tr.role[i]}
        if tr.op[i] == sc.OP_CHAT:
            args.update(_chat_args(tr, i))
            if tr.ttft[i] >= 0:
                first = ts + tr.ttft[i] * 1e6
                events.append(
                    {
                        "name": sc.FIRST_TOKEN_EVENT,
                        "ph": "i",
                        "s": "t",
                        "pid": 1,
                        "tid": tid,
                        "ts": first,
                    }
                )
        if tr.error[i]:
            args["error"] = tr.error[i]
        events.append(
            {
                "name": tr.name[i],
                "cat": tr.op[i],
                "ph": "X",
                "ts": ts,
                "dur": (tr.end[i] - tr.start[i]) / 1e3,
                "pid": 1,
                "tid": tid,
                "args": args,
            }
        )
    for agent, tid in lanes.items():
        label = f"{tr.name[agent]} [{tr.span_id[agent][-6:]}]" if agent >= 0 else "swarm"
        events.append(
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": label}}
        )
    events.append(
        {
            "name": "process_name",
            "ph": "M",
            "pid": 1,
            "tid": 0,
            "args": {"name": f"swarm run {tr.run_id}"},
        }
    )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _chat_args(tr: Trace, i: int) -> dict[str, Any]:
    return {
        "provider": tr.provider[i],
        "model": tr.model[i],
        "tier": tr.tier[i],
        "input_tokens": tr.input_tokens[i],
        "output_tokens": tr.output_tokens[i],
        "cost_usd": tr.cost[i],
    }


def _ids_to_base64(doc: dict[str, Any]) -> None:
    """The file holds hex ids (OTLP/JSON); protobuf's JSON mapping wants base64 bytes."""

    def b64(h: str) -> str:
        return base64.b64encode(bytes.fromhex(h)).decode()

    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if sp.get(key):
                        sp[key] = b64(sp[key])
                for ln in sp.get("links", []):
                    ln["traceId"], ln["spanId"] = b64(ln["traceId"]), b64(ln["spanId"])


def otlp_requests(path: Path) -> Iterator[tuple[bytes, int]]:
    """Each line of a trace file as a serialized `ExportTraceServiceRequest` + span count."""
    from google.protobuf.json_format import ParseDict  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    with path.open("rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            doc = json.loads(line)
            _ids_to_base64(doc)
            msg = ParseDict(
                {"resourceSpans": doc.get("resourceSpans", [])},
                ExportTraceServiceRequest(),
                ignore_unknown_fields=True,
            )
            n = sum(len(ss.spans) for rs in msg.resource_spans for ss in rs.scope_spans)
            yield msg.SerializeToString(), n


async def send_otlp(
    path: Path | str,
    url: str,
    *,
    max_attempts: int = 8,
    backoff_s: float = 0.5,
    timeout_s: float = 30.0,
) -> int:
    """Replay a saved trace into an OTLP/HTTP endpoint (`…/v1/traces` is appended when
    missing) as protobuf; back off and retry on 429/503. Returns the spans sent."""
    url = url.rstrip("/")
    if not url.endswith("/v1/traces"):
        url += "/v1/traces"
    sent = 0
    headers = {"Content-Type": "application/x-protobuf"}
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        for body, n in otlp_requests(Path(path)):
            for attempt in range(max_attempts):
                resp = await client.post(url, content=body, headers=headers)
                if resp.status_code not in _RETRY_STATUS:
                    resp.raise_for_status()
                    break
                if attempt == max_attempts - 1:
                    resp.raise_for_status()
                delay = backoff_s * 2**attempt
                retry_after = resp.headers.get("retry-after", "")
                if retry_after.replace(".", "", 1).isdigit():
                    delay = min(float(retry_after), 60.0)
                await anyio.sleep(delay)
            sent += n
    return sent
