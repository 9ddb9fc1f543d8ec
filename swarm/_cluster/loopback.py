"""Ray kept on 127.0.0.1: the nodes a local cluster starts, and the drivers that join it.

Ray turns a loopback address into the machine's own interface address wherever it meets
one (`ray._private.services.resolve_ip_for_localhost`: `ray start --node-ip-address
127.0.0.1`, `ray start --address 127.0.0.1:PORT` and `ray.init(address="127.0.0.1:PORT")`
all end up on it), because a cluster's nodes are meant to reach each other across
machines. It keeps loopback only where it believes no multi-node cluster can exist
(`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`), and there `ray start --address` refuses to start
a second node. So:

- every process of a node (its GCS, raylet, agents, workers) gets `LOOPBACK_ENV`, and the
  servers then bind to the node's address, 127.0.0.1;
- `ray start` itself runs through this module (`python -m swarm._cluster.loopback start
  ...`), which lets a second node start and answers 127.0.0.1 for the node's address;
- a driver in this process calls `keep_loopback()` before `ray.init`; a driver in another
  process gets `LOOPBACK_ENV`.

`off_loopback(pids)` is the check that it holds: every TCP and UDP socket the processes
hold (and their descendants: a node's raylet, agents and workers), with its local or remote
address anything but 127.0.0.1.

For the machine's own tests, benchmarks and trials only: a real cluster's nodes are on
real addresses, and nothing else in swarm changes how Ray resolves them.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["LOOPBACK", "LOOPBACK_ENV", "descendants", "keep_loopback", "off_loopback"]

LOOPBACK = "127.0.0.1"
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""What every process of a loopback cluster, and every driver of it, runs with."""


def keep_loopback() -> None:
    """Make this process's Ray keep 127.0.0.1 as it is (its environment was read when
    `ray` was imported: `LOOPBACK_ENV` set now would come too late)."""
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


_TABLES = ("tcp", "tcp6", "udp", "udp6")
_LISTEN = "0A"


def _address(hexed: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """An address of /proc/net/tcp{,6} (`0100007F:1F90`: host byte order, word by word)."""
    host, port = hexed.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, int(port, 16)
    return ip, int(port, 16)


def off_loopback_entry(table: str, line: str) -> str | None:
    """A line of /proc/net/`table` (tcp, tcp6, udp, udp6), said as `table local -> remote`
    when the socket is off loopback; else None (a socket not bound yet, and a listening or
    unconnected one's remote end, count as nowhere)."""
    fields = line.split()
    (local, lport), (remote, rport) = _address(fields[1]), _address(fields[2])
    nowhere = (remote.is_unspecified and rport == 0) or (
        table.startswith("tcp") and fields[3] == _LISTEN
    )
    local_ok = str(local) == LOOPBACK or (local.is_unspecified and lport == 0)
    if local_ok and (nowhere or str(remote) == LOOPBACK):
        return None
    return f"{table} {local}:{lport} -> {remote}:{rport}"


def _sockets() -> dict[str, str]:
    """Every TCP and UDP socket of this network namespace off loopback, by inode."""
    found: dict[str, str] = {}
    for table in _TABLES:
        for line in Path("/proc/net", table).read_text().splitlines()[1:]:
            if (what := off_loopback_entry(table, line)) is not None:
                found[line.split()[9]] = what
    return found


def descendants(pids: Iterable[int]) -> set[int]:
    """`pids` and every process they started, and those started (by parent process id)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def off_loopback(pids: Iterable[int]) -> list[str]:
    """The sockets of `pids` and their descendants whose local or remote address is not
    127.0.0.1, as `pid name: proto local -> remote` (none: all on loopback). A snapshot:
    what was opened and closed before it is not seen."""
    bad = _sockets()
    out = []
    for pid in sorted(descendants(pids)):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:  # ended meanwhile
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and (what := bad.get(target[8:-1])):
                out.append(f"{pid} {name}: {what}")
    return out


def _node_address(address: str | None = None) -> str:
    return LOOPBACK


def main() -> None:
    """`ray start` with the node on 127.0.0.1 (see the module's docstring)."""
    from ray._private import ray_constants, services
    from ray.scripts.scripts import main as ray_main

    ray_constants.ENABLE_RAY_CLUSTER = True  # a second node may start (its children: 0)
    services.get_node_ip_address = _node_address
    sys.argv[0] = "ray"
    ray_main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
