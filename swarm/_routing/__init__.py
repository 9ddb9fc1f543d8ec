"""Routing: which provider serves each call, and how the swarm shares them.

`router` (tiers, failover, the call path), `candidate` (a provider+model target and its
live measurements), `retry` (backoff, Retry-After), `hedge` (a second request after the
p95 time to first token), `breaker` (the circuit breaker), `gate` (the per-provider gates
every agent of a run shares, and the permit a call holds: `async with admit(...)`),
`limits` (the concurrency limiter with AIMD on 429, and the token bucket) and `quota`
(rates learned from rate-limit headers or from 429s alone).
"""

from swarm._routing.router import Need, Router, TierModel

__all__ = ["Need", "Router", "TierModel"]
