"""Live progress of a run: agents running, queued, merged, failed; tokens/s, cost, time.

On a terminal it is one live status line (rich); elsewhere, a plain line per event, so
logs and CI output stay readable; `quiet` prints nothing.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from swarm.budget import Budget

__all__ = ["Progress"]


class Progress:
    def __init__(
        self,
        budget: Budget,
        *,
        stream: TextIO | None = None,
        quiet: bool = False,
        live: bool | None = None,
    ) -> None:
        self.budget = budget
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = self.stream.isatty() if live is None else live
        self.counts = {"queued": 0, "running": 0, "fixing": 0, "merged": 0, "failed": 0}
        self.total = 0
        self._t0 = time.monotonic()
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if self.live and not self.quiet:
            console = Console(file=self.stream)
            self._live = Live(self._text(), console=console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.update(self._text())
            self._live.__exit__(et, e, tb)
            self._live = None

    def note(self, text: str) -> None:
        """A line that is not a counter change (phase starts, warnings)."""
        if self.quiet:
            return
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    def start(self, *, total: int, merged: int) -> None:
        self.total, self.counts["merged"] = total, merged

    def queued(self, subtask: str) -> None:
        self._move(subtask, None, "queued")

    def running(self, subtask: str) -> None:
        self._move(subtask, "queued", "running")

    def fixing(self, subtask: str) -> None:
        self._event(subtask, "fixing")

    def finished(self, subtask: str, status: str) -> None:
        self._move(subtask, "running", status)

    def _move(self, subtask: str, src: str | None, dst: str) -> None:
        if src is not None:
            self.counts[src] = max(0, self.counts[src] - 1)
        self.counts[dst] = self.counts.get(dst, 0) + 1
        self._event(subtask, dst)

    def _event(self, subtask: str, what: str) -> None:
        if self.quiet:
            return
        if self._live is not None:
            self._live.update(self._text())
        else:
            print(f"{self.line()}  ({subtask}: {what})", file=self.stream, flush=True)

    def line(self) -> str:
        elapsed = time.monotonic() - self._t0
        c = self.counts
        spent = self.budget.spent
        rate = spent.output_tokens / elapsed if elapsed > 0 else 0.0
        return (
            f"[{elapsed:6.1f}s] agents {c['running']} running · {c['queued']} queued · "
            f"{c['merged']}/{self.total} merged · {c['failed']} failed | "
            f"{rate:,.0f} tok/s · ${spent.usd:.4f} · {spent.steps} calls"
        )

    def _text(self) -> Text:
        return Text(self.line())
