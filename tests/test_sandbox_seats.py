"""Launchers already in their pids cgroups (`swarm._sandbox._seats`): inside a sandbox's
session a command starts in one, sees what it would see without it, is capped and killed
the same way, and nothing is left when the session ends. Each test runs with commands
started here and through a spawn server (where a solve starts them)."""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from swarm._sandbox import BwrapSandbox, Limits, SandboxPolicy, _pids, _spawner, bwrap_problem
from swarm._sandbox._seats import IDLE, Seat, Seats
from swarm._sandbox.process import pid_alive, run_confined

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        bwrap_problem() is not None, reason=f"bubblewrap cannot run here: {bwrap_problem()}"
    ),
    pytest.mark.skipif(not _pids.usable(), reason="no pids cgroup hierarchy swarm may use"),
]

ROOT = Path("/sys/fs/cgroup/pids")
ENV = {"PATH": "/usr/bin:/bin", "SPACED": "a b\tc", "EMPTY": ""}
SHOW = 'pwd; env | grep -v SWARM_COMMAND_TAG | sort; echo argv: "$@"; exit 3'


@pytest.fixture(params=["here", "served"])
async def way(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """Commands started here, or through a spawn server open for the test (anyio runs a
    test in the task its fixtures ran in: the server is the current one there)."""
    assert _spawner.current() is None
    if request.param == "here":
        yield "here"
        return
    async with _spawner.spawn_server() as server:
        if server is None:
            pytest.skip("no spawn server on this system")
        yield "served"


def _ours() -> list[str]:
    return [p.name for p in ROOT.iterdir() if p.name.startswith(f"swarm-{os.getpid()}-")]


def _dead(pid: int) -> bool:
    """Exited (a zombie not reaped yet, or gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone between the open and the read
        return True
    return stat.rsplit(")", 1)[1].split()[0] in "ZX"


async def _ready(seats: Seats) -> None:
    """Wait until every idle seat has joined its cgroup."""
    await _until(
        lambda: len(seats._idle) == IDLE and all(_pids.tasks(s.cgroup) == 1 for s in seats._idle)
    )


async def _until(done: Callable[[], bool]) -> None:
    for _ in range(2000):
        if done():
            return
        await anyio.sleep(0.01)
    raise TimeoutError("not within 20 s")


@asynccontextmanager
async def _seated(sandbox: BwrapSandbox) -> AsyncIterator[list[Seat | None]]:
    """The sandbox's session with its seats ready; yields what each `take` gave."""
    taken: list[Seat | None] = []
    take: Callable[[], Seat | None] = sandbox.seats.take

    def spy() -> Seat | None:
        taken.append(seat := take())
        return seat

    sandbox.seats.take = spy  # type: ignore[method-assign]
    async with sandbox.session():
        await _ready(sandbox.seats)
        yield taken


async def _run(sandbox: BwrapSandbox, argv: list[str], cwd: Path, timeout_s: float = 20) -> str:
    result = await run_confined(
        sandbox, argv, cwd=cwd, env=ENV, timeout_s=timeout_s, max_output_chars=4000
    )
    return f"exit {result.exit_code}: {result.output}"


async def test_a_command_in_a_seat_sees_what_it_would_without(way: str, tmp_path: Path) -> None:
    assert (_spawner.current() is not None) == (way == "served")
    sandbox = BwrapSandbox()
    argv = ["/bin/bash", "-c", SHOW, "sh", "one two", "", "'three'"]
    alone = await _run(sandbox, argv, tmp_path)
    async with _seated(sandbox) as taken:
        seated = await _run(sandbox, argv, tmp_path)
        await _ready(sandbox.seats)  # the seat used was replaced once its command ended
        assert taken[0] not in sandbox.seats._idle and not sandbox.seats._taken
    assert taken and taken[0] is not None
    assert seated == alone
    assert "exit 3: " in seated and "SPACED=a b\tc" in seated and "argv: one two  'three'" in seated
    assert _ours() == []


async def test_the_kernel_caps_a_command_in_a_seat(way: str, tmp_path: Path) -> None:
    policy = SandboxPolicy(limits=Limits(max_processes=5), guard_in_cgroup=False)
    sandbox = BwrapSandbox(policy)  # no guard: the kernel
    started = "n=0; for i in $(seq 60); do sleep 2 & n=$((n+1)); done; echo started $n; wait"
    async with _seated(sandbox) as taken:
        output = await _run(sandbox, ["/bin/sh", "-c", started], tmp_path)
    assert taken[0] is not None
    assert "Cannot fork" in output
    assert _ours() == []


async def test_a_timed_out_command_in_a_seat_is_killed_with_its_children(
    way: str, tmp_path: Path
) -> None:
    sandbox = BwrapSandbox()
    pidfile = tmp_path / "child"
    script = f"sleep 300 & echo $! > {pidfile.name}; sleep 300"
    async with _seated(sandbox) as taken:
        output = await _run(sandbox, ["/bin/sh", "-c", script], tmp_path, timeout_s=1)
    assert taken[0] is not None
    assert output.startswith("exit None")
    assert pidfile.exists()  # it ran (its pid is the sandbox's own: the namespace is gone)
    assert _ours() == []


async def test_closing_the_session_ends_idle_seats(way: str, tmp_path: Path) -> None:
    sandbox = BwrapSandbox()
    async with sandbox.session():
        await _ready(sandbox.seats)
        pids = [seat.process.pid for seat in sandbox.seats._idle]
        assert len(_ours()) == IDLE
    assert not [pid for pid in pids if pid_alive(pid)]
    assert _ours() == []
    assert sandbox.seats._idle == []


async def test_a_session_inside_a_session_keeps_the_outer_seats(way: str) -> None:
    sandbox = BwrapSandbox()
    async with sandbox.session():
        await _ready(sandbox.seats)
        before = list(sandbox.seats._idle)
        async with sandbox.with_read_only([Path("/opt")]).session():
            assert sandbox.seats._idle == before
        assert sandbox.seats._idle == before


async def test_a_seat_that_died_idle_starts_its_command_another_way(
    way: str, tmp_path: Path
) -> None:
    """Nothing of the command reached the dead seat: it joins the cgroup itself."""
    sandbox = BwrapSandbox()
    async with sandbox.session():
        await _ready(sandbox.seats)
        seat = sandbox.seats.take()
        assert seat is not None
        os.killpg(seat.process.pid, signal.SIGKILL)
        await _until(lambda: _dead(seat.process.pid))
        argv = ["/bin/sh", "-c", "grep pids /proc/self/cgroup; echo $X"]
        command = await seat.start(argv, cwd=tmp_path, env={"X": "ran"})
        assert command is not seat.process
        out = b""
        assert command.stdout is not None
        async for chunk in command.stdout:
            out += chunk
        assert await command.wait() == 0
        await command.aclose()
        lines = out.decode().splitlines()
        assert lines[0].endswith(f":pids:/{seat.cgroup.name}") and lines[1:] == ["ran"]
        assert _pids.remove(seat.cgroup)
    assert _ours() == []


async def test_a_sandbox_with_its_seats_open_pickles_without_them(way: str) -> None:
    """A sandbox travels to a Ray node pickled: the node gets a pool of its own, unopened."""
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(max_processes=7)))
    async with sandbox.session():
        await _ready(sandbox.seats)
        copy = pickle.loads(pickle.dumps(sandbox))
    assert isinstance(copy, BwrapSandbox) and copy.seats is not sandbox.seats
    assert copy.seats.max_processes == 7 and copy.seats._idle == []
