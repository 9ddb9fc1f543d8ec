"""`swarm ask` and `swarm providers` end to end through `swarm.cli.main`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from swarm.cli import main

_KEY_VARS = [
    "CEREBRAS_API_KEY",
    "GROQ_API_KEY",
    "MOONSHOT_API_KEY",
    "NVIDIA_API_KEY",
    "DEEPINFRA_API_KEY",
    "TOGETHER_API_KEY",
    "FIREWORKS_API_KEY",
    "OPENROUTER_API_KEY",
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "SWARM_CONFIG",
]


@pytest.fixture
def no_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in _KEY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fast_sim_config(tmp_path: Path) -> Path:
    p = tmp_path / "fast.toml"
    p.write_text(
        '[providers.sim]\nkind = "sim"\ntime_scale = 0.001\n'
        '[tiers.speed]\nmodels = ["sim/cerebras/kimi-k2.6"]\n',
        encoding="utf-8",
    )
    return p


def test_ask_json_on_configured_simulator(
    no_keys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Kimi thinks ~5,000 tokens first, and max_tokens bounds thinking plus answer
    config = str(fast_sim_config(no_keys))
    code = main(["ask", "say hi", "--json", "--max-tokens", "5008", "--config", config])
    out, err = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    for key in (
        "text",
        "provider",
        "model",
        "ttft_s",
        "duration_s",
        "output_tokens",
        "tokens_per_s",
        "cost_usd",
        "attempts",
        "simulated",
    ):
        assert key in data
    assert data["simulated"] is True
    assert data["provider"] == "sim" and data["model"] == "cerebras/kimi-k2.6"
    assert data["attempts"] == 1
    assert len(data["text"].split()) == 8
    assert "simulator" in err


def test_ask_without_keys_or_config_runs_on_the_simulator(
    no_keys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the default profile's real latency (~6 s of simulated thinking): the honest default
    code = main(["ask", "hello", "--max-tokens", "3"])
    out, err = capsys.readouterr()
    assert code == 0
    # a thinking model spends 3 tokens thinking, as a real endpoint would, and says so
    assert out.strip() == ""
    assert "(stopped at max_tokens: 3 tokens, 3 of them thinking)" in err
    assert "no provider keys found: running on the simulator (simulated latency)" in err


def test_ask_bad_config_reports_file_and_key(
    no_keys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = no_keys / "bad.toml"
    p.write_text(
        '[providers.sim]\nkind = "sim"\n[tiers.speed]\nmodels = ["nope/x"]\n', encoding="utf-8"
    )
    assert main(["ask", "hi", "--config", str(p)]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and "tiers.speed.models[0]" in err


def test_ask_unknown_tier(no_keys: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "hi", "--tier", "turbo", "--config", str(fast_sim_config(no_keys))]) == 2
    assert "unknown tier 'turbo'" in capsys.readouterr().err


def test_providers_json_never_prints_keys(
    no_keys: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "sk-never-print-me-42"
    monkeypatch.setenv("GROQ_API_KEY", secret)
    assert main(["providers", "--json"]) == 0
    out = capsys.readouterr().out
    assert secret not in out
    data = json.loads(out)
    rows = {(r["provider"], r["model"]): r for r in data["models"]}
    groq = rows[("groq", "kimi-k2.6")]
    assert groq["keyed"] is True and groq["configured"] is True
    assert rows[("cerebras", "kimi-k2.6")]["keyed"] is False
    assert groq["out_usd_per_m"] > 0 and groq["output_tps"] > 0
    assert data["simulated"] is False
    assert os.environ["GROQ_API_KEY"] == secret


def test_providers_plain_text(no_keys: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["providers", "--config", str(fast_sim_config(no_keys))]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("provider\tmodel")
    assert "cerebras\tkimi-k2.6" in out
    assert "\nsim\t*" in out
    assert "simulator" in err
