"""What the sandbox's tests need of the machine, said once: skip markers for bubblewrap
(that it runs here, `swarm._sandbox.bwrap_problem`) and for socat (the forwarder of a
proxied network); and a look for the processes a command left."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm._sandbox import bwrap_problem
from swarm._sandbox.bwrap import socat_path

__all__ = ["marked", "needs_bwrap", "needs_socat"]

needs_bwrap = pytest.mark.skipif(
    bwrap_problem() is not None, reason=f"bubblewrap cannot run here: {bwrap_problem()}"
)
needs_socat = pytest.mark.skipif(socat_path() is None, reason="socat is not installed")


def marked(marker: str) -> list[int]:
    """The processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
