"""Config loading: sources, catalog presets, defaults with and without keys, error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm.config import ProviderConfig, SwarmConfig, load_config, split_ref
from swarm.errors import ConfigError
from swarm.providers._registry import build_providers


def write(tmp_path: Path, text: str, name: str = "swarm.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


FULL = """
[providers.cerebras]
max_concurrency = 64
rpm = 600
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8000/v1"
api_key_env = "LOCAL_KEY"
[providers.local.models."kimi-k2.6"]
input_usd_per_m = 0.6
tpm = 100000
[tiers.speed]
models = ["cerebras/kimi-k2.6", "local/kimi-k2.6"]
budget = { usd = 2.5 }
[tiers.reasoning]
models = ["cerebras/gpt-oss-120b"]
[roles]
planner = "speed"
[routing]
max_attempts = 4
hedge = false
[budget]
usd = 10
tokens = 1000000
"""


def test_full_config_parses_and_inherits_catalog_preset(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL), env={})
    cer = cfg.providers["cerebras"]
    assert cer.kind == "openai"
    assert cer.base_url == "https://api.cerebras.ai/v1"
    assert cer.api_key_env == "CEREBRAS_API_KEY"
    assert cer.max_concurrency == 64 and cer.rpm == 600
    assert cfg.providers["local"].models["kimi-k2.6"].input_usd_per_m == 0.6
    assert cfg.tiers["speed"].models == ["cerebras/kimi-k2.6", "local/kimi-k2.6"]
    assert cfg.tiers["speed"].budget is not None and cfg.tiers["speed"].budget.usd == 2.5
    assert cfg.routing.max_attempts == 4 and cfg.routing.hedge is False
    assert cfg.budget.usd == 10 and cfg.budget.tokens == 1_000_000
    assert cfg.tier_for_role("planner") == "speed"
    assert cfg.tier_for_role("coder") == "speed"
    assert cfg.tier_for_role("unknown-role") == "speed"
    assert not cfg.simulated
    assert cfg.source is not None and cfg.source.endswith("swarm.toml")


def test_config_is_frozen(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL), env={})
    with pytest.raises(ValueError, match="frozen"):
        cfg.providers["cerebras"].rpm = 1


def test_default_without_keys_is_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(env={})
    assert cfg.simulated
    assert cfg.source is None
    assert cfg.providers["sim"].kind == "sim"
    assert cfg.tiers["speed"].models == ["sim/cerebras/gpt-oss-120b"]
    assert cfg.tiers["reasoning"].models == ["sim/cerebras/kimi-k2.6"]
    assert cfg.tier_for_role("planner") == "reasoning"


def test_default_with_keys_uses_keyed_catalog_providers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(env={"CEREBRAS_API_KEY": "sk-aaa111", "MOONSHOT_API_KEY": "sk-bbb222"})
    assert set(cfg.providers) == {"cerebras", "moonshot"}
    assert not cfg.simulated
    speed = cfg.tiers["speed"].models
    assert speed[0].startswith("cerebras/")
    assert "moonshot/kimi-k2.6" in speed
    assert "sk-aaa111" not in repr(cfg) and "sk-bbb222" not in repr(cfg)


def test_sources_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path,
        '[tool.swarm.tiers.speed]\nmodels = ["sim/cerebras/llama-3.3-70b"]\n'
        '[tool.swarm.providers.sim]\nkind = "sim"\n',
        "pyproject.toml",
    )
    assert load_config(env={}).source == "pyproject.toml"
    write(tmp_path, '[providers.sim]\nkind = "sim"\n[tiers.speed]\nmodels = ["sim/x"]\n')
    assert load_config(env={}).source == "swarm.toml"
    other = write(
        tmp_path, '[providers.s2]\nkind = "sim"\n[tiers.speed]\nmodels = ["s2/x"]\n', "other.toml"
    )
    assert load_config(env={"SWARM_CONFIG": str(other)}).source == str(other)
    assert set(load_config(other, env={}).providers) == {"s2"}


def test_pyproject_without_tool_swarm_falls_back_to_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, '[project]\nname = "x"\n', "pyproject.toml")
    assert load_config(env={}).simulated


def test_unknown_provider_in_tier_names_file_key_and_configured(tmp_path: Path) -> None:
    p = write(tmp_path, FULL.replace('"local/kimi-k2.6"', '"nope/kimi-k2.6"'))
    with pytest.raises(ConfigError) as info:
        load_config(p, env={})
    msg = str(info.value)
    assert str(p) in msg
    assert "tiers.speed.models[1]" in msg
    assert "cerebras, local" in msg
    assert info.value.key == "tiers.speed.models[1]"


def test_type_error_names_key(tmp_path: Path) -> None:
    p = write(tmp_path, FULL.replace("max_concurrency = 64", 'max_concurrency = "lots"'))
    with pytest.raises(ConfigError, match=r"providers\.cerebras\.max_concurrency: .*integer"):
        load_config(p, env={})


def test_unknown_key_is_rejected(tmp_path: Path) -> None:
    p = write(tmp_path, FULL.replace("max_attempts = 4", "max_atempts = 4"))
    with pytest.raises(ConfigError, match=r"routing\.max_atempts: unknown key"):
        load_config(p, env={})


def test_tier_ref_without_slash(tmp_path: Path) -> None:
    p = write(tmp_path, FULL.replace('"cerebras/gpt-oss-120b"', '"gpt-oss-120b"'))
    with pytest.raises(
        ConfigError, match=r"tiers\.reasoning\.models\[0\]: expected 'provider/model'"
    ):
        load_config(p, env={})


def test_custom_provider_needs_kind(tmp_path: Path) -> None:
    p = write(
        tmp_path, '[providers.mine]\nbase_url = "http://x"\n[tiers.speed]\nmodels=["mine/m"]\n'
    )
    with pytest.raises(ConfigError, match=r"providers\.mine\.kind"):
        load_config(p, env={})


def test_unknown_kind_is_refused_when_providers_are_built(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        '[tool.swarm.providers.mine]\nkind = "grpc"\nbase_url = "http://x"\n'
        '[tool.swarm.tiers.speed]\nmodels = ["mine/m"]\n',
        "pyproject.toml",
    )
    cfg = load_config(p, env={})
    with pytest.raises(ConfigError, match=r"known kinds: anthropic, openai, sim") as info:
        build_providers(cfg, env={})
    assert info.value.path == str(p)
    assert info.value.key == "tool.swarm.providers.mine.kind"
    assert "'grpc'" in str(info.value)


def test_registry_builds_each_kind_from_its_module() -> None:
    from swarm.providers._registry import build_provider, kinds

    for kind in kinds():
        config = ProviderConfig(kind=kind, base_url="http://127.0.0.1:1/v1")
        provider = build_provider(kind, config, env={})
        assert provider.kind == kind and provider.name == kind


def test_role_to_unknown_tier(tmp_path: Path) -> None:
    p = write(tmp_path, FULL.replace('planner = "speed"', 'planner = "thinking"'))
    with pytest.raises(ConfigError, match=r"roles\.planner: unknown tier 'thinking'"):
        load_config(p, env={})


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    p = write(tmp_path, "[tiers.speed]\nmodels = [\n\n= broken\n")
    with pytest.raises(ConfigError) as info:
        load_config(p, env={})
    assert str(p) in str(info.value)
    assert info.value.key is not None and info.value.key.startswith("line ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml", env={})


def test_pyproject_errors_are_prefixed(tmp_path: Path) -> None:
    p = write(tmp_path, "[tool.swarm.routing]\nmax_attempts = 0\n", "pyproject.toml")
    with pytest.raises(ConfigError, match=r"tool\.swarm\.routing\.max_attempts"):
        load_config(p, env={})


def test_split_ref() -> None:
    assert split_ref("sim/cerebras/kimi-k2.6") == ("sim", "cerebras/kimi-k2.6")
    with pytest.raises(ValueError, match="provider/model"):
        split_ref("kimi")


async def test_build_providers_reads_keys_from_env_only(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL), env={})
    providers = build_providers(cfg, {"CEREBRAS_API_KEY": "sk-secret-xyz"})
    try:
        assert set(providers) == {"cerebras", "local"}
        assert providers["cerebras"].kind == "openai"
        assert providers["cerebras"].address == "api.cerebras.ai"
        assert "sk-secret-xyz" not in cfg.model_dump_json()
    finally:
        for p in providers.values():
            await p.aclose()


def test_simulated_property() -> None:
    assert not SwarmConfig().simulated


def test_custom_providers_without_tiers(tmp_path: Path) -> None:
    p = write(tmp_path, '[providers.mine]\nkind = "openai"\nbase_url = "http://127.0.0.1:1/v1"\n')
    with pytest.raises(ConfigError, match=r"tiers: no \[tiers\]") as info:
        load_config(p, env={})
    assert info.value.path == str(p)


def test_keyed_preset_without_tiers_gets_default_tiers(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[providers.groq]\nrpm = 30\n"), env={})
    assert "groq/kimi-k2.6" in cfg.tiers["speed"].models
    assert cfg.providers["groq"].rpm == 30


def test_merge_section_and_a_tasks_merge_over_it(tmp_path: Path) -> None:
    from swarm.run._task import parse_task

    path = write(
        tmp_path,
        "[merge]\nbatch_size = {min = 2, max = 8}\nmax_parallel_checks = 3\ncheck_timeout = '5m'\n",
    )
    merge = load_config(path, env={}).merge
    assert (merge.batch_size.min, merge.batch_size.max, merge.parallel_checks) == (2, 8, 3)
    assert merge.check_timeout == 300
    task = parse_task("---\nmerge: {batch_size: {max: 1}, max_parallel_checks: 1}\n---\n# T\n\nx\n")
    over = merge.over(task.merge)
    assert over.one_at_a_time and over.check_timeout == 300


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[merge]\nbatch_size = {min = 4, max = 2}\n", "merge.batch_size"),
        ("[merge]\nmax_parallel_checks = 0\n", "merge.max_parallel_checks"),
        ("[merge]\ncheck_timeout = 'soon'\n", "merge.check_timeout"),
        ("[merge]\nbatch = 3\n", "merge.batch"),
    ],
)
def test_bad_merge_settings_name_their_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), env={})
    assert key in str(caught.value)


def test_cluster_section_parses_and_a_bad_kind_names_its_key(tmp_path: Path) -> None:
    text = FULL + '\n[cluster]\nkind = "ray"\naddress = "10.0.0.5:6379"\nmemory_mb = 2048\n'
    cluster = load_config(write(tmp_path, text), env={}).cluster
    assert (cluster.kind, cluster.address, cluster.memory_mb) == ("ray", "10.0.0.5:6379", 2048)
    assert cluster.cpus_per_workspace == 1.0
    assert load_config(write(tmp_path, FULL), env={}).cluster.kind == "local"
    with pytest.raises(ConfigError, match=r"cluster\.kind"):
        load_config(write(tmp_path, FULL + '\n[cluster]\nkind = "k8s"\n'), env={})
