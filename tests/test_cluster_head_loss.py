"""The head of a run's Ray cluster lost: the run stops `interrupted` (exit 130, `--json` one
object saying why, no traceback), before Ray itself would end the driver (its GCS gone for
60 s: no report at all), and `swarm resume RUN --cluster ADDRESS` continues it on another
cluster to done. Real clusters on loopback, the real CLI in a subprocess, the simulator
as the model; the moment to kill is found by polling the head's processes, never by
sleeping.

It takes minutes on a loaded 2-core machine (two clusters, two CLI runs, a run on the
simulator resumed to its end): run only with SWARM_SLOW_CLUSTER_TESTS=1. Measured at load
6-13 (138 s in all): the two clusters up 10 s; the CLI's run until its first workspace
actor runs 29 s (the CLI and a Ray worker each importing swarm and Ray, the baseline
check); the kill until the CLI exits 17-32 s (10 s of `HEAD_LOST_AFTER_S`, then
`ray.shutdown` with its GCS gone); the resume of the demo to done on the second cluster
56 s; the clusters stopped 10 s. The resume alone takes more than 30 s, the run up to
its first actor about as much."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm._cluster.local import LocalCluster, NodeSpec, kill_node, local_cluster
from swarm._cluster.loopback import LOOPBACK_ENV, descendants
from tests.test_run_state import SLOW_SIM, TASK, _env

FAST_SIM = '[providers.sim]\nkind = "sim"\ntime_scale = 0.01\n'
ACTOR = b"ray::WorkspaceNode"
"""How a workspace actor's worker process calls itself (its process title)."""


def _actor_up(cluster: LocalCluster) -> bool:
    for pid in descendants([cluster.processes[0].pid]):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(ACTOR):
                return True
        except OSError:
            continue
    return False


def _swarm(where: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "swarm", *args, "--json"],
        cwd=where,
        env={**_env(), **LOOPBACK_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.skipif(
    not os.environ.get("SWARM_SLOW_CLUSTER_TESTS"),
    reason="minutes long (two clusters, two CLI runs): SWARM_SLOW_CLUSTER_TESTS=1 runs it",
)
def test_a_lost_head_interrupts_the_run_and_resume_continues_it_on_another_cluster(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray")
    (tmp_path / "swarm.toml").write_text(SLOW_SIM)  # minutes: the head dies mid-run
    for logs in ("a", "b"):
        (tmp_path / logs).mkdir()
    with (
        local_cluster([NodeSpec(2)], tmp_path / "a") as first,
        local_cluster([NodeSpec(2)], tmp_path / "b") as second,
    ):
        solving = _swarm(tmp_path, "solve", str(TASK), "--cluster", first.address)
        try:
            deadline = time.monotonic() + 120
            while not _actor_up(first):
                assert solving.poll() is None, solving.communicate()
                assert time.monotonic() < deadline, "no workspace actor on the cluster"
                time.sleep(0.1)  # polling
            kill_node(first.processes[0])
            out, err = solving.communicate(timeout=120)
        finally:
            if solving.poll() is None:
                solving.kill()
                solving.communicate()
        assert solving.returncode == 130, (out, err)
        report = json.loads(out)
        assert report["status"] == "interrupted"
        assert f"the Ray cluster's head at {first.address} was lost" in report["error"]
        assert "Traceback" not in err
        (tmp_path / "swarm.toml").write_text(FAST_SIM)
        resuming = _swarm(tmp_path, "resume", report["run_id"], "--cluster", second.address)
        out, err = resuming.communicate(timeout=300)
    assert resuming.returncode == 0, (out, err)
    resumed = json.loads(out)
    assert (resumed["run_id"], resumed["status"]) == (report["run_id"], "done")
