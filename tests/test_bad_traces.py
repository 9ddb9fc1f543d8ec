"""A corpus of broken trace files through the real `swarm trace` commands.

Every broken file gives exit code 2 and a message naming the file and the line at fault;
none gives a traceback or hangs. A trace cut off mid-write is read, and said to be cut.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from swarm._tracing import semconv as sc
from swarm.cli import main

_RUN = "20260101-000000-abcd"
_T0 = 1_700_000_000_000_000_000


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def _span(sid: str, parent: str, name: str, start: int, end: int, **attrs: Any) -> dict[str, Any]:
    return {
        "traceId": "c2adf3360f7359e4d3f42718e83b3415",
        "spanId": sid,
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(_T0 + start),
        "endTimeUnixNano": str(_T0 + end),
        "attributes": [_attr(k.replace("__", "."), v) for k, v in attrs.items()],
        "status": {},
    }


def _doc(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("swarm.run.id", _RUN)]},
                "scopeSpans": [{"scope": {"name": "swarm"}, "spans": spans}],
            }
        ]
    }


def _good() -> list[dict[str, Any]]:
    """Two lines: an agent with a chat call, then the run's root span (written last)."""
    s = 1_000_000_000
    chat = _span(
        "00000000000000c1",
        "00000000000000a1",
        "chat m",
        s // 10,
        s // 2,
        gen_ai__operation__name=sc.OP_CHAT,
        gen_ai__request__model="m",
        gen_ai__usage__input_tokens=100,
        gen_ai__usage__output_tokens=10,
    )
    agent = _span(
        "00000000000000a1",
        "00000000000000f1",
        "invoke_agent coder",
        0,
        s,
        gen_ai__operation__name=sc.OP_AGENT,
        gen_ai__agent__name="coder",
    )
    root = _span(
        "00000000000000f1", "", "workflow swarm", 0, 2 * s, gen_ai__operation__name=sc.OP_WORKFLOW
    )
    return [_doc([chat, agent]), _doc([root])]


def _lines(docs: list[Any]) -> bytes:
    return b"".join(json.dumps(d).encode() + b"\n" for d in docs)


def _mutate(fn: Callable[[list[dict[str, Any]]], Any]) -> bytes:
    docs = copy.deepcopy(_good())
    out = fn(docs)
    return _lines(docs if out is None else out)


