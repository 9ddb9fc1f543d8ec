"""`swarm trace …` subcommands: --json outputs, plain tables, export files."""

from __future__ import annotations

import argparse
import inspect
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from swarm._analysis.known import ChainSpec, build_chain, build_fanout
from swarm._commands import trace as trace_cmd
from swarm.cli import main


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="swarm")
    trace_cmd.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    args = _parse(argv)
    assert not inspect.iscoroutinefunction(args.func)
    code = args.func(args)
    return code, capsys.readouterr().out


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    code, out = _run([*argv, "--json"], capsys)
    assert code == 0
    return json.loads(out)


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    return build_chain(tmp_path / "chain.jsonl", steps=2, chat_s=2.0, ttft_s=0.5, tool_s=1.0).path


def test_summary_json(chain: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = _json(["trace", "summary", str(chain)], capsys)
    assert s["wall_s"] == 6.0 and s["totals"]["calls"] == 2
    assert s["ledger"]["tests"] == pytest.approx(2.0)


def test_critical_path_json(chain: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cp = _json(["trace", "critical-path", str(chain)], capsys)
    assert [s["op"] for s in cp["steps"]] == ["chat", "execute_tool"] * 2
    assert cp["steps"][1]["start_s"] == pytest.approx(2.0)
    assert sum(cp["ledger"].values()) == pytest.approx(6.0)


def test_whatif_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = ChainSpec(steps=1, chat_s=10.0, tool_s=0.0, input_tokens=10_000, output_tokens=500)
    path = build_chain(tmp_path / "k.jsonl", chain).path
    r = _json(
        ["trace", "whatif", str(path), "--set", "speed=cerebras/kimi-k2.6", "--max-agents", "4"],
        capsys,
    )
    assert r["predicted"]["wall_s"] == pytest.approx(5.6, abs=0.05)
    assert r["max_agents"] == 4 and r["set"] == {"speed": "cerebras/kimi-k2.6"}


SPANLESS = {
    "empty": "",
    "no-resource-spans": '{"resourceSpans": []}\n',
    "no-scope-spans": '{"resourceSpans": [{"resource": {}, "scopeSpans": []}]}\n',
    "no-spans": '{"resourceSpans": [{"scopeSpans": [{"scope": {}, "spans": []}]}]}\n',
}


@pytest.mark.parametrize("shape", list(SPANLESS))
@pytest.mark.parametrize("extra", [[], ["--set", "speed=groq/llama-3.3-70b"], ["--json"]])
def test_whatif_on_a_trace_with_no_spans_says_so(
    shape: str, extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{shape}.jsonl"
    path.write_text(SPANLESS[shape])
    code = main(["trace", "whatif", str(path), *extra])
    out = capsys.readouterr().out
    assert code == 0
    if "--json" in extra:
        assert json.loads(out)["baseline_wall_s"] == 0
    assert "no root span: nothing to re-simulate" in out


def test_whatif_rejects_a_bad_set(chain: Path) -> None:
    from swarm.errors import ConfigError

    args = _parse(["trace", "whatif", str(chain), "--set", "speed"])
    with pytest.raises(ConfigError, match="KEY=PROVIDER/MODEL"):
        args.func(args)


def test_diff_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = build_chain(tmp_path / "a.jsonl", steps=2).path
    b = build_chain(tmp_path / "b.jsonl", steps=3).path
    d = _json(["trace", "diff", str(a), str(b)], capsys)
    assert d["wall_s"]["delta"] == pytest.approx(3.0)


def test_plain_output_when_piped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = build_fanout(tmp_path / "f.jsonl").path
    code, out = _run(["trace", "summary", str(path)], capsys)
    assert code == 0 and "ledger (critical path)" in out and "\x1b[" not in out
    code, out = _run(["trace", "critical-path", str(path)], capsys)
    assert code == 0 and "critical path (exact, along depends_on links): 3 steps over 11.5 s" in out
    code, out = _run(
        ["trace", "whatif", str(path), "--set", "speed=cerebras/llama-3.3-70b"], capsys
    )
    assert code == 0 and "predicted" in out
    code, out = _run(["trace", "diff", str(path), str(path)], capsys)
    assert code == 0 and "biggest changes" in out


def test_export_chrome_and_otlp_json(
    chain: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "chrome.json"
    code, _ = _run(
        ["trace", "export", str(chain), "--format", "chrome", "-o", str(out_file)], capsys
    )
    assert code == 0
    events = json.loads(out_file.read_text())["traceEvents"]
    assert sum(1 for e in events if e["ph"] == "X") == 6
    code, out = _run(["trace", "export", str(chain), "--format", "otlp-json"], capsys)
    assert code == 0 and out == chain.read_text()


def test_export_into_a_directory_names_the_file_for_speedscope_and_perfetto(
    chain: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, _ = _run(["trace", "export", str(chain), "-o", str(out_dir)], capsys)
    assert code == 0
    [written] = out_dir.iterdir()
    assert written.name.endswith(".trace.json")
    assert json.loads(written.read_text())["traceEvents"]
    args = _parse(["trace", "export", str(chain), "-o", str(tmp_path / "run.chrome.json")])
    assert args.func(args) == 0
    assert "name it *.trace.json" in capsys.readouterr().err


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    from swarm.errors import ConfigError

    args = _parse(["trace", "summary", str(tmp_path / "nope.jsonl")])
    with pytest.raises(ConfigError, match="no trace file"):
        args.func(args)


def test_send_and_view_are_wired() -> None:
    send = _parse(["trace", "send", "t.jsonl", "--otlp", "http://127.0.0.1:4318"])
    assert inspect.iscoroutinefunction(send.func) and send.otlp == "http://127.0.0.1:4318"
    view = _parse(["trace", "view", "t.jsonl", "--port", "0", "--no-browser"])
    assert view.no_browser and view.port == 0


def test_the_shipped_example_trace_summarises(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = tmp_path / "demo.jsonl"  # a copy: loading writes a column cache beside it
    shutil.copy(Path(__file__).parent.parent / "traces" / "examples" / "demo.jsonl", example)
    assert main(["trace", "summary", str(example), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["totals"]["calls"] == 26
    assert summary["spans"] == 101  # incl. three dependency waits linked to their merges
    assert summary["wall_s"] == pytest.approx(19.3, abs=0.1)
