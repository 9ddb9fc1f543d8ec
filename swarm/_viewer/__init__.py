"""The trace viewer: `swarm trace view TRACE` serves a local page for latency analysis.

- `lanes`   which lane and row each span goes in, found lane by lane
- `payload` the span columns, binary, built and sent as a stream of frames (the first
           screen's lanes first) so the page draws before the whole payload is built
- `data`   turns a trace into what the page draws: the span payload as it is built; span
           details, the summary with its latency ledgers and histograms, what-if after
- `serve`  the aiohttp server (loopback only, no external requests) and `main_view`
- `static` the page itself: vanilla JS drawing on a <canvas>, no build step
"""

from __future__ import annotations

__all__: list[str] = []
