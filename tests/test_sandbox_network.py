"""The sandbox's network by option: `loopback` and `allow` through swarm's proxy (real
bubblewrap, socat, loopback HTTP servers standing in for the internet).

The allowed server is reached through the proxy (plain HTTP and CONNECT) and through a
forwarded port; a host not on the list is refused, visibly to the model and on the span;
raw TCP anywhere else fails. The last part is an escape suite for these modes: every
attack tries to reach a second server that is not on the list.
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarm._sandbox import BwrapSandbox, SandboxPolicy, make_sandbox
from swarm._sandbox._proxy import AllowList
from swarm._tracing import semconv as sc
from swarm._tracing.setup import tracer
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.cli import main
from swarm.config import SandboxConfig, load_config
from swarm.config._run import PROXY_PORT
from swarm.errors import ConfigError
from swarm.run._environment import CheckEnvironment
from swarm.run._task import parse_task
from swarm.run._workspace import Workspace
from tests.sandboxing import needs_bwrap, needs_socat

TOOLS = {t.name: t for t in coding_tools()}
PROXY = "127.0.0.1:39281"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = f"hello from {self.server.server_address[1]}\n".encode()  # type: ignore[index]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Site:
    """A loopback HTTP server standing in for a host on the internet."""

    port: int
    paths: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def site() -> Iterator[Site]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    if server.server_address[1] == PROXY_PORT:  # the one port an allow list refuses
        with site() as other:  # bound before this one is let go: another port
            server.server_close()
            yield other
            return
    server.paths = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(server.server_address[1], server.paths)  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def allowed() -> Iterator[Site]:
    with site() as s:
        yield s


@pytest.fixture
def forbidden() -> Iterator[Site]:
    with site() as s:
        yield s


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit (made by the host's git, not through swarm)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t"]):
        cmd = ["git", *args] if args[0] != "-c" else ["git", *args, "commit", "-qm", "init"]
        subprocess.run(cmd, cwd=repo, check=True)
    return repo


@asynccontextmanager
async def sandboxed(repo: Path, network: str, allow: tuple[str, ...]) -> AsyncIterator[ToolContext]:
    """A worktree and a bwrap sandbox with this network; its proxy open, as a run opens it."""
    sandbox = BwrapSandbox(SandboxPolicy(network=network, allow=allow))  # type: ignore[arg-type]
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
    async with Workspace.open(repo, name="w") as ws, env.sandbox.session():
        yield env.context(ws.path, timeout_s=30)


async def run(ctx: ToolContext, script: str) -> str:
    """`script` run by the checks' python inside the sandbox, through the `run` tool."""
    return await TOOLS["run"].run({"command": f"python - <<'EOF'\n{script}\nEOF"}, ctx)


def _urlopen(url: str, *, via_proxy: bool = False) -> str:
    """Python that fetches `url` and prints the body (or the HTTP error and its body)."""
    setup = "import os, urllib.request, urllib.error\n"
    if via_proxy:  # also for loopback URLs, which NO_PROXY would send direct
        setup += "for k in ('no_proxy', 'NO_PROXY'): os.environ.pop(k, None)\n"
    return (
        f"{setup}try:\n    print(urllib.request.urlopen({url!r}, timeout=10).read().decode())\n"
        "except urllib.error.HTTPError as e:\n    print('HTTP', e.code, e.read().decode())\n"
        "except OSError as e:\n    print('FAILED', e)\n"
    )


def _connect(target: str, path: str) -> str:
    """Python that opens a CONNECT tunnel to `target` through the proxy and GETs `path`."""
    host, port = PROXY.split(":")
    return (
        "import socket\n"
        f"s = socket.create_connection(({host!r}, {port}), 10)\n"
        f"s.sendall(b'CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n')\n"
        "print(s.recv(4096).decode(errors='replace'))\n"
        f"s.sendall(b'GET {path} HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')\n"
        "reply = b''\n"
        "while chunk := s.recv(4096):  # to the end: headers and body may come apart\n"
        "    reply += chunk\n"
        "print(reply.decode(errors='replace'))\n"
    )


