"""Workspaces on a cluster: each sub-agent's clone, tool calls and checks on a Ray node.

`swarm solve --cluster auto` (or `[cluster] kind = "ray"`) keeps the coordinator, router,
journal and tracing in this process (the driver) and puts every sub-agent's workspace in a
Ray actor on some node (`node.WorkspaceNode`): a clone of the base commit shipped as a git
bundle through the object store, where its tools and checks run in the node's sandbox;
patches come back to the driver's merge queue, which builds its batches here and checks
them on nodes too (`merge_checks`).

Layer: above `run` (it plugs into a run's seams: `Workspaces`, the tools, the checks'
`CheckPlace`), below `simulate`. Ray is an optional extra (`pip install 'swarm[ray]'`):
nothing here imports it until a cluster is opened.
"""

from __future__ import annotations

from swarm._cluster.node import WorkspaceNode
from swarm._cluster.ray_cluster import RayCluster, RayWorkspaces
from swarm._cluster.remote import Remotes, RemoteWorkspace, remote_tools

__all__ = [
    "RayCluster",
    "RayWorkspaces",
    "RemoteWorkspace",
    "Remotes",
    "WorkspaceNode",
    "remote_tools",
]
