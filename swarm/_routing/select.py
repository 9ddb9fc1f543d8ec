"""Which candidate of a tier gets a call: constraints, canary weights, live scores, slack.

A `Policy` is built once per tier (and per role with constraints of its own) from the
merged `Constraints`: candidates that cannot meet them (price, window, capabilities, a
published speed below the floor) are excluded up front, and when none is left the
`ConfigError` names every candidate and why it was excluded. Per call, `Policy.choose`
ranks what is left by the tier's `sort` on live scores (`swarm._routing.score`), keeps the
current choice unless a challenger beats it by the hysteresis margin, sends every Nth call
to the candidate measured least recently (exploration), splits by canary weights when
given, and with a known slack picks the cheapest candidate that fits in it. It returns the
candidates in failover order and, for the chat span, the reason and the scores compared.
`sort = "order"` without weights keeps the old behaviour at no per-call cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from swarm._routing.candidate import Target
from swarm.config._routing import Constraints
from swarm.errors import BudgetExceeded, ConfigError

__all__ = ["Choice", "Need", "Policy", "apply_need", "exclusion"]

Choice = tuple[list[Target], str, str]
"""(candidates in failover order, why the first was chosen, the scores compared)."""


@dataclass(frozen=True)
class Need:
    """What one step needs from its call, beyond the tier."""

    latency: Literal["interactive", "batch"] | None = None
    """`interactive` prefers the candidate with the lowest expected duration on its live
    scores, whatever the tier's sort (a run behind its deadline asks for this)."""
    max_cost_usd: float | None = None
    """Skip candidates whose estimated cost for this request is above this."""
    slack: float | None = None
    """The step's slack on the run's critical path, as a multiple of its own expected
    duration (0: on the critical path). A `balanced` tier then picks the cheapest
    candidate expected within (1 + slack) x the fastest."""


def apply_need(targets: list[Target], need: Need, est_in: int, est_out: int) -> list[Target]:
    """`targets` without those over the call's cost cap; by expected latency for `interactive`."""
    if need.max_cost_usd is not None:
        cap = need.max_cost_usd
        kept = [t for t in targets if t.cost(est_in, est_out) <= cap]
        if not kept:
            cheapest = min(t.cost(est_in, est_out) for t in targets)
            raise BudgetExceeded("usd", limit=cap, spent=cheapest, scope="call")
        targets = kept
    if need.latency == "interactive":
        targets = sorted(targets, key=lambda t: t.score.expected_s(est_out))
    return targets


def exclusion(t: Target, c: Constraints) -> str | None:
    """Why `t` cannot serve under `c`, or None when it can (on published figures)."""
    cap = c.max_usd_per_mtok
    if cap is not None:
        if cap.input is not None and t.in_price * 1e6 > cap.input + 1e-12:
            return f"input ${t.in_price * 1e6:g}/M > max ${cap.input:g}/M"
        if cap.output is not None and t.out_price * 1e6 > cap.output + 1e-12:
            return f"output ${t.out_price * 1e6:g}/M > max ${cap.output:g}/M"
    if c.min_context_tokens is not None:
        if t.context_window is None:
            return "context window unknown"
        if t.context_window < c.min_context_tokens:
            return f"context window {t.context_window:,} < {c.min_context_tokens:,}"
    for need in c.require or ():
        if need not in t.capabilities:
            return f"no {need!r} (has {', '.join(sorted(t.capabilities)) or 'none'})"
    p = t.profile
    if p is not None and c.min_tokens_per_s is not None and p.output_tps < c.min_tokens_per_s:
        return f"decodes {p.output_tps:g} tok/s < {c.min_tokens_per_s:g}"
    if p is not None and c.max_ttft_s is not None and p.ttft_s > c.max_ttft_s:
        return f"first token in {p.ttft_s:g} s > {c.max_ttft_s:g} s"
    return None


