"""Secrets and message content kept out of what we record: one rule for each.

- `scrub` takes API keys out of any text bound for an error message, a span or a log line
  (servers sometimes echo the key they were sent).
- `capture_content` decides whether prompts and replies may be recorded on spans: only
  when the user opts in with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` set to
  `true` or `1` (any case), as the OpenTelemetry GenAI conventions describe.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["CAPTURE_CONTENT_ENV", "MASK", "capture_content", "scrub"]

MASK = "***"
"""What a secret is replaced with."""
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The opt-in switch for recording message content on spans."""


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every non-empty secret in `secrets` replaced by `***`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def capture_content(env: Mapping[str, str] | None = None) -> bool:
    """True when message content may be recorded (`true` or `1`, any case); reads
    `os.environ` when `env` is None."""
    source = os.environ if env is None else env
    return source.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("true", "1")
