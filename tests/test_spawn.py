"""swarm._sandbox._spawn: short commands run to the end, their output, and on cancel let finish
(for a while) then killed;
started here, or through a run's spawn server (`swarm._sandbox._spawner`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from swarm._sandbox import _spawn, _spawner
from swarm._sandbox._spawn import Spawning

pytestmark = pytest.mark.anyio

PY = sys.executable


@pytest.fixture(params=["fast", "portable", "served"])
async def way(request: pytest.FixtureRequest) -> AsyncIterator[Spawning]:
    """Each way `_spawn.run` starts a command: here with posix_spawn and a pidfd, through
    anyio (the portable way), through a spawn server."""
    if request.param == "portable":
        yield Spawning(fast=False)
        return
    if not _spawn._fast_ok():
        pytest.skip("no posix_spawn, memfd or pidfd here")
    if request.param == "fast":
        yield Spawning()
        return
    async with _spawner.spawn_server() as server:
        yield Spawning(server=server)


def _dead(pid: int) -> bool:
    """`pid` runs no more: exited (a zombie not reaped yet counts) or gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith(("Z", "X"))
    except FileNotFoundError:
        return True


async def _gone(pid: int) -> bool:
    """`pid` has exited and been reaped (by us, or by the spawn server soon after)."""
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await anyio.sleep(0.02)
    return False


async def test_output_exit_code_and_input(way: Spawning) -> None:
    code = (
        "import sys; d = sys.stdin.read(); print(d.upper()); "
        "print('e', file=sys.stderr); sys.exit(3)"
    )
    done = await _spawn.run([PY, "-c", code], env=dict(os.environ), input=b"abc" * 50_000, how=way)
    assert done.returncode == 3
    assert done.stdout == b"ABC" * 50_000 + b"\n"
    assert done.stderr == b"e\n"


async def test_no_input_reads_empty_stdin(way: Spawning) -> None:
    done = await _spawn.run(
        [PY, "-c", "import sys; print(repr(sys.stdin.read()))"], env={}, how=way
    )
    assert (done.returncode, done.stdout) == (0, b"''\n")


async def test_environment_is_the_one_given(way: Spawning) -> None:
    done = await _spawn.run(
        [PY, "-c", "import os; print(os.environ['ONLY'])"], env={"ONLY": "x"}, how=way
    )
    assert done.stdout == b"x\n"


async def _cancel_once_there(path: Path, argv: list[str], how: Spawning) -> float:
    """Run `argv`, cancel it once `path` holds something; seconds the cancelled run took
    to return from then."""
    with anyio.move_on_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _spawn.run(argv, env={}, how=how))
            for _ in range(250):
                if path.exists() and path.read_text():
                    break
                await anyio.sleep(0.02)
            cancelled = anyio.current_time()
            tg.cancel_scope.cancel()
    return anyio.current_time() - cancelled


async def test_cancelled_command_is_killed_after_the_grace(way: Spawning, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    took = await _cancel_once_there(marker, [PY, "-c", code], replace(way, grace_s=0.3))
    pid = int(marker.read_text())
    # dead once the cancelled call is over (a git killed there must not go on writing in
    # a tree handed on); reaped by us at once, or by the spawn server soon after
    assert _dead(pid)
    assert await _gone(pid)
    assert took < 3


async def test_cancelled_command_may_finish_and_remove_its_lock(
    way: Spawning, tmp_path: Path
) -> None:
    """A git killed mid-way leaves its lock file: a stale `packed-refs.lock` made every
    later ref deletion in the repository wait. A cancelled command runs on to its end."""
    lock = tmp_path / "packed-refs.lock"
    code = f"import time, os; p = {str(lock)!r}; open(p, 'w').write('x')"
    code += "; time.sleep(0.5); os.remove(p)"
    took = await _cancel_once_there(lock, [PY, "-c", code], way)
    assert not lock.exists()
    assert took < way.grace_s


async def test_missing_program_raises_oserror(way: Spawning) -> None:
    with pytest.raises(FileNotFoundError):
        await _spawn.run(["/nonexistent/program"], env={}, how=way)


def test_which_follows_path(tmp_path: Path) -> None:
    assert _spawn.which("git", {"PATH": str(tmp_path)}) is None
    found = _spawn.which("git", dict(os.environ))
    assert found is not None and Path(found).name == "git"


async def test_sigpipe_is_back_at_its_default_in_the_child(way: Spawning) -> None:
    done = await _spawn.run(["/bin/cat", "/proc/self/status"], env={}, how=way)
    ignored = next(line for line in done.stdout.decode().splitlines() if line.startswith("SigIgn"))
    assert not int(ignored.split()[1], 16) & (1 << (signal.SIGPIPE - 1))


async def test_the_spawn_server_ends_with_its_block_and_keeps_no_secrets() -> None:
    async with _spawner.spawn_server() as server:
        assert server is not None and _spawner.current() is server
        done = await _spawn.run(["/bin/sh", "-c", "echo $PPID"], env={})
        server_pid = int(done.stdout)
        with open(f"/proc/{server_pid}/environ", "rb") as f:
            assert f.read() == b""  # commands bring their own environment
        codes: list[int] = []

        async def one(n: int) -> None:
            done = await _spawn.run(["/bin/sh", "-c", f"sleep 0.2; exit {n}"], env={})
            codes.append(done.returncode)

        async with anyio.create_task_group() as tg:  # many at once, each its own status
            for n in range(20):
                tg.start_soon(one, n)
        assert sorted(codes) == list(range(20))
    assert _spawner.current() is None
    assert await _gone(server_pid)


async def test_a_command_the_server_cannot_start_fails_alone(tmp_path: Path) -> None:
    async with _spawner.spawn_server() as server:
        assert server is not None
        with pytest.raises(FileNotFoundError):
            await _spawn.run([str(tmp_path / "missing")], env={})
        done = await _spawn.run(["/bin/echo", "still here"], env={})
        assert done.stdout == b"still here\n"


async def test_commands_start_here_once_the_spawn_server_has_died() -> None:
    async with _spawner.spawn_server() as server:
        assert server is not None
        done = await _spawn.run(["/bin/sh", "-c", "echo $PPID"], env={})
        server_pid = int(done.stdout)
        os.kill(server_pid, signal.SIGKILL)
        for _ in range(250):  # a zombie until the block's end reaps it
            with open(f"/proc/{server_pid}/stat") as f:
                if f.read().split(") ")[1].startswith("Z"):
                    break
            await anyio.sleep(0.01)
        done = await _spawn.run(["/bin/echo", "started here"], env={})
        assert done.stdout == b"started here\n"
        assert _spawner.current() is None


async def test_many_commands_at_once_wait_their_turn_for_the_socket() -> None:
    """More commands than the socket to the server buffers: they wait for room, one waiter
    at a time, and every one runs."""
    env = {f"V{i}": "x" * 100 for i in range(100)}  # ~10 kB a message
    codes: list[int] = []

    async def one() -> None:
        codes.append((await _spawn.run(["/bin/true"], env=env)).returncode)

    async with _spawner.spawn_server():
        async with anyio.create_task_group() as tg:
            for _ in range(300):
                tg.start_soon(one)
    assert codes == [0] * 300
