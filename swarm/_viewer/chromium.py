"""How swarm drives a headless browser: Debian's Chromium, never a downloaded build.

Used by the viewer's browser test and benchmark. The flags keep Chromium from reaching
for the network (this machine, and CI's, have none but loopback) and run it as root.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHROMIUM", "CHROMIUM_ARGS"]

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's `chromium` package; `.ci/install` installs it."""

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
