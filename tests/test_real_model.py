"""`swarm ask` against a real model: llama.cpp's `llama-server` on 127.0.0.1.

Runs only when the server binary and the verified weights are already cached
(`python -m benchmarks.bench_real_model --only ask` builds and fetches them once; the cache
is `$SWARM_BENCH_CACHE`, else `~/.cache/swarm-bench`); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import _llama
from benchmarks.bench_real_model import config_text

pytestmark = pytest.mark.real_model


def _cached() -> tuple[Path, Path, _llama.Weights]:
    cache = _llama.cache_dir()
    binary = _llama.server_binary(cache)
    if binary is None:
        pytest.skip(f"no llama-server built in {cache}: run benchmarks.bench_real_model once")
    for key in ("0.5b", "1.5b"):  # the smaller model answers sooner
        weights = _llama.MODELS[key]
        if (model := _llama.weights_path(cache, weights)) is not None:
            return binary, model, weights
    pytest.skip(f"no verified weights in {cache / 'models'}: run benchmarks.bench_real_model")


def test_swarm_ask_gets_a_reply_from_llama_server(tmp_path: Path) -> None:
    binary, model, weights = _cached()
    log = tmp_path / "llama-server.log"
    with _llama.LlamaServer(binary, model, weights.served_name, parallel=1, log=log) as server:
        config = tmp_path / "swarm.toml"
        config.write_text(config_text(server))
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        prompt = "Write a Python function that reverses a string."
        command = [sys.executable, "-m", "swarm", "ask", prompt, "--config", str(config)]
        done = subprocess.run(
            [*command, "--max-tokens", "128", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["text"].strip()
    assert not out["simulated"]
    assert out["output_tokens"] > 0