def _first_span(docs: list[dict[str, Any]]) -> dict[str, Any]:
    span: dict[str, Any] = docs[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    return span


def _set(*path: Any, value: Any) -> Callable[[list[dict[str, Any]]], None]:
    def edit(docs: list[dict[str, Any]]) -> None:
        node: Any = _first_span(docs)
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value

    return edit


def _set_doc(*path: Any, value: Any) -> Callable[[list[dict[str, Any]]], None]:
    def edit(docs: list[dict[str, Any]]) -> None:
        node: Any = docs[0]
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value

    return edit


_RS = ("resourceSpans", 0)
_SS = (*_RS, "scopeSpans", 0)

# name -> (file bytes, line at fault); each must be refused with exit 2, naming that line
BROKEN: dict[str, tuple[bytes, int]] = {
    "garbage": (b"\x00\x01\x02\xff\xfe binary\n", 1),
    "not-json-mid": (_lines(_good()[:1]) + b"{oops\n" + _lines(_good()[1:]), 2),
    "json-array": (b"[1, 2, 3]\n", 1),
    "json-number": (b"42\n", 1),
    "json-string": (b'"spans"\n', 1),
    "json-null": (b"null\n", 1),
    "json-true": (b"true\n", 1),
    "deep-nesting": (b"[" * 100_000 + b"]" * 100_000 + b"\n", 1),
    "deep-object": (b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"\n", 1),
    "nan": (b'{"resourceSpans": NaN}\n', 1),
    "bad-utf8-in-string": (b'{"resourceSpans": "\xff\xfe"}\n', 1),
    "resourceSpans-string": (_mutate(_set_doc("resourceSpans", value="x")), 1),
    "resourceSpans-int": (_mutate(_set_doc("resourceSpans", value=5)), 1),
    "resourceSpans-items-int": (_mutate(_set_doc("resourceSpans", value=[1])), 1),
    "resourceSpans-items-null": (_mutate(_set_doc("resourceSpans", value=[None])), 1),
    "resource-string": (_mutate(_set_doc(*_RS, "resource", value="x")), 1),
    "resource-attrs-int": (_mutate(_set_doc(*_RS, "resource", "attributes", value=[3])), 1),
    "resource-attr-no-value": (
        _mutate(_set_doc(*_RS, "resource", "attributes", value=[{"key": "swarm.run.id"}])),
        1,
    ),
    "resource-attr-no-key": (
        _mutate(_set_doc(*_RS, "resource", "attributes", value=[{"value": {}}])),
        1,
    ),
    "scopeSpans-string": (_mutate(_set_doc(*_RS, "scopeSpans", value="x")), 1),
    "scopeSpans-items-null": (_mutate(_set_doc(*_RS, "scopeSpans", value=[None])), 1),
    "spans-string": (_mutate(_set_doc(*_SS, "spans", value="abc")), 1),
    "spans-int": (_mutate(_set_doc(*_SS, "spans", value=7)), 1),
    "spans-items-int": (_mutate(_set_doc(*_SS, "spans", value=[1, 2])), 1),
    "spans-items-null": (_mutate(_set_doc(*_SS, "spans", value=[None])), 1),
    "spans-items-list": (_mutate(_set_doc(*_SS, "spans", value=[[]])), 1),
    "attributes-string": (_mutate(_set("attributes", value="x")), 1),
    "attributes-items-int": (_mutate(_set("attributes", value=[1])), 1),
    "attribute-no-key": (_mutate(_set("attributes", value=[{"value": {"intValue": "1"}}])), 1),
    "attribute-value-string": (
        _mutate(_set("attributes", value=[{"key": "gen_ai.usage.input_tokens", "value": "x"}])),
        1,
    ),
    "attribute-value-null": (
        _mutate(_set("attributes", value=[{"key": "gen_ai.usage.input_tokens", "value": None}])),
        1,
    ),
    "tokens-not-int": (
        _mutate(_set("attributes", 2, "value", value={"intValue": "many"})),
        1,
    ),
    "tokens-float-string": (
        _mutate(_set("attributes", 2, "value", value={"stringValue": "1.5e"})),
        1,
    ),
    "cost-not-number": (
        _mutate(_set("attributes", value=[{"key": sc.COST_USD, "value": {"stringValue": "$$"}}])),
        1,
    ),
    "ttft-list": (
        _mutate(
            _set(
                "attributes",
                value=[{"key": sc.TTFT_S, "value": {"arrayValue": {"values": 3}}}],
            )
        ),
        1,
    ),
    "kvlist-broken": (
        _mutate(
            _set(
                "attributes",
                value=[{"key": "gen_ai.agent.name", "value": {"kvlistValue": {"values": [1]}}}],
            )
        ),
        1,
    ),
    "kind-string": (_mutate(_set("kind", value="internal")), 1),
    "kind-null": (_mutate(_set("kind", value=None)), 1),
    "start-not-int": (_mutate(_set("startTimeUnixNano", value="yesterday")), 1),
    "start-inf": (_mutate(_set("startTimeUnixNano", value=1e400)), 1),
    "start-list": (_mutate(_set("startTimeUnixNano", value=[1])), 1),
    "end-not-int": (_mutate(_set("endTimeUnixNano", value="soon")), 1),
    "status-string": (_mutate(_set("status", value="ok")), 1),
    "status-code-string": (_mutate(_set("status", value={"code": "bad"})), 1),
    "spanId-int": (_mutate(_set("spanId", value=123)), 1),
    "spanId-list": (_mutate(_set("spanId", value=["a"])), 1),
    "traceId-int": (_mutate(_set("traceId", value=99)), 1),
    "parent-int": (_mutate(_set("parentSpanId", value=99)), 1),
    "links-string": (_mutate(_set("links", value="x")), 1),
    "links-items-int": (_mutate(_set("links", value=[5])), 1),
    "links-no-spanId": (
        _mutate(
            _set(
                "links",
                value=[
                    {
                        "attributes": [
                            {"key": sc.LINK_TYPE, "value": {"stringValue": sc.LINK_DEPENDS_ON}}
                        ]
                    }
                ],
            )
        ),
        1,
    ),
    "events-string": (
        _mutate(_set("events", value="x")),
        1,
    ),
    "first-token-time-bad": (
        _mutate(_set("events", value=[{"name": sc.FIRST_TOKEN_EVENT, "timeUnixNano": "x"}])),
        1,
    ),
    "parent-loop-self": (_mutate(_set("parentSpanId", value="00000000000000c1")), 1),
}


def _two_span_loop(docs: list[dict[str, Any]]) -> None:
    spans = docs[0]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[1]["parentSpanId"] = spans[0]["spanId"]  # agent <- chat <- agent
    docs[1]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["parentSpanId"] = "00000000000000a1"


BROKEN["parent-loop-two"] = (_mutate(_two_span_loop), 1)

COMMANDS = (["summary"], ["summary", "--json"], ["critical-path"], ["whatif"], ["diff"])


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`swarm ...` in-process, in a thread so a hang fails the test instead of the run."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["code"] = main(argv)
        except SystemExit as exc:  # argparse
            result["code"] = exc.code
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f"swarm {' '.join(argv)} hangs"
    if "error" in result:
        raise AssertionError(f"swarm {' '.join(argv)} raised") from result["error"]
    out, err = capsys.readouterr()
    return int(result["code"]), out + err


def test_the_corpus_is_large() -> None:
    assert len(BROKEN) >= 50


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_trace_is_refused_naming_file_and_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, line = BROKEN[name]
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(data)
    for command in COMMANDS:
        extra = [str(path)] if command[0] == "diff" else []
        code, output = _cli(["trace", *command, str(path), *extra], capsys)
        assert code == 2, (command, output)
        assert "Traceback" not in output
        assert f"{path}:line {line}:" in output, (command, output)


def test_view_refuses_a_broken_trace_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(BROKEN["spans-items-int"][0])
    code, output = _cli(["trace", "view", str(path), "--no-browser"], capsys)
    assert code == 2
    assert f"{path}:line 1:" in output


def test_a_good_trace_reads_without_complaint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "good.jsonl"
    path.write_bytes(_lines(_good()))
    code, output = _cli(["trace", "summary", str(path)], capsys)
    assert code == 0, output
    assert "3 spans" in output
    assert "incomplete" not in output


@pytest.mark.parametrize("cut", ["mid-line", "whole-lines"])
def test_a_truncated_trace_is_reported_as_such(
    cut: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed mid-write: the spans before the cut are read, and the cut is named."""
    whole = _lines(_good())
    first = whole.index(b"\n") + 1
    data = whole[: first + 40] if cut == "mid-line" else whole[:first]
    path = tmp_path / "cut.jsonl"
    path.write_bytes(data)
    for command in (["summary"], ["critical-path"], ["summary", "--json"]):
        code, output = _cli(["trace", *command, str(path)], capsys)
        assert code == 0, output
        assert "Traceback" not in output
        assert f"{path}" in output and "incomplete" in output, output
        if cut == "mid-line":
            assert "line 2" in output