class Policy:
    """How one tier (for one role) ranks its candidates; state for hysteresis and canaries."""

    def __init__(
        self, name: str, targets: Sequence[Target], c: Constraints, explore: tuple[int, float]
    ) -> None:
        self.name = name
        self.sort = c.sort or "order"
        eligible: list[tuple[Target, str | None]] = []
        excluded: list[tuple[Target, str | None]] = []
        for t in targets:
            why = exclusion(t, c)
            (excluded if why else eligible).append((t, why))
        if not eligible:
            detail = "; ".join(f"{t.ref}: {why}" for t, why in excluded)
            raise ConfigError(f"no candidate of {name} meets its constraints ({detail})")
        self.targets = [t for t, _ in eligible]
        self.excluded = {t.ref: str(why) for t, why in excluded}
        self._max_ttft, self._min_tps = c.max_ttft_s, c.min_tokens_per_s
        self._weights = _weights(name, self.targets, c.weights)
        self._credit = [0.0] * len(self.targets)
        self._every, self._margin = explore
        self._calls = 0
        self._seen = [0] * len(self.targets)
        self._leader: Target | None = None
        self.static = self.sort == "order" and self._weights is None
        """Nothing to decide per call: the candidates as listed."""

    def choose(self, cost: Callable[[Target], float], out: int, slack: float | None) -> Choice:
        """The candidates in failover order; `cost(t)` is the call's price on `t`."""
        self._calls += 1
        if self._weights is not None:
            return self._canary()
        live = self._live()
        expected = [t.score.expected_s(out) for t in live]
        if slack is not None and self.sort == "balanced":
            key, why = _slack_key(live, expected, cost, slack)
        else:
            key, why = self._key(live, expected, cost)
        ranked = sorted(range(len(live)), key=key.__getitem__)
        best = ranked[0]
        leader = self._leader
        if slack is None and leader in live and leader is not live[best]:
            i = live.index(leader)
            if key[i] <= key[best] * (1 + self._margin):
                ranked.remove(i)
                ranked.insert(0, i)
                why += ", kept (within hysteresis)"
        # exploring costs the call its best candidate: never on the critical path
        explore = self._every and self._calls % self._every == 0 and slack != 0.0
        if explore and len(live) > 1:
            stale = min(ranked[1:], key=lambda i: self._seen[self.targets.index(live[i])])
            ranked.remove(stale)
            ranked.insert(0, stale)
            why = "exploring (least recently measured)"
        else:
            self._leader = live[ranked[0]]
        self._seen[self.targets.index(live[ranked[0]])] = self._calls
        order = [live[i] for i in ranked]
        scores = " ".join(f"{live[i].ref}={key[i]:.4g}" for i in ranked)
        return order, f"{self.sort}: {why}", scores

    def _live(self) -> list[Target]:
        """The candidates meeting the speed floors on measured figures (all, if none do)."""
        if self._max_ttft is None and self._min_tps is None:
            return self.targets
        ttft, tps = self._max_ttft or float("inf"), self._min_tps or 0.0
        kept = [t for t in self.targets if t.score.ttft <= ttft and t.score.tps >= tps]
        return kept or self.targets

    def _key(
        self, live: list[Target], expected: list[float], cost: Callable[[Target], float]
    ) -> tuple[list[float], str]:
        sort = self.sort
        if sort == "latency":
            return expected, "lowest expected duration (s)"
        if sort == "throughput":
            rates = [1.0 / max(t.score.tps * (1 - t.score.errors), 1e-9) for t in live]
            return rates, "fastest decode (s per token)"
        prices = [cost(t) for t in live]
        if sort == "price":
            return prices, "cheapest (USD per call)"
        if sort == "balanced":
            lo_e, lo_p = min(expected), max(min(prices), 1e-12)
            return [
                e / lo_e * max(p, 1e-12) / lo_p for e, p in zip(expected, prices, strict=True)
            ], ("best duration x price (relative)")
        return [float(i) for i in range(len(live))], "as listed"

    def _canary(self) -> Choice:
        """Smooth weighted round robin: exact proportions, no randomness, no bursts."""
        weights = self._weights
        assert weights is not None
        credit = self._credit
        for i, w in enumerate(weights):
            credit[i] += w
        pick = max(range(len(credit)), key=credit.__getitem__)
        credit[pick] -= sum(weights)
        chosen = self.targets[pick]
        order = [chosen, *(t for t in self.targets if t is not chosen)]
        share = weights[pick] / sum(weights)
        return order, f"canary weights: {chosen.ref} gets {share:.0%}", ""


def _slack_key(
    live: list[Target], expected: list[float], cost: Callable[[Target], float], slack: float
) -> tuple[list[float], str]:
    """The cheapest candidate expected to finish within (1 + slack) x the fastest; the
    fastest when none cheaper fits (slack 0: on the critical path)."""
    limit = min(expected) * (1 + max(slack, 0.0))
    key = [cost(t) if e <= limit else 1e9 + e for t, e in zip(live, expected, strict=True)]
    where = "on the critical path: fastest" if slack <= 0 else f"slack {slack:.2g}"
    return key, f"{where}; cheapest expected within {limit:.3g} s"


def _weights(
    name: str, targets: list[Target], weights: dict[str, float] | None
) -> list[float] | None:
    if weights is None:
        return None
    refs = {t.ref for t in targets}
    unknown = [r for r in weights if r not in refs]
    if unknown:
        raise ConfigError(
            f"weights of {name} name {', '.join(unknown)}, not an eligible candidate "
            f"({', '.join(sorted(refs))})"
        )
    return [weights.get(t.ref, 0.0) for t in targets]
