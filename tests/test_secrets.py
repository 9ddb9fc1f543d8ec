"""Secret scrubbing and the content-capture switch (`swarm.config._secrets`)."""

from __future__ import annotations

import pytest

from swarm.config._secrets import CAPTURE_CONTENT_ENV, capture_content, scrub


def test_scrub_masks_every_secret_and_skips_empty_ones() -> None:
    text = "key sk-1 and sk-22 echoed; sk-1 again"
    assert scrub(text, ["sk-1", "", "sk-22"]) == "key *** and *** echoed; *** again"
    assert scrub(text, []) == text


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("true", True),
        ("TRUE", True),
        (" True ", True),
        ("1", True),
        ("", False),
        ("false", False),
        ("0", False),
        ("yes", False),
    ],
)
def test_capture_content_accepts_true_or_1(value: str, on: bool) -> None:
    assert capture_content({CAPTURE_CONTENT_ENV: value}) is on


def test_capture_content_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    assert capture_content() is False
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "1")
    assert capture_content() is True
