"""`--json`: exactly one JSON value on stdout, on every exit path, the error in it.

While a `--json` command runs, Python's `sys.stdout` is a buffer and file descriptor 1 is
the terminal's stderr, so nothing else reaches stdout: a line a library prints, or a
subprocess that inherited stdout (Ray's log monitor printed its lines into `swarm solve
--json` before this), goes to stderr. At the end `JsonOut.finish` writes the command's
JSON to the real stdout, with the error that ended the command in it; a command that
printed none gets `{"error": ..., "exit_code": ...}`.
"""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any

__all__ = ["JsonOut", "error_object"]


def error_object(error: str, code: int) -> dict[str, Any]:
    """What stdout holds when a command ended with `error` before printing its JSON."""
    return {"status": "interrupted" if code == 130 else "failed", "error": error, "exit_code": code}


class JsonOut:
    """Stdout held for one `--json` command (`with JsonOut() as out: ...; out.finish(...)`)."""

    def __init__(self) -> None:
        self._buffer = io.StringIO()
        self._saved_fd = -1
        self._saved_stdout: Any = None

    def __enter__(self) -> JsonOut:
        sys.stdout.flush()
        self._saved_fd = os.dup(1)
        os.dup2(2, 1)
        self._saved_stdout, sys.stdout = sys.stdout, self._buffer
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        if self._saved_fd < 0:
            return
        sys.stdout = self._saved_stdout
        os.dup2(self._saved_fd, 1)
        os.close(self._saved_fd)
        self._saved_fd = -1

    def finish(self, code: int, error: str | None) -> None:
        """Write the one JSON value: the command's own (with `error` added when it has
        none), else an error object; any other printed text goes to stderr."""
        self._restore()
        value, other = _split(self._buffer.getvalue())
        if other.strip():
            sys.stderr.write(other if other.endswith("\n") else other + "\n")
        if value is None:
            value = error_object(error or f"exited {code} without output", code)
        elif error and isinstance(value, dict) and "error" not in value:
            value = {**value, "error": error, "exit_code": code}
        print(json.dumps(value, indent=2))
        sys.stdout.flush()


def _split(text: str) -> tuple[Any, str]:
    """The last JSON value printed (commands print theirs last), and the rest."""
    decoder = json.JSONDecoder()
    start = len(text)
    while True:
        start = max(text.rfind("\n{", 0, start), text.rfind("\n[", 0, start))
        at = start + 1
        if start < 0:
            at = 0
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            value, end = None, -1
        if value is not None and not text[end:].strip():
            return value, text[:at]
        if start < 0:
            return None, text
