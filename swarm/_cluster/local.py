"""A Ray cluster on this machine, for tests and benchmarks: a head and more nodes on
loopback, each `ray start --block` in its own process group, stopped with it; every
service of every node on 127.0.0.1 (`loopback`).

Small by default (a 2-core machine shared with other work): 1 CPU a node, no dashboard,
80 MB of object store. Nodes import `swarm` from `root` (PYTHONPATH), the checkout under
test, as a real cluster's nodes would have it installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from swarm._cluster.loopback import LOOPBACK, LOOPBACK_ENV, descendants, keep_loopback
from swarm._cluster.node import sweep_dead_clones
from swarm._sandbox.process import pid_alive

__all__ = [
    "LocalCluster",
    "NodeSpec",
    "add_node",
    "kill_node",
    "local_cluster",
    "stop_node",
    "wait_for_nodes",
]

STARTUP_S = 90.0
_GONE_S = 15.0
"""How long stopping or killing a node waits for the processes it started to be gone."""
_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class NodeSpec:
    """One node: its CPUs and custom resources."""

    cpus: float = 1
    resources: Mapping[str, float] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    """More environment for its processes (a `TMPDIR` of its own: its workspaces' clones
    are then told apart by their paths)."""


_HEALTH_ENV = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "5",
}
"""The GCS calls a node lost after 5 failed health checks a second apart (Ray's default:
every 3 s, so a killed node's actors were reported dead only after 15 s or more); a check
that times out (10 s) counts as failed, so a node slow on a loaded machine is not lost."""


@dataclass
class LocalCluster:
    """A running local cluster: its address and its nodes' processes."""

    address: str
    processes: list[subprocess.Popen[bytes]]
    logs: Path
    temps: set[Path] = field(default_factory=set)
    """The nodes' temporary directories, where their clones are."""


def _temp_of(node: NodeSpec) -> Path:
    return Path(node.env.get("TMPDIR", tempfile.gettempdir()))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((LOOPBACK, port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _start(args: list[str], node: NodeSpec, log: Path, root: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **LOOPBACK_ENV, **_HEALTH_ENV, **node.env}
    env.update(PYTHONPATH=str(root), RAY_USAGE_STATS_ENABLED="0")
    argv = [sys.executable, "-m", "swarm._cluster.loopback", "start", "--block"]
    argv += [f"--node-ip-address={LOOPBACK}", "--disable-usage-stats"]
    argv += [f"--num-cpus={node.cpus}", f"--resources={json.dumps(dict(node.resources))}"]
    argv += ["--object-store-memory=80000000", *args]
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_node(proc: subprocess.Popen[bytes]) -> None:
    """Stop a node: its whole process group (`ray start --block` and what it started).
    Returns once every process it had started is gone (bounded: `_GONE_S`)."""
    started = descendants([proc.pid])
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    _wait_gone(started)


def kill_node(proc: subprocess.Popen[bytes]) -> None:
    """Lose a node as a machine is lost: SIGKILL to every process it started, at once
    (its process group, and what left it: a sandbox is a session of its own). Returns
    once they are all gone (bounded: `_GONE_S`)."""
    doomed = descendants([proc.pid])
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):  # any forked since in the group
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(STARTUP_S)
    _wait_gone(doomed)


def _wait_gone(pids: set[int]) -> None:
    """Wait until none of `pids` runs, for up to `_GONE_S`: a node's workspace actors
    (Ray workers) leave its process group and die once they see their raylet gone, a
    moment after it; a clone they leave mounted is swept (`sweep_dead_clones`) only once
    its actor is gone, and a sweep that came first left it mounted."""
    deadline = time.monotonic() + _GONE_S
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling: they are exiting


@contextmanager
def local_cluster(
    nodes: Sequence[NodeSpec], logs: Path, *, root: Path | None = None
) -> Iterator[LocalCluster]:
    """Start `nodes` (the first is the head) for the block; stop them all at its end.

    Returns once the head listens; the others join in the background (wait with
    `ray.nodes()` after connecting)."""
    root = root or _ROOT
    keep_loopback()  # for the drivers this process connects
    port = _free_port()
    ray_temp = Path(f"/tmp/swarm-ray-{os.getpid()}-{port}")  # short: a socket path's limit
    head_args = ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={ray_temp}"]
    cluster = LocalCluster(f"{LOOPBACK}:{port}", [], logs)
    try:
        cluster.processes.append(_start(head_args, nodes[0], logs / "node0.log", root))
        cluster.temps.add(_temp_of(nodes[0]))
        deadline = time.monotonic() + STARTUP_S
        while not _listening(port):
            if cluster.processes[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((logs / "node0.log").read_text()[-3000:])
            time.sleep(0.2)
        for node in nodes[1:]:
            add_node(cluster, node, root=root)
        yield cluster
    finally:
        for proc in reversed(cluster.processes):
            stop_node(proc)
        for temp in cluster.temps:  # a killed node's clones: mounted until someone unmounts
            sweep_dead_clones(temp)
        shutil.rmtree(ray_temp, ignore_errors=True)  # Ray's sessions: its sockets and logs


def add_node(
    cluster: LocalCluster, node: NodeSpec, *, root: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start one more node joining `cluster` (stopped with it, or by `stop_node`)."""
    log = cluster.logs / f"node{len(cluster.processes)}.log"
    proc = _start([f"--address={cluster.address}"], node, log, root or _ROOT)
    cluster.processes.append(proc)
    cluster.temps.add(_temp_of(node))
    return proc


def wait_for_nodes(ray: object, count: int, timeout_s: float = STARTUP_S) -> None:
    """Wait until `count` nodes are alive (`ray`: the connected `ray` module)."""
    deadline = time.monotonic() + timeout_s
    while sum(n["Alive"] for n in ray.nodes()) < count:  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            raise TimeoutError(f"the local Ray cluster did not reach {count} nodes")
        time.sleep(0.2)
