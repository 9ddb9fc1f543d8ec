"""swarm's pytest plugin: tests that cannot reach a real provider.

Load it in a `conftest.py` with `pytest_plugins = ["swarm.pytest_plugin"]` (or run pytest
with `-p swarm.pytest_plugin`): every test then runs inside
`swarm.testing.block_network()`, and one that would reach a real provider fails with
`swarm.testing.NetworkBlocked`.

It is not registered as a `pytest11` entry point on purpose: that would load swarm into
every pytest run of the environment swarm is installed in, the checks swarm runs in a
repository's sandbox included (where, installed in development mode, swarm's own source
is not visible, and every check failed to start).
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
