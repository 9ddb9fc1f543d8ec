"""Routing: which provider serves each call, and how the swarm shares them.

`router` (tiers, failover, the call path), `candidate` (a provider+model target and its
live measurements), `retry` (backoff, Retry-After), `hedge` (a second request after the
p95 time to first token), `breaker` (the circuit breaker), `limits` (concurrency, rate
and quota gates shared by every agent of a run, AIMD on 429).
"""

from swarm.routing.router import Need, Router, TierModel

__all__ = ["Need", "Router", "TierModel"]
