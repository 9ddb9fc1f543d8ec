"""Faults are injectable in one place each: a `kind = "sim"` config and `swarm simulate`.

Every `Faults` field is a `[providers.NAME.faults]` key and a flag of both `swarm simulate`
and `swarm sim serve`; `--first KIND` puts a failing provider ahead of the healthy one.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from swarm._commands import sim as sim_command
from swarm._commands import simulate as simulate_command
from swarm._commands._faults import _COUNTS, _HELP, faults_from_args
from swarm._simulate.simulation import SimSpec, run_simulation
from swarm.config import Faults, load_config
from swarm.errors import ConfigError, ProviderError
from swarm.messages import ChatRequest, Message
from swarm.providers._registry import build_providers
from swarm.providers.sim import SimProvider

ASK = ChatRequest(messages=[Message(role="user", content="hi")], max_tokens=8)


def _parser(register: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())  # type: ignore[operator]
    return parser


def _flags(faults: Faults) -> list[str]:
    out = []
    for name, value in faults.model_dump().items():
        if name == "quota_headers":
            out += [] if value else ["--no-quota-headers"]
        else:
            flag = "--retry-after" if name == "retry_after_s" else "--" + name.replace("_", "-")
            out += [flag, str(value)]
    return out


EVERY_FIELD = Faults(
    error_rate=0.1,
    rate_limit_rate=0.1,
    retry_after_s=-2.0,
    drop_rate=0.1,
    stall_rate=0.1,
    malformed_rate=0.1,
    hang_rate=0.1,
    refuse_rate=0.1,
    quota_tpm=1000,
    quota_rpm=10,
    quota_headers=False,
)


def test_every_fault_field_is_an_option_of_simulate_and_sim_serve() -> None:
    assert set(EVERY_FIELD.model_dump()) == set(Faults.model_fields)  # no field left out
    # the options are named without importing pydantic: the same fields, the same kinds
    assert [*_HELP, "quota_headers"] == list(Faults.model_fields)
    counts = {n for n, f in Faults.model_fields.items() if f.annotation == int | None}
    assert counts == _COUNTS
    args = _parser(simulate_command.register).parse_args(["simulate", *_flags(EVERY_FIELD)])
    assert simulate_command.spec_from_args(args).faults == EVERY_FIELD
    args = _parser(sim_command.register).parse_args(["sim", "serve", *_flags(EVERY_FIELD)])
    assert faults_from_args(args) == EVERY_FIELD


def test_first_puts_a_failing_provider_ahead() -> None:
    parser = _parser(simulate_command.register)
    spec = simulate_command.spec_from_args(parser.parse_args(["simulate", "--first", "hang"]))
    assert spec.first == Faults(hang_rate=1.0)
    spec = simulate_command.spec_from_args(parser.parse_args(["simulate", "--first", "error=0.3"]))
    assert spec.first == Faults(error_rate=0.3)
    for bad in ("nosuch", "error=2", "error=x"):
        with pytest.raises(ConfigError, match="--first"):
            simulate_command.spec_from_args(parser.parse_args(["simulate", "--first", bad]))


def test_bad_fault_options_name_the_flag() -> None:
    parser = _parser(simulate_command.register)
    with pytest.raises(ConfigError, match="--error-rate"):
        simulate_command.spec_from_args(parser.parse_args(["simulate", "--error-rate", "1.5"]))
    with pytest.raises(ConfigError, match=r"add up to 1\.2"):
        simulate_command.spec_from_args(
            parser.parse_args(["simulate", "--error-rate", "0.6", "--drop-rate", "0.6"])
        )


def _config(tmp_path: Path, faults: str) -> Path:
    path = tmp_path / "swarm.toml"
    path.write_text(
        '[providers.flaky]\nkind = "sim"\ntime_scale = 0\nstall_timeout_s = 0.05\n'
        f"[providers.flaky.faults]\n{faults}\n"
        '[tiers.speed]\nmodels = ["flaky/m"]\n'
    )
    return path


@pytest.mark.parametrize(
    ("faults", "kind", "status"),
    [
        ("error_rate = 1.0", "http", 500),
        ("refuse_rate = 1.0", "connect", None),
        ("hang_rate = 1.0", "stall", None),
        ("rate_limit_rate = 1.0\nretry_after_s = 0", "http", 429),
    ],
)
async def test_sim_config_keys_inject_faults(
    tmp_path: Path, faults: str, kind: str, status: int | None
) -> None:
    config = load_config(_config(tmp_path, faults), env={})
    provider = build_providers(config, env={})["flaky"]
    firsts: list[bool] = []
    with pytest.raises(ProviderError) as info:
        await provider.chat("m", ASK, on_first_token=lambda: firsts.append(True))
    assert (info.value.kind, info.value.status) == (kind, status)
    assert firsts == []  # each of these fails before the first token


def test_bad_fault_keys_name_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"swarm.toml:providers.flaky.faults.error_rate"):
        load_config(_config(tmp_path, "error_rate = 2"), env={})
    with pytest.raises(ConfigError, match=r"providers.flaky.faults.nosuch_rate: unknown key"):
        load_config(_config(tmp_path, "nosuch_rate = 0.1"), env={})


async def test_hang_holds_until_the_stall_timeout() -> None:
    provider = SimProvider(faults=Faults(hang_rate=1.0), time_scale=0, stall_timeout_s=0.05)
    with pytest.raises(ProviderError, match="stalled"):
        await provider.chat("m", ASK)


def test_simulate_reports_the_faults_it_ran_with() -> None:
    spec = SimSpec(agents=3, steps=9, tool_s=0, check_s=0, virtual=True, traces_dir=None)
    out = run_simulation(replace(spec, faults=Faults(error_rate=0.05), first=Faults(hang_rate=1)))
    assert out["faults"] == {"error_rate": 0.05}
    assert out["first_faults"] == {"hang_rate": 1.0}
    assert out["first_attempts"] > 0 and out["merged"] == 3
