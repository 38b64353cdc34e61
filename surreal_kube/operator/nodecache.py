"""The cluster's nodes, kept by one list and a watch: pools and pending reasons without lists.

Without it the operator listed every node on the first create after a minute (to discover the
node pools of a profile that declares none) and whenever a pod could not be scheduled (to say
in plain words what is missing): on 1,000 nodes a list is megabytes the API server serializes
and the operator parses, while the cluster is busiest. Nodes change rarely (their heartbeats go
to Leases), so a watch is nearly silent, and the pools are recomputed only when a node changed.

Slim copies only (`slim.slim_node`: name, labels, taints, unschedulable, allocatable): what
`profile_from_nodes` and `status.pending_reason` read. Until the first list arrives (or when
the operator may not read nodes) `nodes()` is None and callers list, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from surreal_kube.launch.kube.api.slim import slim_node

__all__ = ["NodeCache", "slim_node"]


class NodeCache:
    """Slim nodes by name, from the node watch's lists and events; thread-safe."""

    def __init__(self) -> None:
        self._nodes: dict[str, dict[str, Any]] | None = None
        self._generation = 0
        self._lock = threading.Lock()

    def replace(self, nodes: list[dict[str, Any]]) -> None:
        """A (re)list: the nodes now, whole (a node deleted during a gap goes)."""
        fresh = {n["metadata"]["name"]: slim_node(n) for n in nodes}
        with self._lock:
            if fresh != self._nodes:
                self._nodes = fresh
                self._generation += 1

    def observe(self, event: str | None, node: Mapping[str, Any]) -> None:
        """One watch event; a change that leaves the slim node as it was changes nothing."""
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return
        with self._lock:
            if self._nodes is None:  # events before the first list: the list will have them
                return
            if event == "DELETED":
                if self._nodes.pop(name, None) is not None:
                    self._generation += 1
                return
            slim = slim_node(node)
            if self._nodes.get(name) != slim:
                self._nodes[name] = slim
                self._generation += 1

    def nodes(self) -> tuple[list[dict[str, Any]], int] | None:
        """(the nodes, their generation: it changes whenever they do); None before a list."""
        with self._lock:
            if self._nodes is None:
                return None
            return list(self._nodes.values()), self._generation
