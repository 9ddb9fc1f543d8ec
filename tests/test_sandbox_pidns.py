"""A command's own PID namespace capped by the kernel (`swarm._sandbox._pidns`): the helper
caps the tasks, its init maps no library, and killing that init ends everything in the
namespace at once; a swarm that may make no pids cgroup (root or not) runs its sandboxed
commands there."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from swarm._sandbox import BwrapSandbox, Limits, SandboxPolicy, _pidns, _static
from swarm._sandbox.process import run_confined
from tests.sandboxing import marked, needs_bwrap


@pytest.fixture(scope="module")
def helper() -> Path:
    """The helper, built and run once (as root, only on a kernel with per-namespace
    pid_max: it makes no user namespace then)."""
    try:
        found = _static.program("pidns")
    except OSError as exc:
        pytest.skip(f"the helper cannot be built here: {exc}")
    done = subprocess.run([found, str(_pidns.pid_max(1)), "/bin/true"], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"the kernel refuses the helper here: {done.stderr.decode().strip()}")
    return found


_MANY = "read go; for i in $(seq 600); do sleep {marker} & echo $i; done"
"""Once told to go, starts 600 processes that outlive the shell, saying how many have
started so far (`_to_the_end` runs it)."""


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _to_the_end(
    argv: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the helper's `argv`, whose command waits for a line on stdin first, to its end
    and on until its namespace is empty: the helper exits with the command's status at
    once, and the kernel empties the namespace as the init exits, which its pidfd says."""
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    ) as process:
        while not (found := _children(process.pid)):  # polling: the helper forks its init
            time.sleep(0.01)
        pidfd = os.pidfd_open(found[0])
        try:
            out, err = process.communicate("go\n", timeout=120)
            assert select.select([pidfd], [], [], 120)[0], "the namespace's init did not end"
        finally:
            os.close(pidfd)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


@pytest.fixture
def started(helper: Path) -> Iterator[subprocess.Popen[str]]:
    """The helper running a shell that leaves a `setsid` child and a background one, and
    waits; killed and reaped at the end, whatever the test did."""
    script = "setsid sleep 611.3 & sleep 611.3 & echo ready; wait"
    argv = [str(helper), str(_pidns.pid_max(8)), "/bin/sh", "-c", script]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
            yield process
        finally:
            process.kill()
            process.wait()
            for pid in marked("611.3"):  # dying with the namespace, or left if broken
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_the_kernel_refuses_forks_past_the_cap(helper: Path) -> None:
    """Nothing watches: the kernel alone stops the shell's forks short of 600 processes,
    and kills what is left once the shell (the namespace's command) has exited."""
    many = _MANY.format(marker="612.7")
    done = _to_the_end([str(helper), str(_pidns.pid_max(16)), "/bin/sh", "-c", many])
    assert "Cannot fork" in done.stderr  # dash's words for EAGAIN; it gives up there
    assert int(done.stdout.split()[-1]) < _pidns.pid_max(16)
    assert marked("612.7") == []


def test_the_namespace_has_its_own_pid_max_and_the_hosts_is_untouched(helper: Path) -> None:
    host = Path("/proc/sys/kernel/pid_max").read_text()
    done = subprocess.run(
        [helper, "4321", "/bin/sh", "-c", "cat /proc/sys/kernel/pid_max; echo $$; id -u"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["4321", "2", str(os.geteuid())]  # pid 2: under its init
    assert Path("/proc/sys/kernel/pid_max").read_text() == host


def test_the_init_maps_no_library(started: subprocess.Popen[str]) -> None:
    """What makes the kill one kernel action: the init's memory, torn down before the
    kernel kills the namespace, shares no file mapping (and its lock) with the command's
    processes."""
    (init,) = _children(started.pid)
    maps = Path(f"/proc/{init}/maps").read_text()
    files = {line.split()[-1] for line in maps.splitlines() if line.split()[-1].startswith("/")}
    assert files == {os.readlink(f"/proc/{init}/exe")}


def test_killing_the_init_ends_the_whole_namespace(started: subprocess.Popen[str]) -> None:
    """The `setsid` child and the background one included; the helper reports the kill
    as a shell would."""
    (init,) = _children(started.pid)
    os.kill(init, signal.SIGKILL)
    assert started.wait(timeout=30) == 128 + signal.SIGKILL
    assert marked("611.3") == []  # the init's exit waited for the namespace to be empty


def test_the_helper_exits_as_its_command_does(helper: Path) -> None:
    for script, code in (("exit 7", 7), ("kill -9 $$", 128 + signal.SIGKILL)):
        assert subprocess.run([helper, "400", "/bin/sh", "-c", script]).returncode == code


def test_the_helper_opens_a_file_for_the_command(helper: Path, tmp_path: Path) -> None:
    """As bubblewrap reads its seccomp filter: from a descriptor it is given."""
    (tmp_path / "filter").write_text("FILTER\n")
    argv = [str(helper), "400", "--fd", "9", str(tmp_path / "filter"), "/bin/sh", "-c", "cat <&9"]
    assert subprocess.run(argv, capture_output=True, text=True).stdout == "FILTER\n"


def test_the_helper_says_why_it_did_not_start_the_command(helper: Path) -> None:
    done = subprocess.run([helper, "5", "/bin/true"], capture_output=True, text=True)
    assert done.returncode == 125
    assert "pid namespace failed at /proc/sys/kernel/pid_max" in done.stderr
    missing = subprocess.run([helper, "400", "/no/such/program"], capture_output=True, text=True)
    assert missing.returncode == 127 and "/no/such/program" in missing.stderr


@needs_bwrap
def test_without_a_cgroup_a_sandboxed_command_is_capped_by_the_kernel(tmp_path: Path) -> None:
    """The launch line alone, no guard: bubblewrap's namespace sits in the capped one. As
    root, the command still runs as the sandbox's own uid, not root."""
    if _pidns.helper() is None:
        pytest.skip("the helper does not run here")
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(max_processes=16), cgroups=False))
    many = _MANY.format(marker="613.1")
    launch = sandbox.launch(["/bin/sh", "-c", many], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert launch.capped and launch.cgroup is None
    done = _to_the_end(launch.argv, env=launch.env, cwd=launch.cwd)
    assert "Cannot fork" in done.stderr
    assert int(done.stdout.split()[-1]) < _pidns.pid_max(16)
    assert marked("613.1") == []
    who = sandbox.launch(["/bin/sh", "-c", "id -u"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    uid = subprocess.run(who.argv, env=who.env, cwd=who.cwd, capture_output=True, text=True)
    assert who.capped and uid.stdout.strip() not in ("", "0"), uid


@needs_bwrap
@pytest.mark.anyio
async def test_the_guard_kills_the_capped_namespace_at_the_limit(tmp_path: Path) -> None:
    if _pidns.helper() is None:
        pytest.skip("the helper does not run here")
    sandbox = BwrapSandbox(SandboxPolicy(limits=Limits(max_processes=16), cgroups=False))
    many = "for i in $(seq 40); do setsid sleep 614.9 & done; wait"
    result = await run_confined(
        sandbox,
        ["/bin/sh", "-c", many],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        timeout_s=60,
        max_output_chars=4000,
    )
    assert result.denials == ("more than 16 processes at once; the command was killed",)
    assert marked("614.9") == []  # `setsid` or not: gone with the namespace
