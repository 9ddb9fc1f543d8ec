"""Shared fixtures. swarm's pytest plugin (loaded below) blocks every non-loopback
connection, so no test can reach a real provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm.tracing.setup import use_tracer

pytest_plugins = ["swarm._pytest_plugin"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span swarm makes during the test, kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with use_tracer(provider):
        yield exporter
