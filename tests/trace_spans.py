"""Reading a trace file's spans and their attributes in tests (OTLP JSON lines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def spans(path: Path) -> list[dict[str, Any]]:
    """Every span in the trace file at `path`, in file order."""
    out = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                out.extend(ss.get("spans", []))
    return out


def attr(span: dict[str, Any], key: str) -> Any:
    """The value of attribute `key` on `span`, or None."""
    for a in span.get("attributes", []):
        if a["key"] == key:
            return next(iter(a["value"].values()))
    return None
