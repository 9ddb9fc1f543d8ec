"""Shared fixtures. swarm's pytest plugin (loaded below) blocks every non-loopback
connection, so no test can reach a real provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._analysis.loader import load_trace
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._tracing.setup import use_tracer

pytest_plugins = ["swarm.pytest_plugin"]


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


@pytest.fixture(scope="session")
def huge_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A synthetic run of about 100k spans (3,300 agents) and its span count, made once
    for the viewer's browser tests."""
    path = tmp_path_factory.mktemp("browser") / "huge.jsonl"
    n = write_synthetic_trace(path, agents=3300, calls_per_agent=12, seed=11)
    load_trace(path)  # as a finished run does: writes the column cache
    return path, n
