"""Streaming in the `Model` seam: `stream()` yields a reply's pieces, one attempt at a time.

The doubles and the simulator stream word by word; the router's `Relay` passes on one
attempt's pieces and a `Restart` before another's; against a real `swarm sim serve` that
drops and stalls streams, an agent's caller never reads two answers run together.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm import Agent, ChatRequest, ChatResult, Message, Router, load_config
from swarm._routing.relay import Relay
from swarm.agent.events import ReplyRestart, TextDelta
from swarm.errors import ProviderError
from swarm.model import Delta, Done, Restart, Streamed, closing, collect
from swarm.providers.sim import Faults, Reply, SimProvider
from swarm.providers.sim._reply import prose
from swarm.testing import FunctionModel, ScriptedModel, reply
from tests.test_sim_http_solve import sim_serve

ROOT = Path(__file__).resolve().parents[1]
LONG = prose(560)  # ~3 KB


def long_reply(request: ChatRequest) -> Reply:
    """The script `swarm sim serve` plays here: ~3 KB of prose for any request."""
    return Reply(text=LONG)


def _request() -> ChatRequest:
    return ChatRequest(messages=[Message.user("write")], max_tokens=4000)


async def _items(stream: object) -> list[Streamed]:
    return [item async for item in stream]  # type: ignore[attr-defined]


def _pieces(items: list[Streamed]) -> list[str]:
    return [i.text for i in items if isinstance(i, Delta) and i.kind == "text"]


async def test_the_doubles_stream_a_3kb_reply_word_by_word() -> None:
    assert len(LONG) > 3000
    for model in (ScriptedModel([LONG]), FunctionModel(lambda request: LONG)):
        items = await _items(model.stream(_request()))
        pieces = _pieces(items)
        assert len(pieces) >= 10
        assert "".join(pieces) == LONG
        last = items[-1]
        assert isinstance(last, Done) and last.result.text == LONG
    assert (await collect(ScriptedModel([LONG]).stream(_request()))).text == LONG


async def test_the_simulator_streams_word_by_word_through_the_router(tmp_path: Path) -> None:
    config = tmp_path / "swarm.toml"
    config.write_text(
        '[providers.sim]\nkind = "sim"\n[tiers.speed]\nmodels = ["sim/groq/llama-3.3-70b"]\n'
    )
    sim = SimProvider(script=long_reply, time_scale=0.001)
    async with Router(load_config(config, env={}), providers={"sim": sim}, env={}) as router:
        items = await _items(router.model("speed").stream(_request()))
    assert len(_pieces(items)) >= 10
    assert "".join(_pieces(items)) == LONG
    assert not any(isinstance(i, Restart) for i in items)


async def test_a_stream_left_early_stops_its_call_and_errors_leave_as_themselves(
    tmp_path: Path,
) -> None:
    config = tmp_path / "swarm.toml"
    config.write_text(
        '[providers.sim]\nkind = "sim"\n[tiers.speed]\nmodels = ["sim/groq/llama-3.3-70b"]\n'
        "[routing]\nmax_attempts = 1\ntier_retries = 0\n"
    )
    sim = SimProvider(script=long_reply, time_scale=0.01)
    async with Router(load_config(config, env={}), providers={"sim": sim}, env={}) as router:
        taken = 0
        async with closing(router.model("speed").stream(_request())) as items:
            async for _ in items:
                taken += 1
                if taken == 3:
                    break
        assert taken == 3
    failing = SimProvider(script=long_reply, time_scale=0, faults=Faults(error_rate=1.0))
    async with Router(load_config(config, env={}), providers={"sim": failing}, env={}) as router:
        with pytest.raises(ProviderError, match="500"):  # not in an ExceptionGroup
            await collect(router.model("speed").stream(_request()))


def _result(text: str) -> ChatResult:
    return reply(text)


def test_relay_restarts_when_the_heard_attempt_fails() -> None:
    heard: list[Delta | Restart] = []
    relay = Relay(heard.append)
    relay.attempt(1)("text", "Hel")
    relay.failed(1)  # dropped mid-stream
    relay.attempt(2)("text", "Hello")
    done = _result("Hello")
    relay.succeeded(2, done)
    relay.close(done)
    assert heard == [Delta("text", "Hel", 1), Restart(2), Delta("text", "Hello", 2)]


def test_relay_holds_a_hedge_until_it_wins() -> None:
    heard: list[Delta | Restart] = []
    relay = Relay(heard.append)
    relay.attempt(1)("text", "slow ")
    relay.attempt(2)("text", "fast ")  # the hedge, while the first still lives: held
    relay.attempt(2)("text", "answer")
    assert heard == [Delta("text", "slow ", 1)]
    won = _result("fast answer")
    relay.succeeded(2, won)
    relay.failed(1)  # the race cancels the loser: the held pieces follow a restart
    relay.close(won)
    assert heard == [
        Delta("text", "slow ", 1),
        Restart(2),
        Delta("text", "fast ", 2),
        Delta("text", "answer", 2),
    ]


def test_relay_gives_a_whole_reply_in_one_piece() -> None:
    heard: list[Delta | Restart] = []
    relay = Relay(heard.append)
    done = _result("all at once")
    relay.succeeded(1, done)
    relay.close(done)
    relay.attempt(1)("text", "late")  # nothing after the call returned
    assert heard == [Delta("text", "all at once", 1)]


@pytest.mark.parametrize("seed", [11])
async def test_no_duplicated_characters_over_20_runs_with_drops_and_stalls(
    tmp_path: Path, seed: int
) -> None:
    """Twenty agent runs against `swarm sim serve` dropping and stalling streams: what the
    caller holds after each `ReplyRestart` is the answer, never two answers run together.
    Two providers on the same server, so a stalled stream is also raced by a hedge."""
    flags = ["--seed", str(seed), "--time-scale", "0.05", "--drop-rate", "0.3"]
    flags += ["--stall-rate", "0.2", "--script", "tests.test_stream:long_reply"]
    async with sim_serve(*flags) as url:
        provider = f'kind = "openai"\nbase_url = "{url}"\napi_key_env = ""\nstall_timeout_s = 0.3\n'
        config = tmp_path / "swarm.toml"
        config.write_text(
            f"[providers.a]\n{provider}[providers.b]\n{provider}"
            '[tiers.speed]\nmodels = ["a/groq/llama-3.3-70b", "b/groq/llama-3.3-70b"]\n'
            "[routing]\nmax_attempts = 8\ntier_retries = 8\nbackoff_initial_s = 0.01\n"
            "backoff_max_s = 0.05\nbreaker_failures = 1000\nstall_hedge_min_s = 0.1\n"
        )
        restarts = duplicated = 0
        async with Router(load_config(config, env={}), env={}) as router:
            for _ in range(20):
                shown: list[str] = []
                agent: Agent[str] = Agent("writer", router.model("speed"))
                async with agent.iter("write") as run:
                    async for event in run:
                        if isinstance(event, ReplyRestart):
                            restarts += 1
                            shown.clear()
                        elif isinstance(event, TextDelta):
                            shown.append(event.text)
                assert run.result is not None and run.result.output == LONG
                duplicated += len("".join(shown)) - len(LONG)
                assert "".join(shown) == LONG
    assert duplicated == 0
    assert restarts >= 1  # the faults happened, and were said
