"""kill -9 a real `swarm solve` of the demo at random moments, resume it: no completed
model call is sent again (the journal knows which completed), and the final tree is the
uninterrupted run's. The rounds are `benchmarks.bench_resume`'s."""

from __future__ import annotations

from benchmarks.bench_resume import bench


def test_kill_9_then_resume_repeats_no_completed_call() -> None:
    result = bench(kills=3, seed=14, jobs=3)
    assert result["reference"]["status"] == "done"
    for r in result["rounds"]:
        assert r["repeated"] == [], f"completed calls sent again: {r}"
        why = f"{r.get('resume_error')}; subtasks {r.get('resume_subtasks')}"
        assert r["resume_status"] == "done", f"killed at {r['killed_at_s']} s: {why}"
        assert r["same_tree"], f"a different final tree: {r}"
