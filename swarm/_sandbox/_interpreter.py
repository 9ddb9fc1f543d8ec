"""What a sandbox must show for an interpreter to run: its installation prefixes.

A sandbox shows `/usr` and little else; a Python in a virtual environment or under
`/opt` needs its venv's prefix and the base interpreter's it points to (never the checkout
around a venv), and swarm's own package where the venv imports it from a checkout (an
editable install): the venv's pytest loads swarm's plugin, a `pytest11` entry point, and
cannot start when that import fails. `swarm.run._environment` (checks),
`swarm.agent._tool` (a `ToolContext` on the default sandbox) and `swarm.agent.mcp` (stdio
servers) ask here.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

__all__ = ["interpreters_in", "on_path", "prefixes"]


def on_path(path: str) -> Path | None:
    """The `python3` (or `python`) the search path `path` finds, or None."""
    found = shutil.which("python3", path=path) or shutil.which("python", path=path)
    return Path(found) if found else None


def prefixes(python: Path) -> list[Path]:
    """The installation prefixes `python` runs from: its venv's and its real interpreter's."""
    out = []
    venv = python.parent.parent
    if (venv / "pyvenv.cfg").is_file():
        out.append(venv.resolve())
        for line in (venv / "pyvenv.cfg").read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                out.append(Path(value.strip()).resolve().parent)
    out.append(python.resolve().parent.parent)
    return out + [found for prefix in out for found in _swarm_checkout(prefix)]


def _swarm_checkout(prefix: Path) -> list[Path]:
    """swarm's package directory in a checkout the venv at `prefix` imports it from (a
    `.pth` file of its site-packages names the checkout): only the package, read-only."""
    found = []
    for pth in prefix.glob("lib/python*/site-packages/*.pth"):
        for line in pth.read_text(errors="replace").splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "import")):
                package = Path(line) / "swarm"
                if (package / "pytest_plugin.py").is_file():
                    found.append(package.resolve())
    return found


def interpreters_in(*commands: str | None) -> list[Path]:
    """The prefixes of the interpreters `commands` name by absolute path (a check written as
    `/opt/py/bin/python -m pytest`): a sandbox must show them. Only Python interpreters and
    executables of a venv count: the prefix of any other path may be the user's home."""
    found: list[Path] = []
    for command in commands:
        if not command:
            continue
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        for word in words:
            exe = Path(word)
            if not exe.is_absolute() or not (exe.is_file() and os.access(exe, os.X_OK)):
                continue
            if exe.name.startswith("python") or (exe.parent.parent / "pyvenv.cfg").is_file():
                found += prefixes(exe)
    return [p for p in dict.fromkeys(found) if not p.is_relative_to("/usr")]
