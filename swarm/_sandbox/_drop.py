"""The static helper a root swarm's sandboxed command starts through: `drop.c`, built once
per machine and user (`swarm._sandbox._static`).

It does what `setpriv --reuid --regid --clear-groups --inh-caps=-all --ambient-caps=-all
--bounding-set=-all --no-new-privs` did as the command's first step (`swarm._sandbox.
_identity`), without what made `setpriv` cost ~2 ms of each command on a loaded machine:
the dynamic loader and its libraries, the locale files, the name service lookups of the
uid it was given, the option parsing. Where it cannot be built, `helper()` is None and
`setpriv` is the step.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from swarm._sandbox import _static

__all__ = ["INSIDE", "helper"]

log = logging.getLogger(__name__)

INSIDE = "/run/swarm-drop"
"""Where the helper is bound in the sandbox (read-only, 0700: only the sandbox's root, the
command before the drop, may run it)."""


@functools.cache
def helper() -> Path | None:
    """The helper, built on first use, or None where it cannot be built (logged once)."""
    try:
        return _static.program("drop")
    except OSError as exc:
        log.info(
            "the sandbox's static drop helper could not be built (%s): a root swarm's "
            "commands drop to their uid via setpriv",
            str(exc).strip()[-300:],
        )
        return None
