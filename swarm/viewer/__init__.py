"""The trace viewer: `swarm trace view TRACE` serves a local page for latency analysis.

- `data`   turns a trace into what the page draws: a columnar span payload, span details,
           the summary with its latency ledger and histograms, what-if predictions
- `serve`  the aiohttp server (loopback only, no external requests) and `main_view`
- `static` the page itself: vanilla JS drawing on a <canvas>, no build step
"""

from __future__ import annotations

__all__: list[str] = []
