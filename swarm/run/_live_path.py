"""The run's live critical path: each remaining subtask's slack from what has happened.

`LivePath` follows a run's subtasks as they start, go into fix rounds and finish, and
re-estimates the critical path still ahead: a finished subtask is behind, a running one
has its estimated length minus its elapsed time left (a quarter of a length once it runs
over: it is not done yet), a fix round adds one measured fix round (half a length until
one was measured), and a pending one starts when its dependencies are estimated to end
and lasts the subtasks' mean measured length. Each remaining subtask's slack (latest
finish minus earliest finish, in lengths) goes to `RouteHints.slack`, which every call
reads, so a chain that falls behind (a predecessor ran long, a fix round) sends its calls
to the fast candidate from then on. Before anything was measured the lengths are the
plan's (one each), which is `plan_slack`.

With a deadline, the estimated finish is the later of the critical path ahead and the
work ahead spread over the agents. When it no longer fits (times `margin`), the run moves
before the deadline has to stop it: it widens the fan-out when the work, not a chain, is
what is late and subtasks wait for an agent place (up to `RouteHints.max_agents`, twice the
configured number unless set), and it moves the running subtasks whose chain does not fit
to the speed tier's fastest candidate (for good: `RouteHints.hurried`). Later subtasks of
the chain are judged as they start, on the lengths measured by then, so a deadline that
a few fast subtasks can meet costs only those (the rest stay on their tier's choice). Each
move is noted in `RouteHints.changes`, with why, for the run's report.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from swarm._routing.limits import ConcurrencyLimiter
from swarm.run._plan import Plan
from swarm.run._plan_graph import topo_order
from swarm.run._slack import RouteHints

__all__ = ["Forecast", "LivePath"]

_OVERRUN = 0.25
"""What is left of a subtask running past its estimate, in lengths."""
_FIX_PRIOR = 0.5
"""A fix round's length, in subtask lengths, until one was measured."""
REFRESHES_PER_PASS = 25
"""Refreshes on events per pass over the plan (each subtask starting and finishing): a
refresh of a 300-subtask plan takes 0.3 ms of CPU; every 3 events (100 per pass), they
were 0.1 ms per model call of a 300-subtask solve. Between them `tick` still refreshes
before a call once a tenth of a subtask's length has passed."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """The time left to the last subtask's end, with its range (seconds from now)."""

    left_s: float
    low_s: float
    high_s: float
    critical: tuple[str, ...]
    """The subtasks still ahead with no slack (the live critical path)."""


