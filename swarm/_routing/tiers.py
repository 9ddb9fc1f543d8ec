"""A tier's candidates and constraints, resolved once when the router starts.

`tier_refs` expands wildcard candidates (`*/kimi-k2.6`: every configured provider with
its key set that serves those weights: the simulator serves any, a provider serves what
its `[providers.NAME.models]` or its catalog entry lists), so adding a provider to the
config is all it takes for such a tier to consider it. `constraints_for` merges a tier's
constraints with a role's (`[routing.roles.NAME]`) over them; `with_task_tiers` lays a
task's front-matter constraints over the config's tiers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from swarm._routing.candidate import Target
from swarm._routing.select import Policy
from swarm.config import ProviderConfig, SwarmConfig, config_key
from swarm.config._routing import Constraints, merge_constraints
from swarm.errors import ConfigError

__all__ = ["constraints_for", "make_policy", "serves", "tier_refs", "with_task_tiers"]


def serves(name: str, pc: ProviderConfig, weights: str, env: Mapping[str, str]) -> bool:
    """Does the configured provider `name` serve `weights`, with its key set?"""
    from swarm.catalog import PROVIDERS

    if pc.kind == "sim":
        return True
    if pc.api_key_env and not env.get(pc.api_key_env):
        return False
    if weights in pc.models:
        return True
    info = PROVIDERS.get(name)
    return info is not None and weights in info.models


def tier_refs(config: SwarmConfig, tier: str, env: Mapping[str, str]) -> list[str]:
    """The tier's candidate refs, wildcards expanded in config order, without repeats."""
    out: list[str] = []
    for i, ref in enumerate(config.tiers[tier].models):
        if not ref.startswith("*/"):
            if ref not in out:
                out.append(ref)
            continue
        weights = ref[2:]
        found = [
            f"{name}/{weights}"
            for name, pc in config.providers.items()
            if serves(name, pc, weights, env)
        ]
        if not found:
            raise ConfigError(
                f"no configured provider with its key set serves {weights!r}",
                path=config.source,
                key=config_key(config.source, "tiers", tier, "models", i),
            )
        out.extend(r for r in found if r not in out)
    return out


def constraints_for(config: SwarmConfig, tier: str, role: str | None) -> Constraints:
    tc = config.tiers[tier]
    base = Constraints.model_validate({k: getattr(tc, k) for k in tc.model_fields_set & _KEYS})
    return merge_constraints(base, config.routing.roles.get(role) if role else None)


_KEYS = frozenset(Constraints.model_fields)


def make_policy(config: SwarmConfig, targets: list[Target], tier: str, role: str | None) -> Policy:
    """The policy of `tier` for `role`; a ConfigError names the tier's or role's key."""
    name = f"tier {tier!r}" + (f" for role {role!r}" if role else "")
    key = ("routing", "roles", role) if role else ("tiers", tier)
    r = config.routing
    try:
        return Policy(
            name, targets, constraints_for(config, tier, role), (r.explore_every, r.hysteresis)
        )
    except ConfigError as exc:
        where = config_key(config.source, *key)
        raise ConfigError(str(exc), path=config.source, key=where) from None


def with_task_tiers(
    config: SwarmConfig, tiers: Mapping[str, Mapping[str, Any]], source: str
) -> SwarmConfig:
    """`config` with a task's front-matter constraints (`tiers: {speed: {sort: price}}`)
    over its tiers'; a bad key or value is a ConfigError naming the task file and key."""
    if not tiers:
        return config
    out = dict(config.tiers)
    for tier, settings in tiers.items():
        if tier not in out:
            known = ", ".join(sorted(out))
            raise ConfigError(f"unknown tier {tier!r}; configured tiers: {known}", path=source)
        try:
            over = Constraints.model_validate(settings)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in ("tiers", tier, *err["loc"]))
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            raise ConfigError(str(msg), path=source, key=where) from None
        update = {k: getattr(over, k) for k in over.model_fields_set}
        out[tier] = out[tier].model_copy(update=update)
    return config.model_copy(update={"tiers": out})
