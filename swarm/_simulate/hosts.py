"""Several simulated providers serving the same weights, for routing experiments.

A `Host` is one provider of the speed tier's weights with its own catalog profile, prices
and shifts (`swarm.config._shifts`): `SimSpec(hosts=(Host(...), ...), sort="latency")` makes
the speed tier every host ranked by that sort, so a benchmark can set fixed
order, latency, balanced and shape-aware routing side by side on one workload.
`tell_shifts(router)` makes a router an oracle: each simulated candidate's score is what
its host will do now, read from its profile and shift schedule, never measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from swarm._routing.router import Router
from swarm._routing.score import Score
from swarm._simulate.world import CountingProvider
from swarm.config import ModelConfig, ProviderConfig
from swarm.config._shifts import Shift
from swarm.providers.sim import SimEngine, SimProvider
from swarm.providers.sim._reply import Script

__all__ = ["Host", "KnownScore", "host_configs", "host_providers", "tell_shifts"]


@dataclass(frozen=True)
class Host:
    name: str
    profile: str
    """Catalog ref whose latency this host has; also the model name it is called with (the
    workload's bound prices each call by it)."""
    input_usd_per_m: float
    output_usd_per_m: float
    shifts: tuple[Shift, ...] = ()


def host_providers(
    hosts: Sequence[Host], script: Script, seed: int, time_scale: float
) -> dict[str, CountingProvider]:
    return {
        h.name: CountingProvider(
            SimProvider(
                h.name,
                engine=SimEngine(
                    profile=h.profile,
                    script=script,
                    seed=seed + i + 7,
                    time_scale=time_scale,
                    shifts=h.shifts,
                ),
            )
        )
        for i, h in enumerate(hosts)
    }


def host_configs(hosts: Sequence[Host], time_scale: float) -> dict[str, ProviderConfig]:
    return {
        h.name: ProviderConfig(
            kind="sim",
            profile=h.profile,
            time_scale=time_scale,
            models={
                h.profile: ModelConfig(
                    input_usd_per_m=h.input_usd_per_m, output_usd_per_m=h.output_usd_per_m
                )
            },
        )
        for h in hosts
    }


class KnownScore(Score):
    """A candidate's score as an oracle knows it: its profile at the speed and error rate
    of the shift in force now (`SimEngine.shift_now`); measurements change nothing."""

    def __init__(self, profile: object, engine: SimEngine) -> None:
        super().__init__(profile, 1.0)
        self._engine, self._ttft, self._tps = engine, self.ttft, self.tps

    def expected_s(self, out_tokens: int) -> float:
        speed, self.errors = self._engine.shift_now()
        self.ttft, self.tps = self._ttft / speed, self._tps * speed
        return super().expected_s(out_tokens)

    def success(self, ttft_s: float, tps: float) -> None:
        return None

    def failure(self, rate_limited: bool) -> None:
        return None

    def waited(self, seconds: float) -> None:
        return None


def tell_shifts(router: Router) -> None:
    """Give every simulated candidate of `router` a `KnownScore`."""
    for t in router.candidates():
        inner = t.provider.inner if isinstance(t.provider, CountingProvider) else t.provider
        if isinstance(inner, SimProvider):
            t.score = KnownScore(t.profile, inner.engine)
