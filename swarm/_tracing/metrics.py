"""GenAI client metrics, derived from finished `chat` spans (when a metrics exporter is set).

`gen_ai.client.operation.duration`, `gen_ai.client.token.usage` and
`gen_ai.client.operation.time_to_first_chunk`, with the bucket boundaries the GenAI
conventions advise; code that makes spans need not also record metrics.
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from swarm._tracing import semconv as sc

__all__ = ["GenAIMetricsProcessor", "meter_provider"]

_DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


class GenAIMetricsProcessor(SpanProcessor):
    """Derives the GenAI client metrics from finished `chat` spans, so code that makes
    spans need not also record metrics: `gen_ai.client.operation.duration`,
    `gen_ai.client.token.usage` and `gen_ai.client.operation.time_to_first_chunk`."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        meter = meter_provider.get_meter("swarm")
        self._duration = meter.create_histogram(
            sc.METRIC_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._tokens = meter.create_histogram(
            sc.METRIC_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self._ttft = meter.create_histogram(
            sc.METRIC_TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk of a streamed response",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )

    def on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        if attrs.get(sc.OPERATION) != sc.OP_CHAT or not span.end_time or not span.start_time:
            return
        if attrs.get(sc.HEDGE_OUTCOME) == sc.HEDGE_LOST:
            return  # a race's cancelled loser: neither a completed operation nor an error
        labels: dict[str, Any] = {
            k: attrs[k]
            for k in (sc.OPERATION, sc.PROVIDER, sc.REQUEST_MODEL, sc.TIER, sc.ERROR_TYPE)
            if k in attrs
        }
        self._duration.record((span.end_time - span.start_time) / 1e9, labels)
        for key, kind in ((sc.INPUT_TOKENS, "input"), (sc.OUTPUT_TOKENS, "output")):
            value = attrs.get(key)
            if isinstance(value, int):
                self._tokens.record(value, {**labels, sc.TOKEN_TYPE: kind})
        ttft = attrs.get(sc.TIME_TO_FIRST_CHUNK, attrs.get(sc.TTFT_S))
        if isinstance(ttft, (int, float)):
            self._ttft.record(float(ttft), labels)


def meter_provider(resource: Resource, reader: MetricReader | None) -> MeterProvider | None:
    if reader is None and os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    return None if reader is None else MeterProvider(resource=resource, metric_readers=[reader])
