"""The viewer's data and server: columnar payload, span details, summary, what-if, CLI entry.

The page itself is driven in a real browser in `test_viewer_browser.py`."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.streams.text import TextReceiveStream

from swarm._analysis.known import build_fanout, span_id
from swarm._analysis.synthetic import write_synthetic_trace
from swarm._tracing import semconv as sc
from swarm._viewer.data import KINDS, ViewerData, histogram
from swarm._viewer.payload import decode
from swarm._viewer.serve import STATIC, main_view, serve_viewer
from swarm.errors import ConfigError
from tests.test_analysis_merges import write_merge_trace


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("viewer") / "run.jsonl"
    write_synthetic_trace(path, agents=12, calls_per_agent=6, seed=3)
    return path


def _columns(data: ViewerData) -> dict[str, Any]:
    return decode(data.spans_bytes)


def test_payload_columns_are_consistent(big_trace: Path) -> None:
    data = ViewerData.build_all(big_trace)
    cols = _columns(data)
    n = cols["n"]
    assert n == len(data.trace) > 100
    for key in ("start", "end", "lane", "depth", "kind", "tier", "wait", "parent", "name", "crit"):
        assert len(cols[key]) == n, key
    # page order: every lane's top row, then the other rows lane by lane; each row by start
    rows = list(zip(cols["depth"], cols["lane"], strict=True))
    top = rows.count((0, 0)) + sum(1 for d, lane in rows if d == 0 and lane > 0)
    assert all(d == 0 for d, _ in rows[:top]) and all(d > 0 for d, _ in rows[top:])
    assert [lane for _, lane in rows[top:]] == sorted(lane for _, lane in rows[top:])
    for row in set(rows):
        starts = [cols["start"][p] for p in range(n) if rows[p] == row]
        assert starts == sorted(starts), row
    assert min(cols["start"]) == 0
    assert all(e >= s for s, e in zip(cols["start"], cols["end"], strict=True))
    assert cols["kinds"] == list(KINDS)
    kinds = [cols["kinds"][k] for k in cols["kind"]]
    for i in range(n):
        p = cols["parent"][i]
        if p >= 0:  # a child is drawn in its parent's lane, one row deeper (agents open lanes)
            if kinds[i] != "agent":
                assert cols["lane"][i] == cols["lane"][p]
                assert cols["depth"][i] == min(3, cols["depth"][p] + 1)
        if kinds[i] == "agent":
            assert cols["depth"][i] == 0 and cols["lane"][i] > 0
        if kinds[i] == "chat":
            assert cols["tiers"][cols["tier"][i]] in ("speed", "reasoning")
        if kinds[i] == "wait":
            assert cols["waits"][cols["wait"][i]] in (
                sc.WAIT_QUEUE,
                sc.WAIT_RATE_LIMIT,
                sc.WAIT_BACKOFF,
                sc.WAIT_HEDGE,
                sc.WAIT_DEPENDENCY,
                sc.WAIT_MERGE,
            )
    agent_lanes = [cols["lane"][i] for i in range(n) if kinds[i] == "agent"]
    assert sorted(agent_lanes) == list(range(1, len(cols["lanes"])))
    assert 0 < sum(cols["crit"]) < n


def test_known_fanout_lanes_critical_path_and_links(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "fanout.jsonl")
    data = ViewerData.build_all(known.path)
    cols = _columns(data)
    assert cols["lanes"] == ["run", "planner", "coder", "coder 2", "coder 3", "fixer"]
    on_path = {data.trace.span_id[data.order[p]] for p in range(cols["n"]) if cols["crit"][p]}
    assert on_path == set(known.critical)
    summary = json.loads(data.summary_json)
    assert [c["index"] for c in summary["critical_path"]] == [
        data.page_of[s] for s in known.critical
    ]
    assert sum(summary["ledger"].values()) == pytest.approx(known.wall_s)
    assert set(summary["histograms"]) == {"speed", "reasoning"}
    assert summary["histograms"]["speed"]["ttft_s"]["n"] == 4
    # the fixer's depends_on link resolves to the first coder's page index
    fixer = data.page_of[span_id(len(known.specs) - 2)]
    detail = data.span_detail(fixer)
    assert detail["kind"] == "agent"
    assert [ln["index"] for ln in detail["links"]] == [data.page_of[span_id(3)]]
    assert detail["links"][0]["attributes"] == {sc.LINK_TYPE: sc.LINK_DEPENDS_ON}


def test_merge_batches_get_a_lane_rows_and_labels(tmp_path: Path) -> None:
    write_merge_trace(tmp_path / "merges.jsonl")
    data = ViewerData.build_all(tmp_path / "merges.jsonl")
    cols = _columns(data)
    assert cols["lanes"][:2] == ["run", "merge queue"] and cols["merge_lane"] == 1
    names = [cols["names"][c] for c in cols["name"]]
    marks = {names[int(p)] + " " + m["label"]: int(p) for p, m in cols["merges"].items()}
    assert set(marks) == {
        "swarm.merge batch batch of 3 · red",
        "swarm.merge batch batch of 2 · cancelled · ahead 1",
        "swarm.merge split split of 3 · round 1",
    }
    rows = {k: (cols["lane"][p], cols["depth"][p]) for k, p in marks.items()}
    assert sorted(rows.values()) == [(1, 0), (1, 0), (1, 1)]  # the overlapping one below
    checks = [p for p in range(cols["n"]) if names[p] == f"{sc.OP_TOOL} run_tests"]
    assert [(cols["lane"][p], cols["depth"][p]) for p in checks] == [(1, 2), (1, 2)]
    summary = json.loads(data.summary_json)["summary"]
    assert summary["merge_queue"]["batches"] == 2


def test_chat_detail_has_every_attribute_and_derived_figures(tmp_path: Path) -> None:
    known = build_fanout(tmp_path / "fanout.jsonl")
    data = ViewerData.build_all(known.path)
    p = data.page_of[span_id(2)]  # the planner's reasoning call: 2 s, TTFT 1 s, 100 tokens
    d = data.span_detail(p)
    assert d["name"] == "chat kimi-k2.6" and d["kind"] == "chat" and d["critical"]
    assert d["duration_ms"] == pytest.approx(2000)
    assert d["attributes"][sc.OUTPUT_TOKENS] == 100
    assert d["attributes"][sc.PROVIDER] == "moonshot"
    m = d["metrics"]
    assert m["ttft_s"] == pytest.approx(1.0)
    assert m["tokens_per_s"] == pytest.approx(100.0)
    assert m["input_tokens"] == 1000 and m["cost_usd"] == pytest.approx(0.001)
    assert [e["name"] for e in d["events"]] == [sc.FIRST_TOKEN_EVENT]
    assert d["events"][0]["offset_ms"] == pytest.approx(1000)
    assert d["parent"] == data.page_of[span_id(1)]


def test_histogram_bins() -> None:
    h = histogram([0.0, 1.0, 2.0, 3.0, 100.0], bins=4)
    assert h["n"] == 5 and sum(h["counts"]) == 5
    assert len(h["edges"]) == 5 and h["edges"][0] == 0
    assert h["counts"][-1] >= 1  # the tail lands in the last bin
    assert histogram([])["n"] == 0


def test_static_page_makes_no_external_requests() -> None:
    for name in ("index.html", "viewer.js", "viewer.css"):
        text = (STATIC / name).read_text()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, name


async def test_http_endpoints(big_trace: Path) -> None:
    async with serve_viewer(big_trace) as url, httpx.AsyncClient(base_url=url) as client:
        assert url.startswith("http://127.0.0.1:")
        page = await client.get("/")
        assert page.status_code == 200 and "<canvas" in page.text
        for asset in ("viewer.js", "viewer.css"):
            assert (await client.get(f"/static/{asset}")).status_code == 200
        cols = decode((await client.get("/api/spans")).content)
        assert cols["n"] > 100 and len(cols["start"]) == cols["n"]
        summary = (await client.get("/api/summary")).json()
        assert {"summary", "ledger", "ledger_run", "histograms", "critical_path", "catalog"} <= set(
            summary
        )
        assert summary["critical_path"] and summary["catalog"]
        chat = cols["kinds"].index("chat")
        i = cols["kind"].index(chat)
        detail = (await client.get(f"/api/span/{i}")).json()
        assert detail["index"] == i and sc.OUTPUT_TOKENS in detail["attributes"]
        assert (await client.get(f"/api/span/{cols['n']}")).status_code == 404
        assert (await client.get("/api/span/x")).status_code == 400

        same = (await client.get("/api/whatif")).json()
        assert isinstance(same, dict) and same
        model = summary["catalog"][0]
        faster = await client.get("/api/whatif", params={"speed": model, "max_agents": "4"})
        assert faster.status_code == 200, faster.text
        assert (await client.get("/api/whatif", params={"max_agents": "0"})).status_code == 400
        bad = await client.get("/api/whatif", params={"speed": "nowhere/no-model"})
        assert bad.status_code == 400 and "no-model" in bad.text


async def test_main_view_serves_until_interrupted(big_trace: Path) -> None:
    """`swarm trace view` as a user starts it, Ctrl-C'd: through the CLI, which takes
    SIGINT back where a shell started it ignored (`... &`, as a background pytest is)."""
    command = [sys.executable, "-m", "swarm", "trace", "view", str(big_trace), "--no-browser"]
    async with await anyio.open_process(command) as proc:
        assert proc.stdout is not None
        line = ""
        with anyio.fail_after(30):
            async for chunk in TextReceiveStream(proc.stdout):
                line += chunk
                if "\n" in line:
                    break
        assert line.startswith("swarm trace view: http://127.0.0.1:")
        url = line.split(": ", 1)[1].strip()
        async with httpx.AsyncClient() as client:
            assert (await client.get(url + "api/summary")).status_code == 200
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(15):
            assert await proc.wait() == 0


def test_main_view_missing_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Args:
        trace = str(tmp_path / "nope.jsonl")
        port = 0
        no_browser = True

    assert main_view(Args()) == 2
    assert "no such trace file" in capsys.readouterr().err


def test_lanes_are_labelled_by_subtask_and_role(big_trace: Path) -> None:
    cols = _columns(ViewerData.build(big_trace))
    agents = cols["lanes"][1:]
    assert agents[0] == "t0 · planner"
    assert all(re.fullmatch(r"t\d+ · (coder|fixer)( \d+)?", label) for label in agents[1:])
    roles = [cols["roles"][r] for r in cols["lane_role"]]
    subtasks = [cols["subtasks"][s] for s in cols["lane_subtask"]]
    assert roles[0] == subtasks[0] == ""  # the run's own lane
    for label, role, sub in zip(agents, roles[1:], subtasks[1:], strict=True):
        assert label.startswith(f"{sub} · {role}")
    providers = {cols["providers"][p] for p in cols["provider"]} - {""}
    assert providers  # chat spans carry their provider, for colouring and grouping
    chats = [p for p in range(cols["n"]) if cols["kinds"][cols["kind"][p]] == "chat"]
    assert all(0 <= cols["ttft"][p] <= cols["end"][p] - cols["start"][p] + 1e-3 for p in chats)


async def test_a_file_that_is_no_trace_is_reported_not_hung(tmp_path: Path) -> None:
    bad = tmp_path / "notes.jsonl"
    bad.write_text("these are notes, not spans\n")
    answers: list[int] = []

    async def view() -> None:
        async with serve_viewer(bad) as url, httpx.AsyncClient(base_url=url) as client:
            answers.append((await client.get("/api/spans")).status_code)
            await anyio.sleep_forever()  # ended by the load error, not by us

    with pytest.raises(ConfigError, match="line 1: not a JSON line"):
        await view()
    assert answers in ([], [500])  # the error may end the wait before the answer


async def test_live_answers_the_page_once_the_run_wrote_news(tmp_path: Path) -> None:
    """`/api/live?v=V` is a long poll: it waits while nothing new was read, and answers as
    soon as the followed trace grows."""
    whole = tmp_path / "whole.jsonl"
    write_synthetic_trace(whole, agents=80, calls_per_agent=6, seed=1)  # lines of 1,000 spans
    first, *rest = whole.read_bytes().splitlines(keepends=True)
    path = tmp_path / "run.jsonl"
    path.write_bytes(first)
    async with (
        serve_viewer(path, follow=True) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        now = (await client.get("/api/live", params={"v": -1})).json()
        while not now["bars"]:  # the server has not read the file yet
            now = (await client.get("/api/live", params={"v": now["version"]})).json()
        seen = now["cursor"]
        async with anyio.create_task_group() as tg:
            answer: list[dict[str, Any]] = []

            async def ask() -> None:
                params = {"since": seen, "v": now["version"]}
                answer.append((await client.get("/api/live", params=params)).json())

            tg.start_soon(ask)
            await anyio.sleep(0.3)
            assert not answer  # nothing new: the page's request waits
            with path.open("ab") as fh:
                fh.write(b"".join(rest))
        news = answer[0]
        assert news["version"] > now["version"] and news["bars"] and news["cursor"] > seen
