"""The registry of provider kinds: `kind` in `[providers.NAME]` -> the factory that builds it.

Adding a kind is one module plus one line here: the module defines
`from_config(name, config, api_key) -> Provider`, and `FACTORIES` maps the kind to it.
Adapter modules are imported on first use, so `import swarm` loads no HTTP stack.

`build_providers` reads each provider's key from the environment now (config holds only
the variable's name) and refuses an unknown kind with a `ConfigError` naming the file, the
key and the known kinds.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import cast

from swarm.config import ProviderConfig, SwarmConfig, config_key
from swarm.errors import ConfigError
from swarm.model import Provider

__all__ = ["FACTORIES", "ProviderFactory", "build_provider", "build_providers", "kinds"]

ProviderFactory = Callable[[str, ProviderConfig, "str | None"], Provider]
"""Builds the provider called `name` from its config and its API key (None if unset)."""


def _adapter(module: str) -> ProviderFactory:
    """The `from_config` of `module`, imported when first called."""

    def factory(name: str, config: ProviderConfig, api_key: str | None) -> Provider:
        build = cast(ProviderFactory, importlib.import_module(module).from_config)
        return build(name, config, api_key)

    return factory


FACTORIES: Mapping[str, ProviderFactory] = {
    "anthropic": _adapter("swarm.providers._anthropic"),
    "openai": _adapter("swarm.providers._openai"),
    "sim": _adapter("swarm.providers.sim"),
}
"""Every provider kind a config may name."""


def kinds() -> list[str]:
    """The known provider kinds, sorted."""
    return sorted(FACTORIES)


def _factory(name: str, config: ProviderConfig, source: str | None) -> ProviderFactory:
    factory = FACTORIES.get(config.kind or "")
    if factory is None:
        raise ConfigError(
            f"unknown provider kind {config.kind!r}; known kinds: {', '.join(kinds())}",
            path=source,
            key=config_key(source, "providers", name, "kind"),
        )
    return factory


def _api_key(config: ProviderConfig, env: Mapping[str, str] | None) -> str | None:
    environ = os.environ if env is None else env
    return environ.get(config.api_key_env) if config.api_key_env else None


def build_provider(
    name: str,
    config: ProviderConfig,
    *,
    source: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Provider:
    """The provider `[providers.NAME]` describes, its key read from `env` (default
    `os.environ`); `source` is the config file the errors name."""
    return _factory(name, config, source)(name, config, _api_key(config, env))


def build_providers(
    config: SwarmConfig, env: Mapping[str, str] | None = None
) -> dict[str, Provider]:
    """One Provider per configured provider, keys read from `env` (default `os.environ`)
    now. Every kind is checked before any provider (and its HTTP client) is made."""
    factories = {name: _factory(name, p, config.source) for name, p in config.providers.items()}
    return {
        name: factories[name](name, p, _api_key(p, env)) for name, p in config.providers.items()
    }
