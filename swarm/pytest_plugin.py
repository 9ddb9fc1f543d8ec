"""swarm's pytest plugin: tests that cannot reach a real provider.

Installed with swarm (a `pytest11` entry point named `swarm.pytest_plugin`), it changes
nothing until asked: it adds the `block_network` fixture, an ini setting and a flag, and
importing it imports neither swarm's code nor anything pytest does not already load.

Turn it on for a whole suite with `swarm_block_network = true` under
`[tool.pytest.ini_options]` (or `--swarm-block-network`): every test then runs inside
`swarm.testing.block_network()`, and one that would reach a real provider fails with
`swarm.NetworkBlocked`. A single test asks for it with the `block_network` fixture
(`@pytest.mark.usefixtures("block_network")`). A `conftest.py` that still names it
(`pytest_plugins = ["swarm.pytest_plugin"]`) finds it loaded already, under that name,
and turns it on for its suite as it did before the entry point.

Checks swarm runs with its own interpreter see swarm's package in their sandbox, so the
entry point loads there too (`swarm.run._environment.CheckEnvironment.visible_paths`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

__all__ = ["block_network"]

_INI = "swarm_block_network"
_FLAG = "--swarm-block-network"
_HELP = "run every test with non-loopback network blocked (swarm)"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The `swarm_block_network` ini setting and the `--swarm-block-network` flag."""
    parser.addini(_INI, _HELP, type="bool", default=False)
    parser.addoption(_FLAG, action="store_true", help=_HELP)


def pytest_configure(config: pytest.Config) -> None:
    """Wrap every test in `block_network` when the suite asks (the ini setting, the flag, or
    a conftest's `pytest_plugins` naming this module); otherwise add nothing to any test."""
    if config.getini(_INI) or config.getoption(_FLAG) or _named_by_a_conftest(config):
        config.pluginmanager.register(_EveryTest(), "swarm.block_network_everywhere")


@pytest.fixture
def block_network() -> Iterator[None]:
    """Fail any DNS lookup or connection that is not to loopback (or a Unix socket)."""
    from swarm import testing  # here, not at import: pytest loads this module everywhere

    with testing.block_network():
        yield


class _EveryTest:
    @pytest.fixture(autouse=True)
    def _swarm_block_network(self, block_network: None) -> None:
        """Every test inside `block_network`."""


def _named_by_a_conftest(config: pytest.Config) -> bool:
    """Whether a conftest names this plugin in `pytest_plugins`, as before the entry point
    (then it meant: block the network for the whole suite)."""
    for plugin in config.pluginmanager.get_plugins():
        named = getattr(plugin, "pytest_plugins", ())
        named = [named] if isinstance(named, str) else named
        if getattr(plugin, "__file__", "").endswith("conftest.py") and __name__ in named:
            return True
    return False
