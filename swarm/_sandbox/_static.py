"""The sandbox's small static C programs (`drop.c`, `pidns.c` in this package), compiled
once per machine and user into the store (`swarm._sandbox._store`).

Each runs as a step of every command it serves, where a dynamically linked program pays
for the loader, its libraries and their locale files (`setpriv` cost ~2 ms of a command
on a loaded machine), and where a program that maps no library shares no lock with what
the command's processes map (`pidns.c`). Built with the machine's C compiler and static C
library (`cc -O2 -static`, ~0.3 s, once: the store keeps each under a name made from its
source, the compiler and the architecture, for every later process).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from swarm._sandbox import _store

__all__ = ["program"]

_COMPILERS = ("cc", "gcc", "clang")
_BUILD_TIMEOUT_S = 120


def program(name: str) -> Path:
    """`<name>.c` built, once per machine and user (mode 0700); OSError where it cannot be
    (no C compiler, no static C library: the compiler's words)."""
    compiler = next((found for c in _COMPILERS if (found := shutil.which(c))), None)
    if compiler is None:
        raise OSError("no C compiler here")
    source = resources.files("swarm._sandbox").joinpath(f"{name}.c").read_bytes()
    key = hashlib.sha256(source).hexdigest() + compiler + platform.machine()
    try:
        built = _store.tree(name, key, lambda where: _build(compiler, name, source, where))
    except subprocess.SubprocessError as exc:
        raise OSError(f"{compiler}: {exc}") from exc
    return built / name


def _build(compiler: str, name: str, source: bytes, where: Path) -> None:
    (where / f"{name}.c").write_bytes(source)
    done = subprocess.run(
        [compiler, "-O2", "-static", "-s", "-o", str(where / name), str(where / f"{name}.c")],
        capture_output=True,
        timeout=_BUILD_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(done.stderr.decode(errors="replace") or f"exit {done.returncode}")
    os.chmod(where / name, 0o700)
