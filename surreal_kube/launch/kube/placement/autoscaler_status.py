"""The cluster autoscaler's own word on its node groups: `kube-system/cluster-autoscaler-status`.

The cluster autoscaler (GKE's included, which publishes the same ConfigMap) writes there every
node group it manages with its minimum and maximum size. Pre-flight reads it so that a pool whose
nodes are discovered also gets its autoscaling bound without the user writing `maxCount`: an
experiment that fits only once the pool grows is created and says how many nodes it waits for,
rather than refused for the nodes there now.

Two layouts exist: YAML (cluster-autoscaler 1.30 and later: `nodeGroups: [{name, health:
{minSize, maxSize, cloudProviderTarget, nodeCounts}}]`) and the older text (`Name: ...` then
`Health: Healthy (ready=1 ... cloudProviderTarget=1 (minSize=0, maxSize=5))`). Both are parsed;
anything else yields no groups, never an error: this is a hint beside the nodes, not a source a
create may fail on.

A node group is named after the cloud's group, not the pool: on GKE the managed instance group
`.../instanceGroups/gke-<cluster>-<pool>-<hash>-grp`, one per zone of a regional pool; on AKS
the scale set `aks-<pool>-<id>-vmss`; on EKS the Auto Scaling group `eks-<pool>-<uuid>`. A group
belongs to the longest known pool name that appears in its last path segment between dashes;
a pool's bound is the sum of its groups' maxima (a regional GKE pool has one group per zone).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import yaml

from surreal_kube.launch.kube.api.client import CONFIG_MAP, Kube, KubeError

log = logging.getLogger(__name__)

NAMESPACE = "kube-system"
NAME = "cluster-autoscaler-status"
_TEXT_GROUP = re.compile(
    r"^\s*Name:\s*(?P<name>\S+)\s*\n\s*Health:[^\n]*?\(minSize=(?P<min>\d+),\s*maxSize=(?P<max>\d+)\)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class NodeGroup:
    """One node group of the autoscaler: its name and size bounds."""

    name: str
    min_size: int
    max_size: int


def parse_status(text: str) -> list[NodeGroup]:
    """The node groups in the ConfigMap's `status` text (either layout); [] when unreadable."""
    groups = _parse_yaml(text)
    if groups is not None:
        return groups
    return [NodeGroup(m["name"], int(m["min"]), int(m["max"])) for m in _TEXT_GROUP.finditer(text)]


def _parse_yaml(text: str) -> list[NodeGroup] | None:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("nodeGroups"), list):
        return None
    out = []
    for group in doc["nodeGroups"]:
        health = group.get("health") if isinstance(group, Mapping) else None
        if not isinstance(health, Mapping):
            continue
        try:
            out.append(
                NodeGroup(str(group["name"]), int(health["minSize"]), int(health["maxSize"]))
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


def pool_of(group: str, pools: Iterable[str]) -> str | None:
    """The pool a node group belongs to (see the module docstring), or None."""
    segment = group.rstrip("/").rsplit("/", 1)[-1]
    padded = f"-{segment}-"
    matches = [p for p in pools if p and (segment == p or f"-{p}-" in padded)]
    return max(matches, key=len) if matches else None


def pool_maxima(groups: Iterable[NodeGroup], pools: Iterable[str]) -> dict[str, int]:
    """pool -> the most nodes the autoscaler may run in it (its groups' maxima, summed)."""
    names = list(pools)
    out: dict[str, int] = {}
    for group in groups:
        pool = pool_of(group.name, names)
        if pool is None:
            log.debug("autoscaler node group %s matches no pool", group.name)
            continue
        out[pool] = out.get(pool, 0) + group.max_size
    return out


def read_groups(kube: Kube) -> list[NodeGroup]:
    """The autoscaler's node groups, or [] where it publishes none or we may not read them."""
    try:
        found = kube.get_or_none(CONFIG_MAP, NAME, NAMESPACE)
    except KubeError as exc:  # no right to read kube-system: the profile's maxCount alone
        log.debug("cannot read %s/%s: %s", NAMESPACE, NAME, exc)
        return []
    text = ((found or {}).get("data") or {}).get("status")
    return parse_status(text) if isinstance(text, str) else []
