"""The real-model benchmark's judge of the add-a-function task: a branch passes only
when `clamp` is defined, a test calls it and the existing test is still there."""

from __future__ import annotations

from pathlib import Path

from benchmarks.bench_real_model import git, make_add_repo, verify_add

CLAMP = "\n\ndef clamp(x: float, lo: float, hi: float) -> float:\n    return max(lo, min(x, hi))\n"


def _branch(repo: Path, name: str, tests: str) -> str:
    git(repo, "checkout", "-q", "-b", name, "main")
    init = repo / "mathutil" / "__init__.py"
    init.write_text(init.read_text() + CLAMP)
    (repo / "tests" / "test_mathutil.py").write_text(tests)
    git(repo, "commit", "-qam", name)
    git(repo, "checkout", "-q", "main")
    return name


def test_a_test_named_for_clamp_that_never_calls_it_is_not_clamp_tested(tmp_path: Path) -> None:
    """What Qwen2.5-Coder-1.5B wrote: test_add's body renamed test_clamp, test_add gone."""
    repo, _ = make_add_repo(tmp_path / "t")
    bogus = "from mathutil import add, clamp\n\n\ndef test_clamp() -> None:\n"
    bogus += "    assert add(2, 3) == 5\n"
    verdict = verify_add(repo, _branch(repo, "bogus", bogus), tmp_path / "v1")
    assert verdict["clamp_defined"] and not verdict["clamp_tested"]
    assert not verdict["test_add_kept"] and not verdict["ok"]
    good = (repo / "tests" / "test_mathutil.py").read_text() + (
        "\n\ndef test_clamp() -> None:\n    assert clamp(5, 0, 3) == 3\n"
    )
    verdict = verify_add(
        repo, _branch(repo, "good", good.replace("add\n", "add, clamp\n", 1)), tmp_path / "v2"
    )
    assert verdict["clamp_tested"] and verdict["test_add_kept"]
