"""Latency analysis of swarm traces.

`load_trace` reads an OTLP JSON Lines file into a columnar `Trace`; `critical_path` finds
the steps that set the wall-clock; `ledger` splits the wall-clock into causes;
`summarize` reports per tier, provider, model and role; `whatif` re-simulates the run on
other providers; `diff` compares two runs; `export_chrome` and `send_otlp` hand a trace to
other tools. `swarm._analysis.assertions` turns latency budgets into pytest assertions.
"""

from swarm._analysis.critical_path import critical_path
from swarm._analysis.diff import diff
from swarm._analysis.export import export_chrome, send_otlp
from swarm._analysis.ledger import ledger
from swarm._analysis.loader import load_trace
from swarm._analysis.model import SpanRecord, Trace
from swarm._analysis.summary import summarize
from swarm._analysis.whatif import whatif

__all__ = [
    "SpanRecord",
    "Trace",
    "critical_path",
    "diff",
    "export_chrome",
    "ledger",
    "load_trace",
    "send_otlp",
    "summarize",
    "whatif",
]
