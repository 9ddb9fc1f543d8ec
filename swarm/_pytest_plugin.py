"""The pytest plugin: every test runs inside `swarm.testing.block_network()`.

Load it with `pytest_plugins = ["swarm._pytest_plugin"]` in a `conftest.py`; a test that
would reach a real provider then fails with `swarm.testing.NetworkBlocked`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swarm import testing

__all__ = ["block_network"]


@pytest.fixture(autouse=True)
def block_network() -> Iterator[None]:
    """Fail any DNS lookup or connection that is not to loopback (or a Unix socket)."""
    with testing.block_network():
        yield
