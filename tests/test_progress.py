"""The live progress display: it ticks on its own on a terminal and says what each
subtask in flight is doing; piped, it prints a line per event with the event."""

from __future__ import annotations

import io
import re
import time

from swarm.budget import Budget, BudgetLimits
from swarm.run._progress import Progress


def _clocks(text: str) -> set[str]:
    return set(re.findall(r"\[\s*(\d+\.\d)s\]", text))


def test_live_display_redraws_without_events_and_keeps_details() -> None:
    stream = io.StringIO()
    with Progress(Budget(BudgetLimits()), stream=stream, live=True) as progress:
        progress.start(total=2, merged=0)
        for name in ("pricing", "stock"):
            progress.queued(name)
            progress.running(name)
        progress.fixing("pricing")
        drawn = len(stream.getvalue())
        time.sleep(2.5)  # no events: only the display's own refresh can draw
        quiet_period = stream.getvalue()[drawn:]
        assert len(_clocks(quiet_period)) >= 2, quiet_period
        assert "pricing: fixing · stock: running" in quiet_period
        progress.finished("pricing", "merged")
    final = stream.getvalue()
    assert "1/2 merged" in final
    last_frame = final.rsplit("\x1b[2K", 1)[1]
    assert "1/2 merged" in last_frame and "$0.0000" in last_frame  # wrapped, not cut
    assert last_frame.rstrip("\n\x1b[?25h").endswith("stock: running")


def test_piped_progress_is_one_line_per_event_with_the_event() -> None:
    stream = io.StringIO()
    with Progress(Budget(BudgetLimits()), stream=stream, live=False) as progress:
        progress.start(total=1, merged=0)
        progress.queued("pricing")
        progress.running("pricing")
        progress.fixing("pricing")
        progress.finished("pricing", "merged")
    lines = stream.getvalue().splitlines()
    assert [line.rsplit("(", 1)[1] for line in lines] == [
        "pricing: queued)",
        "pricing: running)",
        "pricing: fixing)",
        "pricing: merged)",
    ]
    assert "1/1 merged" in lines[-1]
    assert "\x1b[" not in stream.getvalue()


def test_piped_progress_beats_while_agents_work_without_events() -> None:
    """A slow local model sends no event for minutes: a heartbeat line says work goes on."""
    stream = io.StringIO()
    budget = Budget(BudgetLimits())
    with Progress(budget, stream=stream, live=False, heartbeat_s=0.1) as progress:
        progress.start(total=1, merged=0)
        progress.queued("pricing")
        progress.running("pricing")
        deadline = time.monotonic() + 5
        while stream.getvalue().count("(working:") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    beats = [line for line in stream.getvalue().splitlines() if "(working:" in line]
    assert len(beats) >= 2 and beats[0].endswith("(working: pricing: running)")
    assert len(_clocks("\n".join(beats))) >= 2  # each beat has the clock as it is then


def test_quiet_prints_nothing() -> None:
    stream = io.StringIO()
    with Progress(Budget(BudgetLimits()), stream=stream, quiet=True, live=True) as progress:
        progress.queued("a")
        progress.fixing("a")
        progress.note("hello")
    assert stream.getvalue() == ""
