"""Shared fixtures. swarm's pytest plugin (a `pytest11` entry point, turned on by
`swarm_block_network = true` in pyproject.toml) blocks every non-loopback connection, so
no test can reach a real provider."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._analysis.loader import load_trace
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._tracing.setup import use_tracer
from tests.mounts import release_all

if TYPE_CHECKING:
    from swarm._cluster.local import LocalCluster


@pytest.fixture(autouse=True)
def _nothing_left_mounted(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test leaves no filesystem mounted under its `tmp_path` (a worktree swarm did not
    remove): it fails at teardown, and what it left is unmounted."""
    yield
    where = request.node.funcargs.get("tmp_path")
    if isinstance(where, Path) and (left := release_all(where)):
        pytest.fail(f"left mounted (now unmounted): {', '.join(map(str, left))}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Before pytest removes old sessions' directories (it keeps the last 3), unmount what
    a killed session left mounted in them: removing a mount point fails (EBUSY), and with
    warnings as errors that fails the run. Only the controller, once the workers are done."""
    if hasattr(session.config, "workerinput"):
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or factory._basetemp is None or session.config.option.basetemp:
        return
    base = factory._basetemp.resolve()
    for old in base.parent.iterdir():
        if old != base and (old.name.startswith("garbage-") or _older_session(old, base)):
            release_all(old)


def _older_session(path: Path, current: Path) -> bool:
    """Whether `path` is a `pytest-<n>` directory of a session before `current`'s whose
    lock is gone (pytest removes those once they are 3 behind)."""
    number, now = path.name.removeprefix("pytest-"), current.name.removeprefix("pytest-")
    return (
        number.isdigit()
        and now.isdigit()
        and int(number) < int(now)
        and not (path / ".lock").exists()
    )


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


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A two-node local Ray cluster on 127.0.0.1, started once for the session, this
    process connected to it: `head` (2 CPUs) and `second` (2 CPUs), with distinct custom
    resources. Skips the test when ray is not installed."""
    ray = pytest.importorskip("ray")
    from swarm._cluster.local import NodeSpec, local_cluster, wait_for_nodes

    nodes = [NodeSpec(2, {"head": 4}), NodeSpec(2, {"second": 4})]
    with local_cluster(nodes, tmp_path_factory.mktemp("ray")) as running:
        ray.init(address=running.address, logging_level=logging.ERROR, log_to_driver=False)
        try:
            wait_for_nodes(ray, 2)
            yield running
        finally:
            ray.shutdown()
