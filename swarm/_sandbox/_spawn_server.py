"""The spawn server: a small process that starts commands for the coordinator.

Starting a process from a large, busy Python process stalls it. `os.posix_spawn` holds the
GIL while the kernel runs the new child up to its `exec` (a vfork), and on a loaded machine
that child waits for a core: measured on a 300-subtask solve on 2 cores, 1,438 git commands
held the coordinator's event loop for 5.2 s in all (median 1.6 ms, the slowest tenth over
8 ms each), so every task of the run waited with them. This server takes that wait: the
coordinator sends it a command and the command's descriptors over a socket and goes on;
the server starts the command and reports its pid and, once it has exited, its exit
status through a pipe the coordinator handed it (`swarm._sandbox._spawner` reads it).

It imports nothing but the standard library and runs as `python -I -S <this file> FD`
(FD: its end of the socket). One message per command (SOCK_SEQPACKET keeps them whole): a
JSON header `{"id", "argv", "env", "cwd", "session", "pid"}` and four descriptors: the
command's stdin, stdout and stderr, then the write end of its status pipe. On the status
pipe the server writes 16-byte records `(tag, value)`: `PID` first if the header asked for
it, then `EXITED` and the wait status; or `FAILED` and the errno when the command could not
be started. A header `{"kill": id}` kills a command still running (the server is its
parent, so no other process can have its pid yet). The server exits when the
coordinator's end of the socket closes (the coordinator ended, whatever ended it); commands
it started run to their end.

It also holds the few process primitives the coordinator's own starts share with it
(`posix_start`, `reap`, `pidfd_ok`), so they are written once.
"""

from __future__ import annotations

import array
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence

PID, EXITED, FAILED = 0, 1, 2
RECORD = struct.Struct("qq")
_MAX_MESSAGE = 1 << 20
RESTORED = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, n))
"""Signals Python ignores that a child gets back at their defaults (as `subprocess` does)."""


def posix_start(argv: Sequence[str], env: Mapping[str, str], fds: Sequence[int]) -> int:
    """Start `argv` (its first item a path) with `fds` as its stdin, stdout and stderr.
    Returns once the child has called exec (glibc's posix_spawn is a vfork)."""
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds[:3])]
    return os.posix_spawn(argv[0], list(argv), env, file_actions=actions, setsigdef=RESTORED)


def reap(pid: int) -> int:
    """The exit status of child `pid`, killing it first if it still runs."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        return status
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]  # SIGKILL cannot be ignored: this returns at once


def pidfd_ok() -> bool:
    """Whether this system has pidfds (Linux 5.3+) and posix_spawn."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return hasattr(os, "posix_spawn")


def _start(header: dict[str, object], fds: list[int]) -> int:
    argv = [str(a) for a in header["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in header["env"].items()}  # type: ignore[attr-defined]
    cwd, session = header.get("cwd"), bool(header.get("session"))
    if cwd is None and not session:  # git: posix_spawn, the cheapest start there is
        return posix_start(argv, env, fds)
    process = subprocess.Popen(
        argv,
        stdin=fds[0],
        stdout=fds[1],
        stderr=fds[2],
        cwd=str(cwd) if cwd is not None else None,
        env=env,
        start_new_session=session,
    )
    process.returncode = 0  # reaped here by pid, never through this object
    return process.pid


class _Server:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ, None)
        self.running: dict[int, int] = {}  # command id -> pid

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data is None:
                    if not self._receive():
                        return
                else:
                    self._exited(key)

    def _exited(self, key: selectors.SelectorKey) -> None:
        command, pid, status_fd = key.data
        self.selector.unregister(key.fileobj)
        os.close(key.fd)
        _, status = os.waitpid(pid, 0)
        self.running.pop(command, None)
        _report(status_fd, EXITED, status)
        os.close(status_fd)

    def _receive(self) -> bool:
        fds = array.array("i")
        data, ancillary, _, _ = self.sock.recvmsg(_MAX_MESSAGE, socket.CMSG_SPACE(4 * fds.itemsize))
        if not data:
            return False
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        header = json.loads(data)
        if "kill" in header:
            pid = self.running.get(int(header["kill"]))
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
            return True
        self._launch(header, list(fds))
        return True

    def _launch(self, header: dict[str, object], fds: list[int]) -> None:
        status_fd = fds[3]
        try:
            pid = _start(header, fds)
        except OSError as exc:
            _report(status_fd, FAILED, exc.errno or 0)
            os.close(status_fd)
            return
        finally:
            for fd in fds[:3]:
                os.close(fd)
        if header.get("pid"):
            _report(status_fd, PID, pid)
        command = int(header["id"])  # type: ignore[call-overload]
        self.running[command] = pid
        self.selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (command, pid, status_fd))


def _report(status_fd: int, tag: int, value: int) -> None:
    try:
        os.write(status_fd, RECORD.pack(tag, value))
    except BrokenPipeError:  # the coordinator gave up on it (cancelled)
        pass


if __name__ == "__main__":
    _Server(socket.socket(fileno=int(sys.argv[1]))).serve()
