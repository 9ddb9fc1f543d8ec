"""The real LiteLLM proxy in front of `swarm sim serve`: the usage swarm reports is the
usage the proxy sent (LiteLLM ends a stream with a usage chunk beside an empty delta).

Skipped when LiteLLM (`pip install 'litellm[proxy]'`) is not installed: it is large and no
dependency of swarm. Both servers run as subprocesses on loopback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.abc import Process

from swarm.messages import ChatRequest, Message
from swarm.providers._openai import OpenAIProvider

MASTER_KEY = "sk-swarm-test-master-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[1]
# the proxy runs as a process of its own: from its own venv (`.ci/install` makes it), or
# from swarm's when litellm[proxy] was installed there
LITELLM = next(
    (
        p
        for p in (
            ROOT / ".venv-litellm" / "bin" / "litellm",
            Path(sys.executable).parent / "litellm",
        )
        if p.exists()
    ),
    ROOT / ".venv-litellm" / "bin" / "litellm",
)

pytestmark = pytest.mark.skipif(
    not LITELLM.exists(), reason="litellm[proxy] is not installed (bash .ci/install does it)"
)


class Recording(httpx.AsyncBaseTransport):
    """The real transport, keeping a copy of every response body as it streams by."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.bodies: list[bytearray] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = bytearray()
        self.bodies.append(body)
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)

        async def tee() -> AsyncIterator[bytes]:
            async for chunk in stream:
                body.extend(chunk)
                yield chunk

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Stream(tee(), stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Stream(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes], inner: httpx.AsyncByteStream) -> None:
        self.chunks, self.inner = chunks, inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def running(command: list[str], env: dict[str, str], cwd: Path) -> AsyncIterator[Process]:
    process = await anyio.open_process(
        command, env=env, cwd=cwd, stderr=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10, shield=True):
                await process.wait()
        if process.returncode is None:
            process.kill()
            with anyio.move_on_after(5, shield=True):
                await process.wait()
        await process.aclose()


async def first_line(process: Process) -> str:
    assert process.stdout is not None
    line = b""
    with anyio.fail_after(20):
        while not line.endswith(b"\n"):
            line += await process.stdout.receive()
    return line.decode().strip()


async def wait_ready(url: str) -> None:
    with anyio.fail_after(120):
        async with httpx.AsyncClient(timeout=2) as client:
            while True:
                try:
                    if (await client.get(f"{url}/health/liveliness")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await anyio.sleep(0.5)


def usage_sent(body: bytes) -> dict[str, object]:
    """The usage of the last stream chunk that carried one."""
    found: dict[str, object] = {}
    for event in body.decode().split("\n\n"):
        data = event.removeprefix("data: ").strip()
        if data.startswith("{"):
            found = json.loads(data).get("usage") or found
    return found


async def test_usage_through_the_litellm_proxy_is_what_the_proxy_sent(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sim = [sys.executable, "-m", "swarm", "sim", "serve", "--port", "0", "--seed", "7"]
    sim += ["--profile", "cerebras/kimi-k2.6", "--time-scale", "0.05"]
    async with running(sim, env, ROOT) as sim_process:
        sim_url = (await first_line(sim_process)).rsplit(" on ", 1)[1]
        config = tmp_path / "litellm.yaml"
        config.write_text(
            "model_list:\n  - model_name: kimi\n    litellm_params:\n"
            f"      model: openai/kimi-k2.6\n      api_base: {sim_url}\n      api_key: sk-sim\n"
        )
        port = free_port()
        proxy_env = {
            **env,
            "LITELLM_MASTER_KEY": MASTER_KEY,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        proxy = [str(LITELLM), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
        async with running(proxy, proxy_env, tmp_path):
            url = f"http://127.0.0.1:{port}"
            await wait_ready(url)
            recording = Recording()
            async with httpx.AsyncClient(transport=recording, timeout=60) as client:
                provider = OpenAIProvider("litellm", f"{url}/v1", api_key=MASTER_KEY, client=client)
                request = ChatRequest(messages=[Message.user("Summarise the change, briefly.")])
                result = await provider.chat("kimi", request)
    sent = usage_sent(bytes(recording.bodies[-1]))
    assert sent, "the proxy sent no usage"
    details = sent.get("completion_tokens_details") or {}
    assert isinstance(details, dict)
    assert result.usage.input_tokens == sent["prompt_tokens"]
    assert result.usage.output_tokens == sent["completion_tokens"]
    assert result.usage.reasoning_tokens == details.get("reasoning_tokens", 0)
    assert result.usage.output_tokens > 0 and result.text
