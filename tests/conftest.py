"""Shared fixtures. `swarm.testing`'s plugin (loaded below) blocks every non-loopback
connection, so no test can reach a real provider."""

from __future__ import annotations

import pytest

pytest_plugins = ["swarm.testing"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
