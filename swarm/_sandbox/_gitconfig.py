"""The repository's git config as a sandboxed command sees it: `[core]` and `[extensions]`
only (what git needs to read the repository), never remotes, credentials, includes or
aliases. A `.git/config` often holds `url = https://user:token@host/...`; an agent that
prints it sends the token to its model provider.

The filtered copy is a file named by its content in the directory of files a user's
sandboxes share (`swarm._sandbox._store`: the worktrees of a repository, and of most
repositories, share one), bound read-only over the real one.
"""

from __future__ import annotations

import threading
from pathlib import Path

from swarm._sandbox import _store

__all__ = ["shown_config"]

_KEPT_SECTIONS = frozenset({"core", "extensions"})
_DROPPED_KEYS = frozenset({"sshcommand", "askpass", "fsmonitor", "editor", "pager"})
"""Keys of `[core]` that name a program: nothing for a sandboxed git to run."""

_lock = threading.Lock()
_made: dict[tuple[Path, int, int], Path] = {}


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
    config = common / "config"
    try:
        stat = config.stat()
    except OSError:
        return None
    key = (config, stat.st_mtime_ns, stat.st_size)
    with _lock:
        if key in _made:
            return _made[key]
        text = config.read_text(encoding="utf-8", errors="surrogateescape")
        shown = _filtered(text).encode("utf-8", errors="surrogateescape")
        _made[key] = _store.file("gitconfig", shown)  # the command's uid reads it (0644)
        return _made[key]