def _raw(port: int) -> str:
    return (
        "import socket\ntry:\n"
        f"    s = socket.create_connection(('127.0.0.1', {port}), 5)\n"
        "    s.sendall(b'GET /raw HTTP/1.0\\r\\n\\r\\n')\n"
        "    print('CONNECTED')\nexcept OSError as e:\n    print('FAILED', e)\n"
    )


# --- configuration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ('network = "allow"\nallow = ["pypi.org"]', "no port"),
        ('network = "allow"\nallow = ["bad host:443"]', "not a host name"),
        ('network = "allow"\nallow = ["pypi.org:99999"]', "not a port"),
        ('network = "allow"\nallow = ["127.0.0.1:*"]', "needs its port"),
        ('network = "allow"', "needs allow"),
        ('allow = ["pypi.org:443"]', 'network = "off"'),
        ('network = "loopback"\nallow = ["pypi.org:443"]', "loopback only"),
        ('network = "allow"\nallow = ["127.0.0.1:39281"]', "swarm's proxy"),
    ],
)
def test_bad_network_settings_are_config_errors_naming_the_key(
    tmp_path: Path, toml: str, says: str
) -> None:
    path = tmp_path / "swarm.toml"
    path.write_text(f"[sandbox]\n{toml}\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert "sandbox" in str(info.value) and says in str(info.value)
    assert str(path) in str(info.value)


def test_good_settings_load_and_the_command_line_overrides_them(tmp_path: Path) -> None:
    path = tmp_path / "swarm.toml"
    path.write_text('[sandbox]\nnetwork = "allow"\nallow = ["pypi.org:443", "*.example.com:*"]\n')
    config = load_config(str(path)).sandbox
    assert config.allow == ["pypi.org:443", "*.example.com:*"]
    made = make_sandbox(config, kind="none", allow=["[::1]:8080"])
    assert made.policy.network == "allow" and made.policy.allow == ("[::1]:8080",)
    # --allow alone turns an `off` network into `allow`
    assert make_sandbox(SandboxConfig(), kind="none", allow=["a.org:443"]).policy.network == "allow"
    with pytest.raises(ConfigError, match=r"sandbox\.allow.*'nope'"):
        make_sandbox(SandboxConfig(), kind="none", allow=["nope"])
    with pytest.raises(ConfigError, match="needs allow"):
        make_sandbox(SandboxConfig(), kind="none", network="loopback")


def test_the_task_and_the_command_line_set_the_network(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = parse_task("---\nnetwork: loopback\nallow: [127.0.0.1:5432]\n---\n# T\n\nDo.\n")
    assert (task.network, task.allow) == ("loopback", ("127.0.0.1:5432",))
    with pytest.raises(ConfigError, match=r"line 2.*allow.*HOST:PORT"):
        parse_task("---\nallow: [pypi.org]\n---\n# T\n\nDo.\n")
    path = tmp_path / "task.md"
    path.write_text("# Do nothing\n\nNothing at all.\n")
    state = str(tmp_path / "state")
    code = main(["solve", str(path), "--allow", "pypi.org", "--state-dir", state, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "sandbox.allow" in err and "'pypi.org': no port" in err
    assert "Traceback" not in err


def test_the_allow_list_matches_hosts_ports_and_wildcards() -> None:
    rules = AllowList.parse(["pypi.org:443", "*.example.com:*", "localhost:5432"], "allow")
    assert rules.refusal("pypi.org", 443) is None
    assert rules.refusal("PyPI.org", 443) is None
    assert rules.refusal("pypi.org", 80) is not None
    assert rules.refusal("files.pypi.org", 443) is not None
    assert rules.refusal("a.b.example.com", 8443) is None
    assert rules.refusal("example.com", 443) is not None  # the wildcard is for subdomains
    assert rules.refusal("127.0.0.1", 5432) is None  # any loopback spelling of a loopback entry
    assert rules.refusal("127.0.0.1", 5433) == "not in [sandbox] allow (network = allow)"
    assert rules.loopback_ports == (5432,)


# --- real sandboxes -------------------------------------------------------------------


@needs_bwrap
@needs_socat
async def test_an_allowed_host_is_reached_through_the_proxy_and_a_forwarded_port(
    repo: Path, allowed: Site
) -> None:
    async with sandboxed(repo, "allow", (f"127.0.0.1:{allowed.port}",)) as ctx:
        proxied = await run(ctx, _urlopen(f"{allowed.url}/plain", via_proxy=True))
        tunnel = await run(ctx, _connect(f"127.0.0.1:{allowed.port}", "/tunnel"))
        direct = await run(ctx, _urlopen(f"{allowed.url}/forwarded"))
        env = await run(ctx, "import os; print(os.environ['HTTPS_PROXY'], os.environ['no_proxy'])")
    assert f"hello from {allowed.port}" in proxied
    assert "200 Connection Established" in tunnel and f"hello from {allowed.port}" in tunnel
    assert f"hello from {allowed.port}" in direct
    assert f"http://{PROXY} localhost,127.0.0.1,::1" in env
    assert allowed.paths == ["/plain", "/tunnel", "/forwarded"]


@needs_bwrap
@needs_socat
async def test_a_host_not_on_the_list_is_refused_and_the_refusal_is_visible(
    repo: Path, allowed: Site, spans: InMemorySpanExporter
) -> None:
    async with sandboxed(repo, "allow", (f"127.0.0.1:{allowed.port}",)) as ctx:
        with tracer().start_as_current_span("execute_tool run"):
            https = await run(ctx, _urlopen("https://pypi.org/simple/"))
        plain = await run(ctx, _urlopen("http://example.org/"))
    refused = "connection to pypi.org:443 refused: not in [sandbox] allow (network = allow)"
    assert "Tunnel connection failed: 403" in https
    assert f"[sandbox: {refused}]" in https
    # a plain HTTP client reads the proxy's 403 body itself
    assert "HTTP 403 swarm sandbox: connection to example.org:80 refused" in plain
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool run"]
    assert span.attributes is not None
    assert refused in list(span.attributes[sc.SANDBOX_DENIED])  # type: ignore[arg-type]


@needs_bwrap
@needs_socat
async def test_raw_tcp_to_a_port_not_allowed_fails(
    repo: Path, allowed: Site, forbidden: Site
) -> None:
    async with sandboxed(repo, "allow", (f"127.0.0.1:{allowed.port}",)) as ctx:
        raw = await run(ctx, _raw(forbidden.port))
        tunnel = await run(ctx, _connect(f"127.0.0.1:{forbidden.port}", "/tunnel"))
        outside = await run(ctx, _raw(80).replace("127.0.0.1", "192.0.2.1"))
    assert "FAILED" in raw and "Connection refused" in raw
    assert "403 Forbidden" in tunnel
    assert f"[sandbox: connection to 127.0.0.1:{forbidden.port} refused" in tunnel
    assert "FAILED" in outside and "unreachable" in outside
    assert forbidden.paths == []


@needs_bwrap
@needs_socat
async def test_loopback_reaches_the_hosts_services_and_nothing_else(
    repo: Path, allowed: Site
) -> None:
    async with sandboxed(repo, "loopback", (f"localhost:{allowed.port}",)) as ctx:
        direct = await run(ctx, _urlopen(f"{allowed.url}/db"))
        out = await run(ctx, _urlopen("https://pypi.org/simple/"))
    assert f"hello from {allowed.port}" in direct
    assert "pypi.org:443 refused: not in [sandbox] allow (network = loopback)" in out
    assert allowed.paths == ["/db"]


@needs_bwrap
@needs_socat
async def test_one_proxy_per_session_shared_by_copies_and_gone_after(repo: Path) -> None:
    sandbox = BwrapSandbox(SandboxPolicy(network="allow", allow=("pypi.org:443",)))
    copy = sandbox.with_read_only([Path("/opt")])
    assert copy.egress is sandbox.egress
    async with sandbox.session():
        async with copy.lane() as first, sandbox.lane() as second:
            assert first is not None and second is not None
            assert first.directory.parent == second.directory.parent
            root = first.directory.parent
            assert (first.directory / "proxy").is_socket()
        assert not first.directory.exists()
    assert not root.exists()


@needs_bwrap
@needs_socat
async def test_off_still_blocks_everything(repo: Path, allowed: Site) -> None:
    async with sandboxed(repo, "off", ()) as ctx:
        raw = await run(ctx, _raw(allowed.port))
        proxy = await run(ctx, _raw(39281))
        fetch = await run(ctx, _urlopen(f"{allowed.url}/x", via_proxy=True))
    assert "FAILED" in raw and "FAILED" in proxy and "FAILED" in fetch
    assert allowed.paths == []


# --- escape suite for the proxied modes -------------------------------------------------

ATTACKS: dict[str, Callable[[Site], str]] = {
    "raw-tcp-to-forbidden": lambda f: _raw(f.port),
    "proxy-plain-http-to-forbidden": lambda f: _urlopen(f"{f.url}/x", via_proxy=True),
    "proxy-connect-to-forbidden": lambda f: _connect(f"127.0.0.1:{f.port}", "/x"),
    "proxy-connect-to-forbidden-as-localhost": lambda f: _connect(f"localhost:{f.port}", "/x"),
    "proxy-connect-to-forbidden-as-ipv6": lambda f: _connect(f"[::ffff:127.0.0.1]:{f.port}", "/x"),
    "proxy-connect-by-decimal-ip": lambda f: _connect(f"2130706433:{f.port}", "/x"),
    "proxy-absolute-url-host-header-swap": lambda f: (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {PROXY.split(':')[1]}), 10)\n"
        f"s.sendall(b'GET http://127.0.0.1:{f.port}/x HTTP/1.1\\r\\nHost: allowed\\r\\n\\r\\n')\n"
        "print(s.recv(4096))\n"
    ),
    "forwarded-socket-to-other-port": lambda f: (
        "import socket, glob\n"
        "for path in glob.glob('/run/swarm-net/*'):\n"
        "    s = socket.socket(socket.AF_UNIX); s.connect(path)\n"
        f"    s.sendall(b'CONNECT 127.0.0.1:{f.port} HTTP/1.1\\r\\n\\r\\n'\n"
        "              b'GET /x HTTP/1.0\\r\\n\\r\\n')\n"
        "    print(path, s.recv(4096))\n"
    ),
    "plant-socket-in-lane": lambda f: (
        "import socket\ns = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.bind('/run/swarm-net/port-1'); print('BOUND')\nexcept OSError as e: print(e)\n"
    ),
    "dns-inside": lambda f: (
        "import socket\ntry: print(socket.gethostbyname('example.org'))\n"
        "except OSError as e: print('FAILED', e)\n"
    ),
}


@needs_bwrap
@needs_socat
@pytest.mark.parametrize("network", ["allow", "loopback"])
@pytest.mark.parametrize("attack", list(ATTACKS), ids=list(ATTACKS))
async def test_network_attack(
    attack: str, network: str, repo: Path, allowed: Site, forbidden: Site
) -> None:
    async with sandboxed(repo, network, (f"127.0.0.1:{allowed.port}",)) as ctx:
        output = await run(ctx, ATTACKS[attack](forbidden))
    assert forbidden.paths == [], f"{attack} reached the forbidden server:\n{output}"
    assert "BOUND" not in output and "CONNECTED" not in output, output
