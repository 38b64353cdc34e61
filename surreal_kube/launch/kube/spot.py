"""Spot (preemptible) capacity: which components may use it, and how nodes say they are Spot.

Spot VMs cost a fraction of on-demand ones and may be taken back at any time (GKE gives about 30 s
notice, pods get at most 15 s of grace: https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms).
Agents and evals keep no state a preemption would lose: a replaced agent loses at most the
sub-trajectory it had not sent, and the learner's curve only misses that agent's share while it
is away. The learner (its optimizer state since the last checkpoint), replay (its buffer) and the
parameter server, and the data pods beside the learner, would each cost the run far more; they
stay on on-demand nodes unless the spec names a Spot pool for them.

A node is Spot when it carries one of `SPOT_LABELS` (GKE's Spot and preemptible labels,
Karpenter's and EKS's capacity types). Discovered pools whose nodes all carry one are Spot
pools; a profile can also declare `spot: true` for a pool scaled to zero. Placement by fit puts
agents and evals on a Spot pool first and keeps every other component off them; every pod of
those components also carries a required node affinity that excludes Spot nodes, so the rule
holds where the pools are not known (no pre-flight, no right to read nodes, a Spot pool at zero
that the autoscaler grows later).
"""

from __future__ import annotations

from collections.abc import Mapping

SPOT_COMPONENTS = ("agent", "eval")
"""Components that may run on Spot capacity: they keep no state a preemption would lose."""

SPOT_LABELS: tuple[tuple[str, str], ...] = (
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("karpenter.sh/capacity-type", "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
)
"""(label, value) pairs that mark a node as Spot (preemptible) capacity."""


def is_spot_node(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels say it is Spot capacity."""
    return any(labels.get(key) == value for key, value in SPOT_LABELS)


def spot_taint(key: str) -> bool:
    """Whether a taint key is one that Spot pools carry (tolerated by the components that may
    run there, e.g. GKE's recommended `cloud.google.com/gke-spot=true:NoSchedule`)."""
    return any(key == label for label, _ in SPOT_LABELS)


def off_spot_expressions() -> list[dict[str, object]]:
    """matchExpressions of a required node affinity that excludes every kind of Spot node."""
    return [{"key": key, "operator": "NotIn", "values": [value]} for key, value in SPOT_LABELS]
