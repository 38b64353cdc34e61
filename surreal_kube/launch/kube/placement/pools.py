"""The node pools an experiment is placed on: the profile's, else the live cluster's nodes.

Placement (`place.py`) needs pools; a profile may list them, or leave them to be read from the
nodes (their pool labels, taints and allocatable), or declare autoscaled pools the nodes cannot
show. Without pre-flight the pools keep their labels and taints but lose their limits, so the
scheduler decides and `status` says why."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from surreal_kube.errors import LaunchError
from surreal_kube.launch.kube.api import slim
from surreal_kube.launch.kube.api.client import (
    NODE,
    Kube,
    KubeError,
    NotFoundError,
)
from surreal_kube.launch.kube.autopilot import AUTOPILOT_API_GROUP, AutopilotSettings
from surreal_kube.launch.kube.placement import autoscaler_status
from surreal_kube.launch.kube.profile import ClusterProfile, merge_pools, pools_from_nodes

log = logging.getLogger(__name__)


def effective_profile(
    kube: Kube | None,
    base: ClusterProfile | None,
    *,
    check_fit: bool,
    read_nodes: bool = True,
    nodes: Sequence[Mapping[str, Any]] | None = None,
) -> ClusterProfile | None:
    """The profile to render with: the base's pools, else the live cluster's (when allowed).

    nodes: the cluster's nodes when the caller already holds them (the operator's node watch);
    else they are listed.

    A profile that declares autoscaled pools (`maxCount`) declares only what the nodes cannot say:
    the live pools are read too and the declared ones put over them (`profile.merge_pools`).

    With check_fit False, the pools keep their names, labels and taints (so GPU pods still go to
    GPU pools) but their capacity is made unlimited: placement is left to the scheduler, whose
    reason then shows in `status`.
    """
    profile = base
    unset = base is None or base.autopilot is None
    if kube is not None and read_nodes and unset and serves_autopilot(kube):
        log.info("the cluster serves %s: GKE Autopilot, no node pools", AUTOPILOT_API_GROUP)
        profile = (base or ClusterProfile()).model_copy(update={"autopilot": AutopilotSettings()})
    if profile is not None and profile.autopilot is not None:
        return profile  # no pools to read: Autopilot provisions nodes for the pods it admits
    declared = list(base.pools) if base is not None else []
    autoscaled = any(p.max_count is not None for p in declared)
    if (not declared or autoscaled) and kube is not None and read_nodes:
        try:
            if nodes is not None:
                profile = profile_from_nodes(nodes, base=profile)
            else:
                profile = discover_pools(kube, base=profile)
            profile = with_autoscaler_bounds(profile, autoscaler_status.read_groups(kube))
            if autoscaled:  # a pool scaled to zero has no node: its declaration says it exists
                profile = profile.model_copy(update={"pools": merge_pools(profile.pools, declared)})
        except LaunchError as exc:
            if autoscaled:
                log.info("cannot read the nodes (%s): the profile's pools alone", exc)
            elif check_fit:
                raise LaunchError(
                    f"{exc}; pass --profile FILE listing the node pools, or --skip-preflight"
                ) from exc
            log.info("no node pools (%s); placement left to the scheduler", exc)
    if profile is None or not profile.pools:
        return profile if profile is not None and profile.pools else _no_pools(profile)
    if check_fit:
        return profile
    big = [
        p.model_copy(
            update={
                "count": max(p.count, 100_000),
                "cpu": "1000000",
                "memory": "1000000Ti",
                "pods": 1_000_000,
                "gpus": 1_000 if p.gpus else 0,
            }
        )
        for p in profile.pools
    ]
    return profile.model_copy(update={"pools": big})


def with_autoscaler_bounds(
    profile: ClusterProfile, groups: Sequence[autoscaler_status.NodeGroup]
) -> ClusterProfile:
    """The live pools with the maxima the cluster autoscaler publishes (`autoscaler_status`).

    Only discovered pools take them: a pool the profile declares keeps its own `maxCount`
    (`merge_pools` puts the declaration over the live pool), the user's word on their cluster.
    """
    maxima = autoscaler_status.pool_maxima(groups, [p.name for p in profile.pools])
    if not maxima:
        return profile
    pools = [
        p.model_copy(update={"max_count": maxima[p.name]})
        if p.max_count is None and maxima.get(p.name, 0) > p.count
        else p
        for p in profile.pools
    ]
    return profile.model_copy(update={"pools": pools})


def serves_autopilot(kube: Kube) -> bool:
    """Whether the cluster is GKE Autopilot: it serves Autopilot's own API group (its workload
    allowlists), which no Standard cluster or other distribution does."""
    try:
        kube.raw("GET", f"/apis/{AUTOPILOT_API_GROUP}", what="discover GKE Autopilot")
    except NotFoundError:
        return False
    except KubeError as exc:
        log.info("cannot tell whether the cluster is GKE Autopilot (%s): taken as not", exc)
        return False
    return True


def discover_pools(kube: Kube, base: ClusterProfile | None = None) -> ClusterProfile:
    """The live cluster's node pools (`profile.pools_from_nodes`), from the nodes as plain JSON,
    in pages; other settings come from `base`. (The official client's typed node models cost
    seconds for a thousand nodes.)"""
    try:
        nodes = kube.list(NODE, decode=slim.node_list)
    except KubeError as exc:
        raise LaunchError(f"cannot list nodes to discover node pools: {exc}") from exc
    return profile_from_nodes(nodes, base)


def profile_from_nodes(
    nodes: Iterable[Mapping[str, Any]], base: ClusterProfile | None = None
) -> ClusterProfile:
    """`base` with the pools of these nodes (the schedulable ones)."""

    records = [
        {
            "name": (n.get("metadata") or {}).get("name", ""),
            "labels": (n.get("metadata") or {}).get("labels") or {},
            "taints": (n.get("spec") or {}).get("taints") or [],
            "allocatable": (n.get("status") or {}).get("allocatable") or {},
        }
        for n in nodes
        if not (n.get("spec") or {}).get("unschedulable")
    ]
    return (base or ClusterProfile()).model_copy(update={"pools": pools_from_nodes(records)})


def _no_pools(profile: ClusterProfile | None) -> ClusterProfile | None:
    if profile is None:
        return None
    raise LaunchError("the cluster has no schedulable nodes and the profile lists no node pools")
