"""The scheduler's fit rules, written once: whether a pod may go on a node, and whether it fits.

Two places ask: `place` before anything is created (a component's pod shape against a node
pool's shape, from the profile) and `status` when a pod waits (a pending pod against the nodes
and what their pods already take, from the cluster). They must answer alike, or pre-flight
accepts what status then calls impossible. The rules, as the default scheduler applies them:

- a node admits a pod when its labels carry every key and value of the pod's node selector and
  the pod tolerates each of its taints whose effect keeps pods off (NoSchedule, NoExecute);
- a toleration matches a taint of its key (`Exists`: any value; `Equal`: that value), of its
  effect when it names one; `Exists` without a key matches every taint;
- a pod asks for the sum of its containers' requests, at least its largest init container's,
  plus the pod overhead, a limit standing for a missing request;
- it fits where, for every resource it asks for, as much is there.

Quantities are read by experiment/quantity.py, like every other quantity.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from surreal_kube.experiment.quantity import parse_amount

HARD_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects that keep a pod that does not tolerate them off the node."""


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )


def tolerates(
    tolerations: Iterable[Mapping[str, Any]],
    taints: Iterable[Mapping[str, Any]],
    effects: Collection[str] | None = HARD_EFFECTS,
) -> bool:
    """Whether every taint of those effects (None: of any effect) is tolerated."""
    held = list(tolerations)
    return all(
        any(toleration_matches(t, taint) for t in held)
        for taint in taints
        if effects is None or taint.get("effect") in effects
    )


def selected(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether node labels satisfy a node selector."""
    return all(labels.get(k) == v for k, v in selector.items())


def admits(node: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether the scheduler may put `pod` on `node` at all (selector and taints, not room)."""
    spec = pod.get("spec") or {}
    return selected(
        spec.get("nodeSelector") or {}, (node.get("metadata") or {}).get("labels") or {}
    ) and tolerates(spec.get("tolerations") or [], (node.get("spec") or {}).get("taints") or [])


def fits(wants: Mapping[str, float], room: Mapping[str, float]) -> bool:
    """Whether there is as much of every resource asked for as is asked (a missing one: none)."""
    return all(amount <= room.get(resource, 0) for resource, amount in wants.items())


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """What a pod asks of a node: cpu (cores), memory (bytes), GPUs and other extended resources.

    Like the scheduler: the sum over containers, at least the largest init container; a limit
    stands for a missing request.
    """

    def of(container: Mapping[str, Any]) -> dict[str, float]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: parse_amount(v) for k, v in merged.items()}

    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + parse_amount(v)
    return total


def allocatable(node: Mapping[str, Any]) -> dict[str, float]:
    """resource -> what the node can give to pods in all."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {k: parse_amount(v) for k, v in alloc.items()}


def free_capacity(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[str, dict[str, float]]:
    """node name -> resource -> allocatable minus what its non-terminated pods request."""
    free = {node["metadata"]["name"]: allocatable(node) for node in nodes}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or node_name not in free:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for k, v in pod_requests(pod).items():
            free[node_name][k] = free[node_name].get(k, 0) - v
    return free
