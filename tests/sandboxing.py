"""What the sandbox's tests need of the machine, said once: skip markers for bubblewrap
(that it runs here, `swarm._sandbox.bwrap_problem`) and for socat (the forwarder of a
proxied network)."""

from __future__ import annotations

import pytest

from swarm._sandbox import bwrap_problem
from swarm._sandbox.bwrap import socat_path

__all__ = ["needs_bwrap", "needs_socat"]

needs_bwrap = pytest.mark.skipif(
    bwrap_problem() is not None, reason=f"bubblewrap cannot run here: {bwrap_problem()}"
)
needs_socat = pytest.mark.skipif(socat_path() is None, reason="socat is not installed")
