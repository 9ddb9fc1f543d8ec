"""Latency analysis of swarm traces.

`load_trace` reads an OTLP JSON Lines file into a columnar `Trace`; `critical_path` finds
the steps that set the wall-clock; `ledger` splits the wall-clock into causes;
`summarize` reports per tier, provider, model and role; `whatif` re-simulates the run on
other providers; `diff` compares two runs; `export_chrome` and `send_otlp` hand a trace to
other tools. `swarm.analysis.assertions` turns latency budgets into pytest assertions.
"""

from swarm.analysis.critical_path import critical_path
from swarm.analysis.diff import diff
from swarm.analysis.export import export_chrome, send_otlp
from swarm.analysis.ledger import ledger
from swarm.analysis.loader import load_trace
from swarm.analysis.model import SpanRecord, Trace
from swarm.analysis.summary import summarize
from swarm.analysis.whatif import whatif

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
