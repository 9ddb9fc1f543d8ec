"""The repository's git config as a sandboxed command sees it: `[core]` and `[extensions]`
only (what git needs to read the repository), never remotes, credentials, includes or
aliases. A `.git/config` often holds `url = https://user:token@host/...`; an agent that
prints it sends the token to its model provider.

The filtered copy is written once per config version into a private temporary directory
(removed when swarm exits) and bound read-only over the real one.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

__all__ = ["shown_config"]

_KEPT_SECTIONS = frozenset({"core", "extensions"})
_DROPPED_KEYS = frozenset({"sshcommand", "askpass", "fsmonitor", "editor", "pager"})
"""Keys of `[core]` that name a program: nothing for a sandboxed git to run."""

_lock = threading.Lock()
_made: dict[tuple[Path, int, int], Path] = {}
_dir: Path | None = None


def _filtered(text: str) -> str:
    out, keep = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            name = stripped.strip("[]").split()[0].split(".")[0].lower() if stripped else ""
            keep = name in _KEPT_SECTIONS
            if keep:
                out.append(line)
            continue
        key = stripped.split("=", 1)[0].strip().lower()
        if keep and key not in _DROPPED_KEYS:
            out.append(line)
    return "\n".join(out) + "\n"


def shown_config(common: Path) -> Path | None:
    """A filtered copy of `common/config`, or None when there is no config to filter."""
    global _dir
    config = common / "config"
    try:
        stat = config.stat()
    except OSError:
        return None
    key = (config, stat.st_mtime_ns, stat.st_size)
    with _lock:
        if key in _made:
            return _made[key]
        if _dir is None:
            _dir = Path(tempfile.mkdtemp(prefix="swarm-sandbox-"))
            atexit.register(shutil.rmtree, _dir, True)
        text = config.read_text(encoding="utf-8", errors="surrogateescape")
        fd, name = tempfile.mkstemp(dir=_dir, suffix=".gitconfig")
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(_filtered(text))
            os.fchmod(fd, 0o644)  # the command's uid is not swarm's (`_identity`)
        _made[key] = Path(name)
        return _made[key]
