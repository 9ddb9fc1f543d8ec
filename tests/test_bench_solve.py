"""`benchmarks.bench_solve`: its lower bounds, and a small red run end to end."""

from __future__ import annotations

import anyio
import pytest

from benchmarks.bench_solve import Workload, lower_bound, run


def test_the_bound_with_fixes_adds_what_a_culprit_cannot_skip() -> None:
    # 20 subtasks at once: s0009 waits for s0008 to land, s0019 for s0018; the pair
    # (s0010, s0011) is red together
    w = Workload(subtasks=20, max_agents=20, check_s=1.0, red_every=20)
    # s0009 starts once s0008 has landed (1.5 + 1), ends 4.0 and lands 5.0; then the
    # baseline and the final accept
    assert lower_bound(w, 0.5) == pytest.approx(7.0)
    # the pair ends at 1.5: found red, fixed (0.3), checked and merged by 4.8, before 5.0
    assert lower_bound(w, 0.5, 0.3) == pytest.approx(7.0)
    # a slower fix is the critical path: 1.5 + 3 checks + 1.0
    assert lower_bound(w, 0.5, 1.0) == pytest.approx(7.5)


@pytest.mark.anyio
async def test_a_small_red_run_merges_every_subtask_and_reports_both_bounds() -> None:
    w = Workload(
        subtasks=20,
        max_agents=10,
        check_s=0.1,
        red_every=10,
        merge="check_slots = 4\nmax_parallel_checks = 2",
    )
    with anyio.fail_after(120):
        result = await run(w)
    assert (result["status"], result["merged"]) == ("done", 20)
    assert result["rebases"] >= 1
    assert result["bound_with_fixes_s"] >= result["bound_s"] > 0
    assert result["wall_over_bound_with_fixes"] <= result["wall_over_bound"]
