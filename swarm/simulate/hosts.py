"""Several simulated providers serving the same weights, for routing experiments.

A `Host` is one provider of the speed tier's weights with its own catalog profile, prices
and shifts (`swarm._sim_shifts`): `SimSpec(hosts=(Host(...), ...), sort="latency")` makes
the speed tier every host ranked by that sort, so a benchmark can set fixed
order, latency, balanced and shape-aware routing side by side on one workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from swarm._sim_shifts import Shift
from swarm.config import ModelConfig, ProviderConfig
from swarm.providers.sim import SimEngine, SimProvider
from swarm.providers.sim_reply import Script
from swarm.simulate.world import CountingProvider

__all__ = ["Host", "host_configs", "host_providers"]


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
