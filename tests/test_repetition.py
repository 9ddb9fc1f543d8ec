"""A reply that loops on itself is found while it streams, and nothing else is."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm.providers._repetition import MAX_PERIOD, MIN_CHARS, LoopWatch, loop_start

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("head", "unit"),
    [
        ("Sure.\n", "    total += line\n"),
        ("x", "ab"),
        ("", "I apologize for the confusion. Let me try again. " * 3),
        ("def f():\n", "    return 1\n"),
    ],
)
def test_a_loop_is_found_and_one_round_kept(head: str, unit: str) -> None:
    text = head + unit * (MIN_CHARS // len(unit) + 8)
    start = loop_start(text)
    assert start is not None
    assert len(text[:start]) <= len(head) + len(unit)
    assert (text[:start] + unit * 3).startswith(text[: len(head)])


def test_real_code_and_prose_never_count_as_a_loop() -> None:
    for path in [*sorted((ROOT / "swarm").rglob("*.py"))[:80], ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        for end in range(MIN_CHARS, len(text), 997):
            assert loop_start(text[:end]) is None, (path, end)


def test_a_ruler_line_is_not_a_loop_but_a_page_of_it_is() -> None:
    assert loop_start("=" * 200) is None
    assert loop_start("=" * (MIN_CHARS + 10)) == 1


def test_the_watch_looks_every_so_many_pieces() -> None:
    watch = LoopWatch()
    pieces = ["a = 1\n"] * 10
    assert watch.cut(pieces) is None  # too few pieces to look yet
    pieces += ["b = 2\n"] * 400
    kept = watch.cut(pieces)
    assert kept is not None and kept.endswith("b = 2\n") and kept.count("b = 2") == 1


def test_a_whole_file_written_out_again_and_again_is_a_loop() -> None:
    # the 1.5B model's 10,100-token reply: one fenced pricing.py, 30 times over
    unit = "```python\n# inventory/pricing.py\n" + (ROOT / "swarm" / "_pyast.py").read_text()
    unit = unit[:1100] + "\n```\n\n"
    assert len(unit) > MAX_PERIOD
    text = "Here is the file:\n\n" + unit * 2
    assert loop_start(text) is None  # twice may be a model showing before and after
    text += unit * 2
    start = loop_start(text)
    assert start is not None and text[:start].rstrip() == ("Here is the file:\n\n" + unit).rstrip()
    watch = LoopWatch()  # and while it streams, a few hundred characters at a time
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    assert watch.cut(pieces) == text[:start]
