"""Tracing: OpenTelemetry setup for a run, span names and attributes, trace files.

`semconv` holds every span name and attribute key; `setup` the run's tracer provider, the
JSONL writer and optional OTLP export; `otlp_json` the OTLP JSON encoding of a span.
"""

from swarm._tracing.setup import (
    GenAIMetricsProcessor,
    JsonlSpanProcessor,
    RunTrace,
    current_run,
    run_tracing,
    span_clock,
    tracer,
    use_tracer,
)

__all__ = [
    "GenAIMetricsProcessor",
    "JsonlSpanProcessor",
    "RunTrace",
    "current_run",
    "run_tracing",
    "span_clock",
    "tracer",
    "use_tracer",
]
