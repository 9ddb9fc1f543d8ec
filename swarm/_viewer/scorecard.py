"""The viewer's scorecard panel: what `/api/scorecard` answers.

The numbers are `swarm trace scorecard`'s (`swarm._analysis.scorecard`), computed once per
served trace and sent as they are: per provider/model and per role, calls, TTFT
p50/p95/p99, decode tokens/s, error and 429 rates, effective USD per million tokens (cache
hits at their price), cached input share and cost share. The page's `scorecard.js` only
formats them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from swarm._analysis import Trace
from swarm._analysis.scorecard import scorecard

__all__ = ["scorecard_json"]


def _finite(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _finite(x) for k, x in v.items()}
    return v


def scorecard_json(trace: Trace) -> bytes:
    """The run's scorecard as the page gets it (JSON; a non-finite figure is null)."""
    return json.dumps(_finite(scorecard(trace)), separators=(",", ":")).encode()
