"""Live progress of a run: agents running, queued, merged, failed; tokens/s, cost, time.

On a terminal it is a live status (rich) that redraws every second whether or not events
arrive (the clock and tokens/s move), with a second line saying what each subtask in
flight is doing (`pricing: fixing · stock: running`); elsewhere, a plain line per event
ending in that event (`(pricing: fixing)`), so logs and CI output stay readable, and a
heartbeat line when nothing was printed for `heartbeat_s` (a slow local model can take
minutes per call: silence must not look like a hang); `quiet` prints nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from swarm.budget import Budget

__all__ = ["Progress"]

_REFRESH_PER_S = 1.0
"""Redraws a second: the clock shows tenths, so one a second reads as a steady tick."""
HEARTBEAT_S = 30.0
"""Off a terminal, a line at least this often while a run works."""


class Progress:
    def __init__(
        self,
        budget: Budget,
        *,
        stream: TextIO | None = None,
        quiet: bool = False,
        live: bool | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.budget = budget
        self.heartbeat_s = heartbeat_s
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = self.stream.isatty() if live is None else live
        self.counts = {"queued": 0, "running": 0, "fixing": 0, "merged": 0, "failed": 0}
        self.total = 0
        self._t0 = time.monotonic()
        self._live: Live | None = None
        self._doing: dict[str, str] = {}
        """Subtask -> what it is doing now, for those in flight (insertion order)."""
        self._printed = time.monotonic()
        self._stop_beat = threading.Event()
        self._beat: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if not self.live and not self.quiet and self.heartbeat_s > 0:
            # a thread, not a task: the run's code may hold the event loop for a while (a
            # git call, a big patch), and the heartbeat is what shows it is alive
            self._beat = threading.Thread(target=self._beating, name="swarm-heartbeat", daemon=True)
            self._beat.start()
        if self.live and not self.quiet:
            console = Console(file=self.stream, force_terminal=True)
            self._live = Live(
                get_renderable=self._text,  # called on every refresh: the clock ticks
                console=console,
                auto_refresh=True,
                refresh_per_second=_REFRESH_PER_S,
                transient=False,
            )
            self._live.__enter__()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._beat is not None:
            self._stop_beat.set()
            self._beat.join(timeout=1.0)
            self._beat = None
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(et, e, tb)
            self._live = None

    def _beating(self) -> None:
        while not self._stop_beat.wait(min(1.0, self.heartbeat_s)):
            if time.monotonic() - self._printed >= self.heartbeat_s:
                doing = self.doing()
                self._print(f"{self.line()}  (working: {doing or 'waiting for a model'})")

    def note(self, text: str) -> None:
        """A line that is not a counter change (phase starts, warnings)."""
        if self.quiet:
            return
        if self._live is not None:
            self._live.console.print(text)
        else:
            self._print(text)

    def _print(self, text: str) -> None:
        self._printed = time.monotonic()
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
        if what in ("queued", "running", "fixing"):
            self._doing[subtask] = what
        else:
            self._doing.pop(subtask, None)
        if self.quiet:
            return
        if self._live is not None:
            self._live.refresh()
        else:
            self._print(f"{self.line()}  ({subtask}: {what})")

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

    def doing(self) -> str:
        """What the subtasks in flight are doing, fixes first (`pricing: fixing · ...`)."""
        order = {"fixing": 0, "running": 1, "queued": 2}
        # a copy: rich's refresh thread reads this while the run's events change it
        items = sorted(self._doing.copy().items(), key=lambda kv: order.get(kv[1], 3))
        return " · ".join(f"{k}: {v}" for k, v in items)

    def _text(self) -> RenderableType:
        status = Text(self.line())  # wraps on a narrow terminal rather than losing figures
        doing = self.doing()
        if not doing:
            return status
        return Group(status, Text(f"  {doing}", no_wrap=True, overflow="ellipsis"))
