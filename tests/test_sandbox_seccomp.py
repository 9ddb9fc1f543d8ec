"""The seccomp filter: each system call it denies fails inside a real bwrap sandbox, and
what commands need still works."""

from __future__ import annotations

import contextlib
import json
import platform
import re
import sys
from pathlib import Path

import pytest

from swarm._sandbox import BwrapSandbox, SandboxPolicy, _pids, _seccomp, bwrap_problem
from swarm._sandbox.process import run_confined
from tests.test_sandbox_seats import _seated

UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
pytestmark = pytest.mark.skipif(
    bwrap_problem() is not None or _seccomp.path() is None,
    reason=f"no bwrap ({bwrap_problem()}) or no filter for {platform.machine()}",
)

PROBE = r"""
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
numbers = json.loads(sys.argv[1])
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17

def call(nr, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    if result == 0 and nr == numbers["clone"]:  # the child of a clone that worked
        os._exit(0)
    if result > 0 and nr == numbers["clone"]:
        os.waitpid(result, 0)
    return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")

out = {name: call(nr) for name, nr in numbers.items() if name in sys.argv[2:]}
out["ptrace"] = call(numbers["ptrace"], 0, 0, 0, 0)  # PTRACE_TRACEME: works unfiltered
out["keyctl"] = call(numbers["keyctl"], 0, -3, 0)  # the session keyring's id
out["unshare-newuser"] = call(numbers["unshare"], CLONE_NEWUSER)
out["clone-newuser"] = call(numbers["clone"], CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
out["clone3"] = call(numbers["clone3"], 0, 0)
out["ioctl-tiocsti"] = call(numbers["ioctl"], 0, 0x5412, 0)
out["ioctl-fionread"] = call(numbers["ioctl"], 0, 0x541B, ctypes.addressof(ctypes.c_int()))
out["fork"] = "ok" if os.waitpid(os.fork() or os._exit(0), 0) else "?"
out["status"] = [l for l in open("/proc/self/status") if l.startswith("Seccomp:")][0].split()[1]
out["variable"] = os.environ.get("SWARM_SECCOMP_FILTER", "unset")
print("PROBE" + json.dumps(out))
"""


async def _probe(tmp_path: Path, start: str) -> dict[str, str]:
    numbers = _seccomp._NUMBERS[platform.machine()] | _seccomp._NEW_MOUNT_API
    read_only = (Path(sys.prefix), Path(sys.base_prefix))
    policy = SandboxPolicy(read_only=read_only, cgroups=start != "plain")
    sandbox = BwrapSandbox(policy)
    async with _seated(sandbox) if start == "seat" else contextlib.nullcontext() as taken:
        result = await run_confined(
            sandbox,
            [sys.executable, "-c", PROBE, json.dumps(numbers), *_seccomp.DENIED],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=30,
            max_output_chars=20_000,
        )
    assert start != "seat" or (taken and taken[0] is not None)  # it ran in a seat
    line = next((x for x in result.output.splitlines() if x.startswith("PROBE")), None)
    assert line is not None, result.output
    found: dict[str, str] = json.loads(line.removeprefix("PROBE"))
    return found


@pytest.mark.parametrize("start", ["seat", "cgroup", "plain"])
async def test_each_denied_call_fails_inside_and_the_rest_works(tmp_path: Path, start: str) -> None:
    """However the command starts: a seat (a run's session), a shell joining its cgroups,
    or nothing before bwrap (no cgroups here: a /bin/sh of its own opens the filter)."""
    if start != "plain" and not _pids.usable():
        pytest.skip("no cgroups here: commands start plain")
    found = await _probe(tmp_path, start)
    assert found.pop("status") == "2"  # a filter is loaded
    assert found.pop("variable") == "unset"  # the launcher's, not the command's
    assert found.pop("fork") == "ok"
    assert found.pop("ioctl-fionread") == "ENOTTY"  # an ioctl the filter lets through
    assert found.pop("clone3") == "ENOSYS"  # C libraries fall back to clone, which is checked
    assert found == dict.fromkeys(found, "EPERM"), found


@pytest.mark.skipif(not UNISTD.is_file() or platform.machine() != "x86_64", reason="no table")
def test_the_numbers_are_the_kernels() -> None:
    table = dict(re.findall(r"#define __NR_(\w+) (\d+)", UNISTD.read_text()))
    ours = _seccomp._NUMBERS["x86_64"] | _seccomp._NEW_MOUNT_API
    assert {name: int(table[name]) for name in ours} == ours


def test_a_foreign_architecture_gets_no_filter_it_would_misread() -> None:
    assert set(_seccomp._NUMBERS) == {"x86_64", "aarch64"}
    assert len(_seccomp.program("aarch64")) % 8 == 0
