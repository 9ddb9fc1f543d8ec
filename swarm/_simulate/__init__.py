"""`swarm simulate`: a synthetic swarm in a simulated world, through the real run path.

`world` (the simulated plan, workspaces, checks, merges, tools and model script) and
`simulation` (the workload spec, the run, the critical-path bound).
"""

from swarm._simulate.simulation import PRESETS, SimSpec, bound, run_simulation, simulate

__all__ = ["PRESETS", "SimSpec", "bound", "run_simulation", "simulate"]
