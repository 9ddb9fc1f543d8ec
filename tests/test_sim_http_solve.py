"""`swarm solve` against `swarm sim serve` over real HTTP: the demo's script plays every
role from the conversation alone, so the run goes as it does in-process."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "refactor.md"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("SWARM_CONFIG", None)
    return env


async def _served_url(process: anyio.abc.Process) -> str:
    assert process.stdout is not None
    line = b""
    with anyio.fail_after(30):
        while not line.endswith(b"\n"):
            line += await process.stdout.receive()
    text = line.decode().strip()
    assert " on http://127.0.0.1:" in text, text
    return text.rsplit(" on ", 1)[1]


@asynccontextmanager
async def sim_serve(*flags: str) -> AsyncIterator[str]:
    """`swarm sim serve --port 0 FLAGS` in a process of its own for the block; its URL."""
    serve = [sys.executable, "-m", "swarm", "sim", "serve", "--port", "0", *flags]
    process = await anyio.open_process(serve, cwd=ROOT, env=_env(), stderr=subprocess.DEVNULL)
    try:
        yield await _served_url(process)
    finally:
        process.terminate()
        with anyio.move_on_after(10, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()
        await process.aclose()


async def _solve_over_http(tmp_path: Path, *flags: str) -> dict[str, object]:
    """The demo solved against `swarm sim serve FLAGS`; its JSON report."""
    async with sim_serve("--time-scale", "0.02", *flags) as url:
        model = '["local/cerebras/kimi-k2.6"]'
        (tmp_path / "swarm.toml").write_text(
            f'[providers.local]\nkind = "openai"\nbase_url = "{url}"\napi_key_env = ""\n'
            f"[tiers.speed]\nmodels = {model}\n[tiers.reasoning]\nmodels = {model}\n"
        )
        args = [sys.executable, "-m", "swarm", "solve", str(TASK), "--json"]
        args += ["--config", "swarm.toml", "--traces-dir", "traces"]
        result = await anyio.run_process(args, cwd=tmp_path, env=_env(), check=False)
    output = result.stdout.decode() + result.stderr.decode()
    assert "Traceback" not in output, output
    assert result.returncode == 0, output
    report: dict[str, object] = json.loads(result.stdout)
    assert report["status"] == "done", output
    subtasks = report["subtasks"]
    assert isinstance(subtasks, list)
    merged = [s["id"] for s in subtasks if s["status"] == "merged"]
    assert sorted(merged) == ["docs", "item", "pricing", "stock"]
    assert not report["simulated"]  # the calls went over HTTP, through the OpenAI adapter
    return report


async def test_solve_the_demo_over_http_against_sim_serve(tmp_path: Path) -> None:
    await _solve_over_http(tmp_path)


async def test_calls_written_as_text_go_back_as_written_over_http(tmp_path: Path) -> None:
    """A model that writes its calls as text is sent them back as it wrote them, with the
    results as user turns: the simulator reads its own words, and the demo still merges."""
    await _solve_over_http(tmp_path, "--real-model", "--seed", "3")
    journal = sqlite3.connect(tmp_path / ".swarm" / "journal.db")
    replies = [json.loads(r) for (r,) in journal.execute("select result_json from calls")]
    journal.close()
    written = [r["message"]["written"] for r in replies if r["message"].get("written")]
    assert written  # calls were read from text, and kept as written
