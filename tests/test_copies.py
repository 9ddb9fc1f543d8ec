"""Near copies: new definitions that repeat one the change left as it was (`_copies`)."""

from __future__ import annotations

from pathlib import Path

from swarm._demo import DEMO_REPO
from swarm.run._copies import Copy, copied_definitions, near_copies
from tests.test_solve_real import git as git_output
from tests.test_solve_real import make_repo

SUMMARY = (DEMO_REPO / "inventory" / "report.py").read_text()

# what the 1.5B model wrote when asked to add type hints to report.py
COPIED = (
    SUMMARY
    + '''

def order_summary_updated(items: List[Dict], stock: Dict[str, int]) -> str:
    """One line per order line with its stock status, then the order total."""
    lines = []
    for item in items:
        status = "in stock" if in_stock(stock, item["name"]) else "backorder"
        lines.append(f"{item['name']}: {item['qty']} x {item['price']:.2f} ({status})")
    lines.append(f"total: {sum(item['price'] for item in items) * 1.05:.2f}")
    return "\\n".join(lines)
'''
)


def test_a_hinted_copy_beside_the_unchanged_original_is_a_copy() -> None:
    found = near_copies("inventory/report.py", SUMMARY, COPIED, frozenset())
    assert found == [Copy("inventory/report.py", "order_summary_updated", "summary")]
    assert str(found[0]) == "order_summary_updated (a near copy of summary, inventory/report.py)"


def test_no_copy_when_the_original_changed_or_the_new_name_was_asked_for() -> None:
    hinted = COPIED.replace("def summary(items, stock):", "def summary(items: list, stock):")
    assert near_copies("r.py", SUMMARY, hinted, frozenset()) == []
    asked = frozenset({"order_summary_updated"})
    assert near_copies("r.py", SUMMARY, COPIED, asked) == []


def test_a_new_definition_of_its_own_or_of_another_kind_is_no_copy() -> None:
    low_stock = (
        "def low_stock(stock, threshold=5):\n"
        "    return sorted(n for n, q in stock.items() if q < threshold)\n"
    )
    other = f"{SUMMARY}\n\n{low_stock}"
    assert near_copies("r.py", SUMMARY, other, frozenset()) == []
    as_class = SUMMARY.replace("def summary(items, stock):", "class Summary:")
    assert near_copies("r.py", SUMMARY, SUMMARY + "\n\n" + as_class, frozenset()) == []


def test_text_that_does_not_parse_finds_nothing() -> None:
    assert near_copies("r.py", SUMMARY, COPIED + "\ndef broken(:\n", frozenset()) == []
    assert near_copies("r.py", "def (", COPIED, frozenset()) == []


def test_short_bodies_are_not_compared() -> None:
    old = "def one():\n    return 1\n"
    assert near_copies("a.py", old, old + "\n\ndef first():\n    return 1\n", frozenset()) == []


def test_a_new_test_written_from_the_one_beside_it_is_no_copy() -> None:
    body = "    stock = {'a': 1}\n    got = low(stock)\n    assert got == ['a']\n"
    old = f"def test_low():\n{body}"
    new = f"{old}\n\ndef test_low_again():\n{body}"
    assert near_copies("tests/test_x.py", old, new, frozenset()) == []
    assert near_copies("x.py", old.replace("test_", ""), new.replace("test_", ""), frozenset())


async def test_only_files_whose_patch_adds_a_definition_are_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"inventory/report.py": SUMMARY})
    (repo / "inventory" / "report.py").write_text(COPIED)
    patch = git_output(repo, "diff", "HEAD")
    base = git_output(repo, "rev-parse", "HEAD")
    found = [Copy("inventory/report.py", "order_summary_updated", "summary")]
    assert await copied_definitions(repo, base, patch) == found
    # a patch that only edits lines inside definitions: the file is not read at all
    body_only = patch.split("+def order_summary_updated")[0]
    assert "+++ b/inventory/report.py" in body_only
    assert await copied_definitions(repo, base, body_only) == []
