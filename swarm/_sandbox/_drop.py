"""The static helper a root swarm's sandboxed command starts through: `drop.c`, compiled
once per machine and user into the store (`swarm._sandbox._store`).

It does what `setpriv --reuid --regid --clear-groups --inh-caps=-all --ambient-caps=-all
--bounding-set=-all --no-new-privs` did as the command's first step (`swarm._sandbox.
_identity`), without what made `setpriv` cost ~2 ms of each command on a loaded machine:
the dynamic loader and its libraries, the locale files, the name service lookups of the
uid it was given, the option parsing. Built with the machine's C compiler and static C
library (`cc -O2 -static`, ~0.3 s, once: the store keeps it under a name made from the
source, the compiler and the architecture, for every later process). Where no compiler or
static C library is found, `helper()` is None and `setpriv` is the step.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from swarm._sandbox import _store

__all__ = ["INSIDE", "helper"]

log = logging.getLogger(__name__)

INSIDE = "/run/swarm-drop"
"""Where the helper is bound in the sandbox (read-only, 0700: only the sandbox's root, the
command before the drop, may run it)."""
_COMPILERS = ("cc", "gcc", "clang")
_BUILD_TIMEOUT_S = 120


@functools.cache
def helper() -> Path | None:
    """The helper, built on first use, or None where it cannot be built (logged once)."""
    compiler = next((found for name in _COMPILERS if (found := shutil.which(name))), None)
    if compiler is None:
        log.info("no C compiler here: a root swarm's commands drop to their uid via setpriv")
        return None
    source = resources.files("swarm._sandbox").joinpath("drop.c").read_bytes()
    key = hashlib.sha256(source).hexdigest() + compiler + platform.machine()
    try:
        built = _store.tree("drop", key, lambda where: _build(compiler, source, where))
    except (OSError, subprocess.SubprocessError) as exc:
        log.info(
            "the sandbox's static drop helper could not be built with %s (%s): a root "
            "swarm's commands drop to their uid via setpriv",
            compiler,
            str(exc).strip()[-300:],
        )
        return None
    return built / "drop"


def _build(compiler: str, source: bytes, where: Path) -> None:
    (where / "drop.c").write_bytes(source)
    done = subprocess.run(
        [compiler, "-O2", "-static", "-s", "-o", str(where / "drop"), str(where / "drop.c")],
        capture_output=True,
        timeout=_BUILD_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(done.stderr.decode(errors="replace") or f"exit {done.returncode}")
    os.chmod(where / "drop", 0o700)
