"""The trace viewer: `swarm trace view TRACE` serves a local page for latency analysis.

- `payload` the span columns the first draw needs, binary, and the lanes they go in
- `data`   turns a trace into what the page draws: the span payload at once; span details,
           the summary with its latency ledgers and histograms, what-if predictions after
- `serve`  the aiohttp server (loopback only, no external requests) and `main_view`
- `static` the page itself: vanilla JS drawing on a <canvas>, no build step
"""

from __future__ import annotations

__all__: list[str] = []
