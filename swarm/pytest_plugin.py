"""swarm's pytest plugin: tests that cannot reach a real provider.

Installed with swarm (a `pytest11` entry point), it changes nothing until asked. Turn it
on for a whole suite with `swarm_block_network = true` under `[tool.pytest.ini_options]`
(or `--swarm-block-network`): every test then runs inside `swarm.testing.block_network()`,
and one that would reach a real provider fails with `swarm.testing.NetworkBlocked`.
A single test can ask for it instead with the `swarm_network_blocked` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swarm import testing

__all__ = ["pytest_addoption", "swarm_network_blocked"]

_INI = "swarm_block_network"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        _INI, "run every test with non-loopback network blocked (swarm)", type="bool", default=False
    )
    parser.addoption(
        "--swarm-block-network",
        action="store_true",
        help="run every test with non-loopback network blocked (swarm)",
    )


@pytest.fixture
def swarm_network_blocked() -> Iterator[None]:
    """Fail any DNS lookup or connection that is not to loopback (or a Unix socket)."""
    with testing.block_network():
        yield


@pytest.fixture(autouse=True)
def _swarm_block_network(request: pytest.FixtureRequest) -> Iterator[None]:
    config = request.config
    if config.getini(_INI) or config.getoption("--swarm-block-network"):
        with testing.block_network():
            yield
    else:
        yield
