"""Smoke test of `benchmarks.bench_parallel`: a tiny shop, real git, real pytest, 1 and 2 agents."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.bench_parallel import main

RUN_KEYS = {"wall_s", "merged", "status", "calls", "time_by_phase", "speedup"}


def test_every_subtask_merges_and_the_json_has_its_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keep = tmp_path / "keep"
    main(["--modules", "2", "--agents", "1,2", "--latency", "0", "--json", "--keep", str(keep)])
    result = json.loads(capsys.readouterr().out)
    assert result["cores"]["cpu_count"] >= 1
    assert result["suite_s"] > 0
    assert set(result["runs"]) == {"1", "2"}
    for run in result["runs"].values():
        assert RUN_KEYS <= set(run)
        assert (run["merged"], run["status"]) == (2, "done")
        assert run["calls"] == 2 * 3  # read, edit, finish per subtask; no fixer needed
        assert run["time_by_phase"]["checks"] > 0
    assert result["runs"]["1"]["speedup"] == 1.0
    repo = keep / "agents-2" / "repo"
    branch = subprocess.run(
        ["git", "branch", "--list", "swarm/*", "--format=%(refname:short)"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    shown = ["git", "show", f"{branch}:src/shop/m01.py"]
    module = subprocess.run(shown, cwd=repo, check=True, capture_output=True, text=True).stdout
    assert "def bulk_price(quantity: int, percent: int) -> int:" in module
