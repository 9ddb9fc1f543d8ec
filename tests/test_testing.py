import socket

import pytest

from swarm.testing import NetworkBlocked


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
