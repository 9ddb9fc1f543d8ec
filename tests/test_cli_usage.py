"""The `swarm` command and a user's mistakes: every bad argument is a one-line message
naming it, never a traceback; exit 2 for usage errors, 1 for a failure, 0 for success."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from swarm import __version__
from swarm.cli import main
from tests.test_bad_input import swarm

ROOT = Path(__file__).resolve().parents[1]
TASK = str(ROOT / "tasks" / "refactor.md")
README = str(ROOT / "README.md")
TRACE = "{trace}"  # filled in with a real trace from `swarm simulate`


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("traces")
    args = ["simulate", "--agents", "1", "--steps", "2", "--virtual", "--traces-dir", str(out)]
    assert main(args) == 0
    (path,) = out.glob("*.jsonl")
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


CASES: list[tuple[list[str], int, str]] = [
    (["solve", TASK, "--budget", "deadline=15x"], 2, "--budget: deadline"),
    (["solve", TASK, "--budget", "usd=-1"], 2, "--budget: usd"),
    (["solve", TASK, "--max-agents", "0"], 2, "argument --max-agents: must be 1 or more"),
    (["solve", TASK, "--max-agents", "many"], 2, "argument --max-agents: expected a whole"),
    (["solve", TASK, "--repo", "nosuchdir"], 2, "--repo nosuchdir: does not exist"),
    (["solve", TASK, "--repo", README], 2, "README.md: is not a directory"),
    (["solve", TASK, "--repo", "."], 2, "is not a git repository"),
    (["solve", "nosuch.md"], 2, "nosuch.md: no such task file"),
    (["solve", TASK, "--config", "nosuch.toml"], 2, "nosuch.toml"),
    (["resume", "nosuchrun"], 2, "no run 'nosuchrun'"),
    (["simulate", "--agents", "0"], 2, "argument --agents: must be 1 or more, got 0"),
    (["simulate", "--steps", "-1"], 2, "argument --steps"),
    (["simulate", "--max-agents", "0"], 2, "argument --max-agents"),
    (["simulate", "--rpm", "0"], 2, "argument --rpm"),
    (["simulate", "--time-scale", "-1"], 2, "argument --time-scale"),
    (["simulate", "--tool-s", "nan"], 2, "argument --tool-s"),
    (["simulate", "--set", "speed=bogus"], 2, "--set"),
    (["simulate", "--error-rate", "2"], 2, "--error-rate"),
    (["simulate", "--deadline", "-1"], 2, "argument --deadline: must be a finite number above 0"),
    (["simulate", "--stall-timeout-s", "0"], 2, "argument --stall-timeout-s: must be a finite"),
    (["runs", "--state-dir", README], 2, "README.md: not a directory"),
    (["sim", "serve", "--port", "70000"], 2, "argument --port: a port is 0 to 65535"),
    (["ask", "hi", "--max-tokens", "0"], 2, "argument --max-tokens"),
    (["trace", "summary", README], 2, "README.md:line 1: not a JSON line"),
    (["trace", "summary", "nosuch.jsonl"], 2, "no trace file at nosuch.jsonl"),
    (["trace", "whatif", TRACE, "--max-agents", "0"], 2, "argument --max-agents"),
    (["trace", "whatif", TRACE, "--set", "nonsense"], 2, "--set"),
    (["trace", "send", README, "--otlp", "http://127.0.0.1:9"], 2, "README.md:line 1"),
    (["trace", "send", TRACE, "--otlp", "ftp://host"], 2, "argument --otlp"),
    (["trace", "send", TRACE, "--otlp", "http://127.0.0.1:{port}"], 1, "--otlp http://127"),
    (["trace", "view", "nosuch.jsonl", "--no-browser"], 2, "nosuch.jsonl"),
    (["trace", "view", TRACE, "--port", "-1"], 2, "argument --port"),
    (["nosuchcommand"], 2, "invalid choice: 'nosuchcommand'"),
]


@pytest.mark.parametrize(
    ("argv", "code", "message"), CASES, ids=[" ".join(c[0][:3]) for c in CASES]
)
def test_a_bad_argument_is_named_without_a_traceback(
    argv: list[str],
    code: int,
    message: str,
    trace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWARM_CONFIG", raising=False)
    port = str(_closed_port())
    argv = [a.replace(TRACE, str(trace)).replace("{port}", port) for a in argv]
    try:
        got = main(argv)  # anything but SystemExit escaping here would be a traceback
    except SystemExit as exc:  # argparse's usage errors
        got = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert message in out.err, out.err
    assert got == code, out.err
    assert not (tmp_path / ".swarm" / "runs").exists(), "refused input must not start a run"
    assert not (tmp_path / ".swarm" / "demo").exists(), "nor leave a copy of the demo"


_JSON_COMMANDS = ("solve", "resume", "simulate", "ask", "runs", "nosuchcommand")
JSON_CASES = [c for c in CASES if c[0][0] in _JSON_COMMANDS or c[0][:2] == ["trace", "summary"]]


@pytest.mark.parametrize(
    ("argv", "code", "message"), JSON_CASES, ids=[" ".join(c[0][:3]) for c in JSON_CASES]
)
def test_json_prints_one_object_holding_the_error(
    argv: list[str],
    code: int,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWARM_CONFIG", raising=False)
    try:
        got = main([*argv, "--json"])
    except SystemExit as exc:  # argparse's usage errors
        got = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    value = json.loads(out.out)  # exactly one JSON value: nothing before or after it
    assert got == code == value["exit_code"]
    assert message in value["error"], value
    assert "Traceback" not in out.err


async def test_json_prints_one_object_when_interrupted(tmp_path: Path) -> None:
    import os
    import signal
    import sys

    import anyio
    from aiohttp import web

    from swarm._serve import serve_app

    called = anyio.Event()

    async def silent(request: web.Request) -> web.StreamResponse:
        called.set()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            while True:
                await resp.write(b": keep-alive\n\n")
                await anyio.sleep(0.2)
        except ConnectionError:
            return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", silent)
    async with serve_app(app) as url:
        config = tmp_path / "swarm.toml"
        config.write_text(
            f'[providers.h]\nkind = "openai"\nbase_url = "{url}/v1"\n'
            '[tiers.speed]\nmodels = ["h/m"]\n'
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "swarm", "ask", "hi", "--config", str(config), "--json"]
        with anyio.fail_after(90):
            async with await anyio.open_process(argv, env=env, cwd=tmp_path) as proc:
                await called.wait()
                proc.send_signal(signal.SIGINT)
                assert proc.stdout is not None
                out = b"".join([chunk async for chunk in proc.stdout])
                await proc.wait()
    assert proc.returncode == 130
    assert json.loads(out) == {"status": "interrupted", "error": "interrupted", "exit_code": 130}


def test_json_keeps_what_other_processes_print_off_stdout(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import subprocess

    from swarm._commands._json_out import JsonOut

    with JsonOut() as out:
        # a child that inherited stdout (as Ray's log monitor does), and a stray print
        subprocess.run(["echo", "a log line from a child"], check=True)
        print("a stray line")
        print(json.dumps({"ok": True}))
        out.finish(0, None)
    got = capfd.readouterr()
    assert json.loads(got.out) == {"ok": True}
    assert "a log line from a child" in got.err and "a stray line" in got.err


def test_version_and_exit_codes_through_a_real_process(tmp_path: Path) -> None:
    version = swarm(tmp_path, "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"swarm {__version__}")
    usage = swarm(tmp_path, "simulate", "--agents", "0")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    assert "argument --agents" in usage.stderr


def test_a_port_in_use_is_a_failure_said_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code = main(["sim", "serve", "--port", str(busy.getsockname()[1])])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err and "address already in use" in err


def test_solve_json_prints_one_object_when_the_run_cannot_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "bad.md"
    task.write_text("---\nmax_agents: -3\n---\n# x\n\ny\n")
    code = main(["solve", str(task), "--repo", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 == out["exit_code"]
    assert out["status"] == "failed" and "max_agents must be at least 1" in out["error"]


def test_a_command_runs_with_fewer_collections_and_gives_the_thresholds_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run raises the youngest generation's threshold (hundreds of calls in flight
    make the default collect every few calls, for nothing); `main` called in a process
    of its own (a test, a script) finds its thresholds as they were."""
    import gc

    from swarm.cli import _collector_for_swarms

    before = gc.get_threshold()
    with _collector_for_swarms():
        assert gc.get_threshold()[0] >= 10_000
        assert gc.get_threshold()[1:] == before[1:]
    assert gc.get_threshold() == before
    assert main(["trace", "summary", "nosuch.jsonl"]) == 2
    assert gc.get_threshold() == before
    capsys.readouterr()
