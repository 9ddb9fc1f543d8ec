"""Latency analysis of swarm traces: load, critical path, ledger, summary, what-if."""
