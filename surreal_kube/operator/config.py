"""The settings of one operator run, shared by its apply, status and loops."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from surreal_kube.launch.kube.profile import ClusterProfile
from surreal_kube.operator.metrics import Metrics
from surreal_kube.operator.nodecache import NodeCache

FIELD_MANAGER = "surreal-kube-operator"
"""The server-side apply field manager of everything the operator writes."""


@dataclass
class Config:
    """Settings of one operator run (command-line flags, Helm values)."""

    learner_max_restarts: int = 5
    resync_seconds: float = 300.0
    """A safety net only: watch events drive recreation and status; the resync re-reads every
    experiment's objects and pods this often, to heal anything a missed event left behind."""
    profile: ClusterProfile | None = None
    read_nodes: bool = True
    refresh_delay: float = 0.5
    """Pod events within this many seconds are folded into one status refresh."""
    refresh_cpu_share: float = 0.03
    """At most this share of a core goes to refreshing one experiment's status: after a refresh
    that took c CPU seconds the next waits at least c / share, so a refresh costs the same share
    of a core whatever the experiment's size. While the cluster creates the pods, every CPU
    second the operator spends is one the scheduler and kubelets wait for: at 5 % the refreshes
    were most of the operator's CPU during a create (`bench/scale.py`)."""
    default_images: dict[str, str] = field(default_factory=dict)
    """key of spec.images -> image used when an experiment's spec names a build there."""
    default_queue: str | None = None
    """Kueue LocalQueue for experiments whose spec names none (Helm value defaultQueue); None:
    those start at once, without Kueue."""
    nodes: NodeCache | None = None
    """The node watch's nodes (None, or not listed yet: nodes are listed when needed)."""
    metrics: Metrics = field(default_factory=Metrics)
    """What `/metrics` serves: reconciles, refreshes and each experiment's last status."""

    def held_nodes(self) -> tuple[list[dict[str, Any]], int] | None:
        """The node watch's nodes and their generation; None without a watch or before its
        list (then whoever needs nodes lists them)."""
        return self.nodes.nodes() if self.nodes is not None else None