class LivePath:
    """Live slack and deadline moves for one run (see the module docstring)."""

    def __init__(
        self,
        plan: Plan,
        hints: RouteHints,
        *,
        limiter: ConcurrencyLimiter | None = None,
        note: Callable[[str], None] | None = None,
        now: Callable[[], float] = anyio.current_time,
    ) -> None:
        self._ids = [s.id for s in plan.subtasks]
        self._index = index = {x: i for i, x in enumerate(self._ids)}
        self._every = max(1, len(self._ids) // REFRESHES_PER_PASS)
        """Events between refreshes: a refresh is linear in the plan, so a plan of 300
        subtasks is re-estimated every 12 events, one of 10,000 every 400 (and on calls as
        time passes: `tick`)."""
        self._events = 0
        self._deps = [[index[d] for d in s.depends_on] for s in plan.subtasks]
        self._after: list[list[int]] = [[] for _ in self._ids]
        for i, ds in enumerate(self._deps):
            for d in ds:
                self._after[d].append(i)
        self._order = topo_order(self._deps)
        self._hints, self._limiter, self._note, self._now = hints, limiter, note, now
        self._left: Callable[[], float] = lambda: math.inf
        self._started: dict[int, float] = {}
        self._fixes: dict[int, int] = {}
        self._fix_at: dict[int, float] = {}
        self._done: set[int] = set()
        self._walls: list[float] = []
        self._wall_sum = 0.0
        self._fix_walls: list[float] = []
        self.estimate_s = 0.0
        """The estimated time to the end of the last subtask, as of the last refresh."""
        self._refreshed = -math.inf
        most = hints.max_agents
        self._most = int(2 * limiter.limit) if most is None and limiter else most or 0
        hints.on_call = self.tick
        self.refresh()  # the plan's slack, until something happens

    # -- what happened --------------------------------------------------------------

    def deadline(self, left_s: Callable[[], float]) -> None:
        """Pace the run against a deadline: `left_s()` is the time left (inf: none)."""
        self._left = left_s

    def started(self, sid: str) -> None:
        self._started[self._index[sid]] = self._now()
        self._happened()

    def fixing(self, sid: str) -> None:
        """A fix round begins (and the one before it, if any, has ended)."""
        i = self._index[sid]
        self._fixes[i] = self._fixes.get(i, 0) + 1
        self._round_ended(i)
        self._fix_at[i] = self._now()
        self._happened()

    def _round_ended(self, i: int) -> None:
        took = self._now() - self._fix_at.pop(i, self._now())
        if took > 0:
            self._fix_walls.append(took)

    def finished(self, sid: str, wall_s: float) -> None:
        i = self._index[sid]
        self._done.add(i)
        self._round_ended(i)
        self._started.pop(i, None)
        if wall_s > 0:
            self._walls.append(wall_s)
            self._wall_sum += wall_s
        self._happened()

    def done_before(self, sids: set[str]) -> None:
        """Subtasks merged by an earlier process: behind the run, never measured."""
        self._done |= {self._index[s] for s in sids if s in self._index}
        self.refresh()

    def _happened(self) -> None:
        self._events += 1
        if self._events >= self._every:
            self.refresh()

    # -- estimates ------------------------------------------------------------------

    def _length(self) -> float:
        """One subtask's estimated length (s); 0 before anything could be measured."""
        if self._walls:
            return self._wall_sum / len(self._walls)
        now = self._now()
        return max((now - t for t in self._started.values()), default=0.0)

    def _lefts(self, unit: float, now: float | None) -> list[float]:
        """Every subtask's estimated time left (`now` None: in plan lengths, nothing timed),
        in one pass over what started, was fixed or is done: a refresh runs it every few
        events over the whole plan."""
        walls = self._fix_walls
        fix = sum(walls) / len(walls) if walls else _FIX_PRIOR * unit
        left = [unit] * len(self._ids)
        for i, n in self._fixes.items():
            left[i] += n * fix
        least = _OVERRUN * unit
        for i, at in self._started.items():
            elapsed = now - at if now is not None else 0.0
            left[i] = max(left[i] - elapsed, least)
        for i in self._done:
            left[i] = 0.0
        return left

    def _pass(self) -> tuple[list[float], list[float], list[float], float]:
        """Per subtask: time left, earliest and latest finish (from now); the unit (0 when
        nothing could be timed yet: then every length is the plan's, one)."""
        unit = self._length()
        now = self._now() if unit > 0 else None
        left = self._lefts(unit or 1.0, now)
        early = left.copy()
        deps = self._deps
        for i in self._order:
            if deps[i]:
                early[i] += max([early[d] for d in deps[i]])
        end = max(early, default=0.0)
        late = [end] * len(left)
        after = self._after
        for i in reversed(self._order):
            if after[i]:
                late[i] = min(end, min([late[j] - left[j] for j in after[i]]))
        return left, early, late, unit

    def tick(self) -> None:
        """Before a call: refresh when a tenth of a subtask length passed since the last
        refresh, so a subtask running longer than estimated is noticed between events."""
        n = len(self._walls)
        if n and self._now() - self._refreshed >= 0.1 * self._wall_sum / n:
            self.refresh()

    def refresh(self) -> None:
        """Re-estimate every remaining subtask's slack; make the deadline's moves if due."""
        self._refreshed, self._events = self._now(), 0
        left, early, late, unit = self._pass()
        slack = self._hints.slack
        for i, x in enumerate(self._ids):
            if i in self._done:
                slack.pop(x, None)
            else:
                slack[x] = round(max(0.0, late[i] - early[i]) / (unit or 1.0), 2)  # 0: critical
        if unit > 0:  # only timed lengths are comparable with the deadline
            self.estimate_s = max(early, default=0.0)
            self._pace(left, early, late)

    def forecast(self) -> Forecast | None:
        """The finish as now estimated: the later of the critical path ahead and the work
        ahead spread over the agents, with a range from the measured subtask lengths (their
        quartiles over their mean; plus or minus half before two were measured). None
        until a length could be timed."""
        left, early, _late, unit = self._pass()
        if unit <= 0:
            return None
        agents = self._limiter.limit if self._limiter is not None else math.inf
        work = sum(left) / agents if agents != math.inf else 0.0
        ahead = max(max(early, default=0.0), work)
        low, high = 0.5, 1.5
        if len(self._walls) >= 2:
            q1, _, q3 = statistics.quantiles(self._walls, n=4)
            low, high = min(1.0, q1 / unit), max(1.0, q3 / unit)
        critical = tuple(x for x, s in self._hints.slack.items() if s == 0)
        return Forecast(ahead, ahead * low, ahead * high, critical)

    # -- the deadline ---------------------------------------------------------------

    def _pace(self, left: list[float], early: list[float], late: list[float]) -> None:
        remaining = self._left()
        if remaining == math.inf or remaining <= 0:  # no deadline, or it stops the run now
            return
        margin = self._hints.margin
        chain = max(early, default=0.0)
        agents = self._limiter.limit if self._limiter is not None else math.inf
        work = sum(left) / agents if agents != math.inf else 0.0
        if max(chain, work) * margin <= remaining:
            return
        if work * margin > remaining:
            self._widen(sum(left), remaining)
        if chain * margin > remaining:
            budget = remaining / margin
            late_by = chain - budget  # every subtask's latest finish moves this much earlier
            behind = [
                x
                for i, x in enumerate(self._ids)
                if i in self._started
                and x not in self._hints.hurried
                and late[i] - late_by - early[i] < 0
            ]
            if behind:
                self._hurry(behind, chain, remaining)

    def _waiting(self) -> int:
        """Subtasks ready to start but not started (waiting for an agent place)."""
        return sum(
            1
            for i in range(len(self._ids))
            if i not in self._done
            and i not in self._started
            and all(d in self._done for d in self._deps[i])
        )

    def _widen(self, work_s: float, remaining: float) -> None:
        limiter, most = self._limiter, self._most
        if limiter is None or not self._waiting():
            return
        have = int(limiter.limit)
        want = min(most, max(have + 1, math.ceil(work_s * self._hints.margin / remaining)))
        if want <= have:
            return
        limiter.widen(want)
        self._change(
            f"deadline: ~{work_s:.0f} s of work left over {have} agents needs "
            f"~{work_s / have:.0f} s, {remaining:.0f} s left: fan-out widened from {have} to "
            f"{want} agents"
        )

    def _hurry(self, behind: list[str], chain_s: float, remaining: float) -> None:
        hints = self._hints
        hints.hurried.update(behind)
        named = ", ".join(behind[:5]) + (f" and {len(behind) - 5} more" if len(behind) > 5 else "")
        moved = (
            "would move to the speed tier's fastest candidate, but every tier has the one "
            "model they are on"
            if hints.one_model
            else "moved to the speed tier's fastest candidate"
        )
        reason = (
            f"deadline: the critical path ahead needs ~{chain_s:.0f} s, {remaining:.0f} s "
            f"left: {len(behind)} subtask(s) ({named}) {moved}"
        )
        hints.hurry = hints.hurry or reason
        self._change(reason)

    def _change(self, text: str) -> None:
        self._hints.changes.append(text)
        if self._note is not None:
            self._note(f"swarm: {text}")
