"""The coordinator's dispatch: every subtask's outcome, what merged and finished,
the agents' places, and what stopped the run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from swarm._routing.limits import ConcurrencyLimiter
from swarm._tracing import semconv as sc
from swarm.errors import GaveUp, ProviderError, SwarmError
from swarm.run._merge import Merger
from swarm.run._outcome import SubtaskOutcome
from swarm.run._plan import Plan

__all__ = ["Dispatch", "GaveUp"]


@dataclass
class Dispatch:
    """The dispatch's state: every outcome, what merged, what finished, the slots."""

    queue: Merger
    outcomes: dict[str, SubtaskOutcome]
    done: set[str]
    finished: set[str]
    limiter: ConcurrencyLimiter
    """The agents' places: the longest chains first, then plan order (`place_priority`)."""
    stop: str | None = None
    """The budget kind that ran out, or `providers` (a dead provider opened 10,000
    worktrees, one per subtask, to fail each)."""
    provider_failures: int = 0
    """Subtasks failed in a row by provider errors; 3 stop the run (resumable)."""

    @classmethod
    def for_plan(cls, plan: Plan, queue: Merger, done: Iterable[str], max_agents: int) -> Dispatch:
        """A dispatch for `plan`, `done` merged by an earlier process."""
        merged = set(done)
        outcomes = {
            st.id: SubtaskOutcome(st.id, st.title, "merged" if st.id in merged else "pending")
            for st in plan.subtasks
        }
        places = ConcurrencyLimiter(max_agents, wait_kind=sc.WAIT_QUEUE)
        return cls(queue, outcomes, merged, set(merged), places)

    def note_failure(self, exc: SwarmError) -> None:
        self.provider_failures = self.provider_failures + 1 if isinstance(exc, ProviderError) else 0
        self.stop = self.stop or ("providers" if self.provider_failures >= 3 else None)

    def retry_later(self, exc: ProviderError, outcome: SubtaskOutcome, most: int) -> bool:
        """Is a subtask whose provider calls failed (`exc`) tried again? Only while the run
        goes on and its tries last; it is pending meanwhile (skipped if the run stops)."""
        if not exc.retryable or self.stop is not None or outcome.retries >= most:
            return False
        outcome.retries += 1
        outcome.status = "pending"
        return True

    def skip_rest(self, stop: str | None) -> list[SubtaskOutcome]:
        """Mark what did not run `skipped` and what started but did not finish `stopped`,
        saying why; those outcomes."""
        why = stop or "a dependency failed"
        left = [o for o in self.outcomes.values() if o.status in ("pending", "running")]
        for outcome in left:
            started = outcome.status == "running"
            outcome.status = "stopped" if started else "skipped"
            outcome.error = f"stopped: {why}" if started else f"not run: {why}"
        return left
