"""Reading a TOML file (`swarm.toml`, `pyproject.toml`): every failure a ConfigError
naming the file and, for a syntax error, the line."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from swarm.errors import ConfigError

__all__ = ["read_toml"]


def read_toml(p: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        message = f"not a UTF-8 text file (byte {exc.start})"
        raise ConfigError(message, path=str(p)) from None
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11 has no exc.lineno; the message always ends "(at line N, column M)"
        found = re.search(r"line (\d+)", str(exc))
        line = getattr(exc, "lineno", None) or (found.group(1) if found else None)
        key = f"line {line}" if line else None
        raise ConfigError(f"invalid TOML: {exc}", path=str(p), key=key) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", path=str(p)) from exc
