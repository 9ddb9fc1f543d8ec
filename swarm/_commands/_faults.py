"""The simulator's fault options, shared by `swarm sim serve` and `swarm simulate`.

One flag per `swarm.config.Faults` field (`--error-rate 0.3`, `--retry-after 0`,
`--quota-tpm 60000`, `--no-quota-headers`, ...), so a figure measured on the simulator is
reproducible in one command, and `--first KIND[=RATE]` (simulate only) for a faulty
provider ahead of the healthy one in every tier (`--first hang`, `--first refuse`).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_fault_options", "faults_from_args", "parse_first"]

_HELP = {
    "error_rate": "share of calls answered 500",
    "rate_limit_rate": "share of calls answered 429 (random, no quota behind them)",
    "retry_after_s": "Retry-After of a random 429, seconds (0 or negative: hostile)",
    "drop_rate": "share of connections dropped mid-stream",
    "stall_rate": "share of streams that stop mid-way",
    "malformed_rate": "share of streams with a garbage chunk",
    "hang_rate": "share of calls that never send a first token",
    "refuse_rate": "share of connections refused at once",
    "quota_tpm": "provider-side tokens/min quota (429s past it)",
    "quota_rpm": "provider-side requests/min quota",
}


def _flag(name: str) -> str:
    return "--retry-after" if name == "retry_after_s" else "--" + name.replace("_", "-")


_COUNTS = frozenset({"quota_tpm", "quota_rpm"})
"""The fields given as whole numbers; the other rates and times are floats. With `_HELP`,
and `quota_headers`, this names `Faults`'s fields without importing pydantic, so `swarm
--help` starts fast (tests/test_fault_injection.py checks they stay the same)."""


def add_fault_options(parser: argparse.ArgumentParser, *, first: bool = False) -> None:
    """Add one option per fault field (and `--first` when `first`)."""
    group = parser.add_argument_group("faults of the simulated provider")
    for name in (*_HELP, "quota_headers"):
        if name == "quota_headers":
            group.add_argument(
                "--no-quota-headers",
                dest="quota_headers",
                action="store_false",
                default=None,
                help="send no x-ratelimit-* headers: 429s are all a client hears",
            )
            continue
        kind = int if name in _COUNTS else float
        group.add_argument(_flag(name), dest=name, type=kind, default=None, help=_HELP[name])
    if first:
        group.add_argument(
            "--first",
            metavar="KIND[=RATE]",
            help="a provider failing this way (rate 1 unless given) ahead of the healthy "
            "one in every tier: hang, refuse, error, stall, ...",
        )


def faults_from_args(args: argparse.Namespace) -> Any:
    """The `Faults` the options describe; a `ConfigError` naming the flag if invalid."""
    from pydantic import ValidationError

    from swarm.config import Faults
    from swarm.errors import ConfigError

    values = {
        n: getattr(args, n) for n in Faults.model_fields if getattr(args, n, None) is not None
    }
    try:
        return Faults(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = _flag(str(err["loc"][0])) if err["loc"] else "fault options"
        raise ConfigError(err["msg"], key=flag) from None


def parse_first(spec: str | None) -> Any:
    """`--first KIND[=RATE]` as the `Faults` of the failing first provider (None if unset)."""
    if spec is None:
        return None
    from pydantic import ValidationError

    from swarm.config import Faults
    from swarm.errors import ConfigError
    from swarm.providers.sim._faults import FAULT_KINDS

    kind, sep, rate = spec.partition("=")
    if kind not in FAULT_KINDS:
        raise ConfigError(f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}", key="--first")
    try:
        return Faults(**{f"{kind}_rate": float(rate) if sep else 1.0})
    except (ValueError, ValidationError) as exc:
        raise ConfigError(f"bad rate {rate!r}: {exc}", key="--first") from None
