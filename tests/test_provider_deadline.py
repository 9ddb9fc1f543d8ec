"""Hostile providers through the real `swarm ask`: each ends with a clear error within its
deadline, and `--json` prints one object holding it; a model that writes on and on ends
at its deadline with what it wrote, said to be cut there.

A loopback aiohttp server answers every call in one hostile way: a token now and then for
ever, keep-alives and no token, a chunk over the size bound, `tool_calls` as an object, a
tool call whose `index` is `"zero"`, `429` with `Retry-After: -5`. `swarm ask` runs as a
real process against it; the call's deadline (from the model's speed: a 1 s first-token
floor plus 4 x 4 tokens at 10 tok/s) bounds the slow ones.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from aiohttp import web

from swarm._routing.router import Router
from swarm._serve import serve_app
from swarm.config import ProviderConfig, RoutingConfig, SwarmConfig, TierConfig
from swarm.errors import MalformedReply, ProviderError
from swarm.messages import ChatRequest, Message
from swarm.providers._bounds import MAX_EVENT_BYTES
from swarm.providers._call_deadline import (
    DEADLINE_CUT,
    DEFAULT_OUTPUT_TOKENS,
    MIN_DECODE_TPS,
    UNKNOWN_DECODE_TPS,
    CallDeadline,
)

ROOT = Path(__file__).resolve().parents[1]


def _chunk(delta: object) -> bytes:
    body = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


FINISH = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}\n\n'
DONE = b"data: [DONE]\n\n"
CALL = {"id": "a", "function": {"name": "f", "arguments": "{}"}}


async def _hostile(request: web.Request) -> web.StreamResponse:
    shape = request.match_info["shape"]
    if shape == "retry-after-negative":
        body = {"error": {"message": "slow down"}}
        return web.json_response(body, status=429, headers={"Retry-After": "-5"})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    try:
        if shape == "drip":  # a token every so often, for ever: no silence is long enough
            while True:
                await resp.write(_chunk({"content": "x"}))
                await anyio.sleep(0.3)
        elif shape == "runaway":  # a model that writes fast and never stops (nor loops)
            for n in itertools.count(0, 10):
                steps = "".join(f"step {i} then " for i in range(n, n + 10))
                await resp.write(_chunk({"content": steps}))
                await anyio.sleep(0.001)
        elif shape == "keep-alive":
            while True:
                await resp.write(b": keep-alive\n\n")
                await anyio.sleep(0.1)
        elif shape == "huge-chunk":  # 20 MB in one event
            await resp.write(b"data: " + b"x" * (20 * 1024 * 1024))
        elif shape == "tool-calls-object":
            await resp.write(_chunk({"tool_calls": {"index": 0, **CALL}}))
            await resp.write(FINISH + DONE)
        elif shape == "index-zero":
            await resp.write(_chunk({"tool_calls": [{"index": "zero", **CALL}]}))
            await resp.write(FINISH + DONE)
        await resp.write_eof()
    except ConnectionError:  # the client gave up, as it should
        pass
    return resp


@asynccontextmanager
async def hostile_server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/{shape}/v1/chat/completions", _hostile)
    async with serve_app(app) as url:
        yield url


HOSTILE = {
    "drip": "deadline ran out",
    "keep-alive": "deadline ran out",
    "huge-chunk": f"a streamed event over {MAX_EVENT_BYTES // (1024 * 1024)} MiB",
    "tool-calls-object": "`tool_calls` must be a list, got an object",
    "index-zero": "a tool call's `index` must be a whole number, got 'zero'",
    "retry-after-negative": "rate limited (429)",
}


async def _swarm_ask(
    tmp_path: Path, shape: str, setting: str, *args: str
) -> subprocess.CompletedProcess[bytes]:
    """`swarm ask hi ARGS`, a real process, against the server's `shape` with `setting` on
    its provider."""
    async with hostile_server() as url:
        config = tmp_path / "swarm.toml"
        config.write_text(
            f'[providers.h]\nkind = "openai"\nbase_url = "{url}/{shape}/v1"\n'
            f'{setting}\n[tiers.speed]\nmodels = ["h/m"]\n'
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("SWARM_CONFIG", None)
        argv = [sys.executable, "-m", "swarm", "ask", "hi", *args, "--config", str(config)]
        with anyio.fail_after(90):  # the deadlines are ~3 s; the rest is a loaded machine
            return await anyio.run_process(argv, env=env, cwd=tmp_path, check=False)


@pytest.mark.parametrize("shape", list(HOSTILE))
async def test_swarm_ask_ends_with_a_clear_error_within_its_deadline(
    shape: str, tmp_path: Path
) -> None:
    done = await _swarm_ask(tmp_path, shape, "stall_timeout_s = 1", "--max-tokens", "4", "--json")
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr
    out = json.loads(stdout)  # exactly one JSON object, nothing else on stdout
    assert out["exit_code"] == 1
    assert HOSTILE[shape] in out["error"], out
    assert HOSTILE[shape] in stderr


async def test_a_candidate_that_runs_out_of_time_fails_over_to_the_next() -> None:
    async with hostile_server() as url:
        providers = {
            "slow": ProviderConfig(
                kind="openai", base_url=f"{url}/keep-alive/v1", total_timeout_s=1.5
            ),
            "bad": ProviderConfig(kind="openai", base_url=f"{url}/index-zero/v1"),
        }
        config = SwarmConfig(
            providers=providers,
            tiers={"speed": TierConfig(models=["slow/m", "bad/m"])},
            routing=RoutingConfig(
                hedge=False, tier_retries=0, backoff_initial_s=0.05, backoff_max_s=0.1
            ),
        )
        request = ChatRequest(messages=[Message.user("hi")], max_tokens=4)
        async with Router(config, env={}) as router:
            with anyio.fail_after(30), pytest.raises(MalformedReply) as info:
                await router.chat(request)
    assert info.value.provider == "bad" and "`index`" in str(info.value)


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        # no token ever: two first-token deadlines (a try and a retry), not the whole call's
        ("keep-alive", "no first token in two tries: 0 s each; total_timeout_s"),
        # tokens, too slowly for ever: the whole call's deadline, retries included
        ("drip", "deadline ran out (2 s, "),
    ],
)
async def test_the_deadline_bounds_the_whole_call_retries_included(shape: str, said: str) -> None:
    async with hostile_server() as url:
        providers = {
            "p": ProviderConfig(
                kind="openai",
                base_url=f"{url}/{shape}/v1",
                stall_timeout_s=1,  # the drip's tokens come every 0.3 s
                first_token_timeout_s=0.3,
                total_timeout_s=2,
            )
        }
        config = SwarmConfig(
            providers=providers,
            tiers={"speed": TierConfig(models=["p/m"])},
            routing=RoutingConfig(hedge=False, max_attempts=50, tier_retries=50),
        )
        request = ChatRequest(messages=[Message.user("hi")], max_tokens=4)
        async with Router(config, env={}) as router:
            with anyio.fail_after(30), pytest.raises(ProviderError) as info:
                await router.chat(request)
    assert (info.value.kind, info.value.retryable) == ("timeout", False)
    assert said in str(info.value) and str(info.value).endswith("total_timeout_s)")


def test_the_call_deadline_follows_the_model_speed() -> None:
    deadline = CallDeadline(None)
    deadline.expect("fast", 1000.0, 300)
    seconds, how = deadline.seconds("fast", None, 30.0)
    assert seconds == pytest.approx(30 + 4 * (1024 + 300) / 1000)
    assert "total_timeout_s unset" in str(how) and "1,324 tokens at 1000 tok/s" in str(how)
    # max_tokens caps thinking and answer together; an unknown model writes slowly
    seconds, _ = deadline.seconds("unknown", 100, 10.0)
    assert seconds == pytest.approx(10 + 4 * 100 / UNKNOWN_DECODE_TPS)
    assert CallDeadline(42.0).seconds("fast", None, 30.0) == (42.0, "total_timeout_s")


def test_the_call_deadline_follows_a_slower_measured_rate_but_not_a_drip() -> None:
    """A local server on a busy machine writes a fraction of its quiet speed: measured
    replies stretch the deadline, down to MIN_DECODE_TPS (slower is a drip, ended)."""
    deadline = CallDeadline(None)
    deadline.expect("local", None)
    quiet, _ = deadline.seconds("local", 100, 10.0)
    deadline.observe("local", 10, 100.0)  # too short a reply to judge the rate by
    assert deadline.seconds("local", 100, 10.0)[0] == quiet
    deadline.observe("local", 200, 100.0)  # 2 tok/s
    seconds, how = deadline.seconds("local", 100, 10.0)
    assert seconds == pytest.approx(10 + 4 * 100 / 2.0) and "at 2 tok/s" in str(how)
    for _ in range(20):
        deadline.observe("local", 40, 800.0)  # 0.05 tok/s: a drip
    assert deadline.seconds("local", 100, 10.0)[0] == pytest.approx(10 + 4 * 100 / MIN_DECODE_TPS)
    deadline.expect("fast", 1000.0)
    deadline.observe("fast", 500, 0.25)  # faster than known: the known rate holds
    assert deadline.seconds("fast", 100, 1.0)[0] == pytest.approx(1 + 4 * 100 / 1000)


async def test_a_reply_that_runs_on_ends_at_the_deadline_with_what_it_wrote() -> None:
    """No `max_tokens`, and the reply is past the length its deadline allowed for: the
    model runs on (not a slow server), so the call ends there with the reply as it stood,
    through the router's own deadline; capped, the same stream is a slow server's."""
    async with hostile_server() as url:
        providers = {
            "p": ProviderConfig(kind="openai", base_url=f"{url}/runaway/v1", total_timeout_s=1.5)
        }
        config = SwarmConfig(
            providers=providers,
            tiers={"speed": TierConfig(models=["p/m"])},
            routing=RoutingConfig(hedge=False, tier_retries=0),
        )
        request = ChatRequest(messages=[Message.user("hi")])
        async with Router(config, env={}) as router:
            with anyio.fail_after(30):
                result = await router.chat(request)
            capped = request.model_copy(update={"max_tokens": 100_000})
            with anyio.fail_after(30), pytest.raises(ProviderError) as info:
                await router.chat(capped)
    assert result.finish_reason == DEADLINE_CUT
    assert (result.text or "").startswith("step 0 then step 1 then")
    assert result.usage.output_tokens >= DEFAULT_OUTPUT_TOKENS
    assert info.value.kind == "timeout"


async def test_swarm_ask_says_a_reply_was_stopped_at_its_deadline(tmp_path: Path) -> None:
    done = await _swarm_ask(tmp_path, "runaway", "total_timeout_s = 1.5")
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert done.stdout.decode().startswith("step 0 then step 1 then")
    assert "(stopped at the call's deadline after 2 s: set total_timeout_s" in stderr
