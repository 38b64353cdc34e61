"""The cluster autoscaler's status ConfigMap as pre-flight reads it (issue 24 item 2): the bounds
of discovered pools come from what the cluster says, both layouts of it, GKE's group names."""

from __future__ import annotations

from typing import Any

from surreal_kube.launch.kube.placement import autoscaler_status
from surreal_kube.launch.kube.placement.autoscaler_status import (
    NodeGroup,
    parse_status,
    pool_maxima,
    pool_of,
)
from surreal_kube.launch.kube.placement.pools import with_autoscaler_bounds
from surreal_kube.launch.kube.profile import profile_from_dict

MIG = "https://www.googleapis.com/compute/v1/projects/p/zones/{zone}/instanceGroups/{name}"
YAML_STATUS = f"""\
autoscalerStatus: Running
clusterWide:
  health:
    nodeCounts:
      registered: {{ready: 3, total: 3}}
    status: Healthy
nodeGroups:
- health:
    cloudProviderTarget: 2
    maxSize: 4
    minSize: 1
    nodeCounts:
      registered: {{ready: 2, total: 2}}
    status: Healthy
  name: {MIG.format(zone="us-central1-a", name="gke-prod-cpu-pool-1a2b3c4d-grp")}
- health:
    cloudProviderTarget: 1
    maxSize: 4
    minSize: 0
    status: Healthy
  name: {MIG.format(zone="us-central1-b", name="gke-prod-cpu-pool-5e6f7a8b-grp")}
- health:
    cloudProviderTarget: 0
    maxSize: 2
    minSize: 0
    status: Healthy
  name: {MIG.format(zone="us-central1-a", name="gke-prod-gpu-pool-9c0d1e2f-grp")}
- health: {{status: Unhealthy}}
  name: broken-group
time: 2026-12-04 10:00:00 +0000 UTC
"""
TEXT_STATUS = """\
Cluster-autoscaler status at 2021-10-19 19:06:40.008835646 +0000 UTC:
Cluster-wide:
  Health:      Healthy (ready=3 unready=0 notStarted=0 longNotStarted=0 registered=3)

NodeGroups:
  Name:        aks-user-25795745-vmss
  Health:      Healthy (ready=3 unready=0 notStarted=0 longNotStarted=0 registered=3 longUnregistered=0 cloudProviderTarget=3 (minSize=2, maxSize=6))
               LastProbeTime:      2021-10-19 19:06:40.008835646 +0000 UTC
  ScaleUp:     NoActivity (ready=3 cloudProviderTarget=3)
"""


def test_both_layouts_parse() -> None:
    groups = parse_status(YAML_STATUS)
    assert [(g.min_size, g.max_size) for g in groups] == [(1, 4), (0, 4), (0, 2)]
    assert groups[2].name.endswith("/gke-prod-gpu-pool-9c0d1e2f-grp")
    assert parse_status(TEXT_STATUS) == [NodeGroup("aks-user-25795745-vmss", 2, 6)]
    assert parse_status("") == [] and parse_status("::: not yaml [") == []


def test_groups_belong_to_the_longest_pool_name_between_dashes() -> None:
    pools = ["cpu-pool", "gpu-pool", "pool", "user", "gpu"]
    assert pool_of(MIG.format(zone="z", name="gke-prod-gpu-pool-9c0d1e2f-grp"), pools) == "gpu-pool"
    assert pool_of("aks-user-25795745-vmss", pools) == "user"
    assert pool_of("eks-gpu-4ec4-58ab-93a1-1b2f", pools) == "gpu"
    assert pool_of("gke-prod-other-1a2b3c4d-grp", ["cpu-pool"]) is None
    # a regional pool: one group per zone, the maxima add up
    maxima = pool_maxima(parse_status(YAML_STATUS), ["cpu-pool", "gpu-pool"])
    assert maxima == {"cpu-pool": 8, "gpu-pool": 2}


def test_discovered_pools_take_the_autoscalers_maxima_declared_ones_keep_theirs() -> None:
    live = profile_from_dict(
        {
            "pools": [
                {"name": "cpu-pool", "count": 3, "cpu": "8", "memory": "32Gi"},
                {"name": "gpu-pool", "count": 1, "maxCount": 5, "gpus": 4},
                {"name": "fixed", "count": 2},
            ]
        }
    )
    groups = [*parse_status(YAML_STATUS), NodeGroup("gke-prod-fixed-00000000-grp", 2, 2)]
    bounded = {p.name: (p.count, p.max_count) for p in with_autoscaler_bounds(live, groups).pools}
    # cpu-pool: 4 + 4 over two zones; gpu-pool: the profile's 5, not the cluster's 2; fixed: a
    # maximum no larger than its nodes bounds nothing
    assert bounded == {"cpu-pool": (3, 8), "gpu-pool": (1, 5), "fixed": (2, None)}


class _NoRights:
    def get_or_none(self, *_: Any) -> None:
        from surreal_kube.launch.kube.api.client import ForbiddenError

        raise ForbiddenError("configmaps is forbidden")


def test_no_right_to_read_it_is_no_groups() -> None:
    assert autoscaler_status.read_groups(_NoRights()) == []  # type: ignore[arg-type]
