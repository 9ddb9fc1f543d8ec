import socket
import subprocess
import sys
from pathlib import Path

import pytest

from swarm._analysis.known import build_chain
from swarm.testing import (
    NetworkBlocked,
    assert_critical_path_under,
    assert_p95_call_latency_under,
    assert_rate_limit_waits_under,
    block_network,
)


def test_non_loopback_lookup_is_refused() -> None:
    with pytest.raises(NetworkBlocked):
        socket.getaddrinfo("api.cerebras.ai", 443)


def test_non_loopback_connect_is_refused() -> None:
    with socket.socket() as s, pytest.raises(NetworkBlocked):
        s.connect(("203.0.113.7", 443))


def test_loopback_is_allowed() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=2):
            pass


def test_latency_budget_assertions_are_in_swarm_testing(tmp_path: Path) -> None:
    known = build_chain(tmp_path / "run.jsonl", steps=2, chat_s=1.0, tool_s=0.5)
    assert_critical_path_under(known.path, 3.1)
    assert_p95_call_latency_under(known.path, 1.1)
    assert_rate_limit_waits_under(known.path, 0.1)
    with pytest.raises(AssertionError, match=r"critical path took 3\.00 s"):
        assert_critical_path_under(known.path, 2.0)


def test_swarm_testing_imports_without_pytest() -> None:
    code = "import sys; sys.modules['pytest'] = None; import swarm.testing"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_block_network_restores_the_socket_functions() -> None:
    before = (socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex)
    with block_network(), pytest.raises(NetworkBlocked):
        socket.getaddrinfo("example.org", 443)
    assert (socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex) == before
