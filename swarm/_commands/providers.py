"""`swarm providers`: the catalog's providers and models, and which are configured and keyed.

Key values are never printed: only whether the named env var is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = ["register", "rows"]

_COLUMNS = (
    "provider",
    "model",
    "api_name",
    "in_usd_per_m",
    "out_usd_per_m",
    "cached_usd_per_m",
    "context_window",
    "max_output",
    "ttft_s",
    "output_tps",
    "reasoning_tokens",
    "key_env",
    "configured",
    "keyed",
)

_TERMINAL = {
    "provider": "provider",
    "model": "model",
    "keyed": "keyed",
    "in $/M": "in_usd_per_m",
    "out $/M": "out_usd_per_m",
    "context": "context_window",
    "TTFT s": "ttft_s",
    "tok/s": "output_tps",
    "configured": "configured",
    "cached $/M": "cached_usd_per_m",
    "max out": "max_output",
    "thinking": "reasoning_tokens",
    "key env": "key_env",
    "api name": "api_name",
}
"""On a terminal: title -> row key, most wanted first (columns that do not fit are left
out from the right, never cut mid-name); piped output and --json have every field."""


def register(subparsers: Any) -> None:
    """Add `providers` to the `swarm` parser."""
    p = subparsers.add_parser(
        "providers",
        help="list known providers and models, prices, speeds, and which are keyed",
        description="List catalog providers and models; show which are configured and keyed.",
    )
    p.add_argument("--config", metavar="FILE", help="swarm.toml to check against")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=_providers)


def rows(config_path: str | None, env: dict[str, str]) -> tuple[list[dict[str, Any]], Any]:
    """One row per catalog model plus one per configured non-catalog provider."""
    from swarm.catalog import PROVIDERS
    from swarm.config import load_config

    config = load_config(config_path, env=env)
    out: list[dict[str, Any]] = []
    for name, info in PROVIDERS.items():
        pc = config.providers.get(name)
        key_env = pc.api_key_env if pc and pc.api_key_env else info.api_key_env
        for short, m in info.models.items():
            mc = pc.models.get(short) if pc else None  # [providers.X.models."Y"] overrides
            out.append(
                {
                    "provider": name,
                    "model": short,
                    "api_name": m.api_name,
                    "in_usd_per_m": m.input_usd_per_m,
                    "out_usd_per_m": m.output_usd_per_m,
                    "cached_usd_per_m": _over(mc, "cached_input_usd_per_m", m),
                    "context_window": _over(mc, "context_window", m),
                    "max_output": _over(mc, "max_output_tokens", m),
                    "ttft_s": m.profile.ttft_s,
                    "output_tps": m.profile.output_tps,
                    "reasoning_tokens": m.profile.reasoning_tokens,
                    "key_env": key_env,
                    "configured": pc is not None,
                    "keyed": bool(env.get(key_env)),
                }
            )
    for name, pc in config.providers.items():
        if name in PROVIDERS:
            continue
        key_env = pc.api_key_env or ""
        out.append(
            {
                "provider": name,
                "model": "*",
                "api_name": "",
                "in_usd_per_m": None,
                "out_usd_per_m": None,
                "cached_usd_per_m": None,
                "context_window": None,
                "max_output": None,
                "ttft_s": None,
                "output_tps": None,
                "reasoning_tokens": None,
                "key_env": key_env,
                "configured": True,
                "keyed": pc.kind == "sim" or bool(key_env and env.get(key_env)),
            }
        )
    return out, config


def _over(mc: Any, key: str, info: Any) -> Any:
    """The config's figure for `key` when it sets one, else the catalog's."""
    value = getattr(mc, key, None) if mc is not None else None
    return value if value is not None else getattr(info, key)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _providers(args: argparse.Namespace) -> int:
    table, config = rows(args.config, dict(os.environ))
    if args.json:
        print(
            json.dumps(
                {"config": config.source, "simulated": config.simulated, "models": table}, indent=2
            )
        )
        return 0
    if sys.stdout.isatty():
        from rich.console import Console

        from swarm._commands._tables import table as draw

        cells = [[_cell(r[key]) for key in _TERMINAL.values()] for r in table]
        draw("swarm providers", list(_TERMINAL), cells, console=Console())
    else:
        print("\t".join(_COLUMNS))
        for r in table:
            print("\t".join(_cell(r[c]) for c in _COLUMNS))
    source = config.source or "built-in default"
    note = " (simulator: no provider keys found)" if config.simulated else ""
    print(f"config: {source}{note}", file=sys.stderr)
    return 0
