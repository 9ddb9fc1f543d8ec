"""The file tools against a directory swapped for an outside symlink between check and use.

A thread swaps `sub/` in the workspace for a symlink to a directory outside it, thousands
of times, while the tools read, write and edit `sub/...` as fast as they can. Nothing
outside may be read, written or edited, however the race falls.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.errors import ToolError

SECRET = "OUTSIDE-SECRET"
ROUNDS = 3000
SWAPS = 1000


@pytest.fixture
def fast_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # interleave the threads as finely as the GIL allows
    yield
    sys.setswitchinterval(before)


def _swap(ws: Path, outside: Path, stop: threading.Event, swaps: list[int]) -> None:
    sub, real = ws / "sub", ws / "sub-real"
    while not stop.is_set():
        os.rename(sub, real)
        _retry(partial(_replace, sub, partial(os.symlink, outside, sub)))
        _retry(partial(_replace, sub, partial(os.rename, real, sub)))
        swaps[0] += 1


def _retry(step: Callable[[], object]) -> None:
    """`step` until it succeeds: write_file may make `sub/` again in the gap, or write
    into it while it is being removed."""
    while True:
        try:
            step()
            return
        except OSError:
            continue


def _replace(path: Path, make: Callable[[], None]) -> None:
    _clear(path)
    make()


def _clear(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def test_no_tool_escapes_through_a_swapped_directory(tmp_path: Path, fast_switching: None) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    (ws / "sub" / "f.txt").write_text("inside\n")
    (outside / "f.txt").write_text(f"inside {SECRET}\n")
    before = (outside / "f.txt").stat()
    tools: dict[str, Callable[..., str]] = {
        t.name: t.fn
        for t in coding_tools(include=["read_file", "write_file", "edit_file", "list_dir"])
    }
    ctx = ToolContext(root=ws)
    stop, swaps = threading.Event(), [0]
    swapper = threading.Thread(target=_swap, args=(ws, outside, stop, swaps), daemon=True)
    swapper.start()
    escaped: list[str] = []
    done = {"read": 0, "write": 0, "edit": 0, "list": 0}
    try:
        rounds = 0
        # Both sides must have run enough: on a loaded machine the swapper may get few
        # turns in 3,000 rounds, so the tools go on until it has swapped 1,000 times too.
        give_up = time.monotonic() + 300  # a swapper that died must not hang the suite
        while (rounds < ROUNDS or swaps[0] < SWAPS) and time.monotonic() < give_up:
            rounds += 1
            calls: tuple[tuple[str, Callable[[], str]], ...] = (
                ("read", lambda: tools["read_file"](ctx, "sub/f.txt")),
                ("list", lambda: tools["list_dir"](ctx, "sub")),
                ("write", lambda: tools["write_file"](ctx, "sub/w.txt", "written")),
                ("edit", lambda: tools["edit_file"](ctx, "sub/f.txt", "inside", "inside ")),
            )
            for kind, call in calls:
                try:
                    out: str = call()
                except (ToolError, OSError):
                    continue
                done[kind] += 1
                if SECRET in out or (
                    "w.txt" in out and kind == "list" and (outside / "w.txt").exists()
                ):
                    escaped.append(f"{kind}: {out[:80]}")
    finally:
        stop.set()
        swapper.join()
    after = (outside / "f.txt").stat()
    assert swaps[0] >= SWAPS, swaps
    assert all(n > 0 for n in done.values()), done  # the tools did work between the swaps
    assert not (outside / "w.txt").exists(), "write_file wrote outside the workspace"
    assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino), (
        "edit_file rewrote a file outside the workspace"
    )
    assert escaped == []
