"""The environment of swarm's subprocesses: `os.environ` copied once until it changes
(`environ`), what of it an agent's command may see (`command_env`: an allow-list), and
without secrets by name (`scrub_env`: a deny-list, for swarm's own git and as a second
layer). Re-exported by `swarm.agent._tool`."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

__all__ = ["COMMAND_ENV", "command_env", "environ", "scrub_env"]

COMMAND_ENV = frozenset(
    {
        *("PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL"),
        *("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CI"),
        *("PYTHONPATH", "PYTHONHASHSEED", "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONWARNINGS"),
        *("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"),
    }
)
"""What of swarm's environment an agent's command, a check, `setup:` and a hook get
(and `LC_*`); a task adds its own with `env:`. A name-based deny-list let `MY_LLM_AUTH`,
`DATABASE_URL=postgres://u:password@...` and `SENTRY_DSN` through."""

_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_SECRET_NAMES = frozenset(
    {
        # provider and tooling secrets whose names the words above miss
        "MYSQL_PWD",
        "SSH_AUTH_SOCK",
        "GPG_AGENT_INFO",
        "NETRC",
        # these would point git at the user's checkout instead of the workspace
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        # set afresh per subprocess from the current span
        "TRACEPARENT",
        "TRACESTATE",
    }
)


def command_env(env: Mapping[str, str]) -> dict[str, str]:
    """What of `env` a command may see: the names in `COMMAND_ENV` and `LC_*` only."""
    return {
        name: value
        for name, value in env.items()
        if name in COMMAND_ENV or (name.startswith("LC_") and not _secret(name))
    }


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without secrets: names containing KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL."""
    if env is os.environ:
        return dict(_scrubbed_environ())
    return {name: value for name, value in env.items() if not _secret(name)}


@functools.lru_cache(maxsize=4096)
def _secret(name: str) -> bool:
    upper = name.upper()
    return upper in _SECRET_NAMES or any(word in upper for word in _SECRET_WORDS)


_environ_cache: tuple[dict[bytes, bytes], dict[str, str], dict[str, str]] | None = None


def environ() -> Mapping[str, str]:
    """`os.environ` as a plain mapping, copied again only when it has changed: a solve
    builds thousands of subprocess environments, and reading `os.environ` decodes every
    variable each time. Do not change what it returns."""
    return _environ_snapshot()[1]


def _scrubbed_environ() -> dict[str, str]:
    return _environ_snapshot()[2]


def _environ_snapshot() -> tuple[dict[bytes, bytes], dict[str, str], dict[str, str]]:
    global _environ_cache
    raw = getattr(os.environ, "_data", None)
    cached = _environ_cache
    if cached is not None and raw is not None and cached[0] == raw:
        return cached
    copy = dict(os.environ)
    scrubbed = {name: value for name, value in copy.items() if not _secret(name)}
    _environ_cache = (dict(raw or {}), copy, scrubbed)
    return _environ_cache
