"""Autoscaled pools against the test control plane: a profile that declares only a GPU pool
scaled to zero (no node to discover) gets the live pools too, and pre-flight places on it."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.api.client import CONFIG_MAP
from surreal_kube.launch.kube.placement import autoscaler_status
from surreal_kube.launch.kube.placement import pools as kube_pools
from surreal_kube.launch.kube.placement.place import place
from surreal_kube.launch.kube.profile import profile_from_dict
from tests.operator.support import connect

pytestmark = pytest.mark.cluster

AT_ZERO = {
    "pools": [
        {
            "name": "gpu-l4",
            "count": 0,
            "maxCount": 2,
            "cpu": "16",
            "memory": "64Gi",
            "gpus": 8,
            "accelerator": "nvidia-l4",
        }
    ]
}


def test_a_declared_pool_at_zero_joins_the_live_pools(
    kube_cluster: Any, kube_namespace: str
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    profile = kube_pools.effective_profile(kube, profile_from_dict(AT_ZERO), check_fit=True)
    assert profile is not None
    pools = {p.name: (p.count, p.capacity_count) for p in profile.pools}
    assert pools["gpu-l4"] == (0, 2)
    assert pools["cpu-pool"][0] > 0 and pools["gpu-pool"][0] > 0  # read from the nodes
    # 12 GPUs of learner + agents: more than the live gpu-pool has (2 x 4), within gpu-l4's 16
    exp = resolve_experiment(
        "exp-l4",
        sets=[
            "agents.count=11", "resources.agent.gpu=1", "resources.learner.gpu=1",
            "placement.agent=gpu-l4", "placement.learner=gpu-l4",
        ],
    )  # fmt: skip
    out = place(exp, exp.topology, profile)
    assert out["agents"].pool == "gpu-l4" and out["learner"].pool == "gpu-l4"
    assert out["replay"].pool == "cpu-pool"


def test_discovered_pools_take_their_bounds_from_the_autoscalers_status(
    kube_cluster: Any, kube_namespace: str
) -> None:
    """What GKE publishes in kube-system/cluster-autoscaler-status bounds the discovered pools:
    no profile at all, and an experiment that needs more nodes than there are fits."""
    kube = connect(kube_cluster, kube_namespace)
    live = {p.name: p.count for p in kube_pools.discover_pools(kube).pools}
    groups = [
        {
            "name": f"https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/"
            f"gke-test-{pool}-0a1b2c3d-grp",
            "health": {"minSize": 0, "maxSize": live[pool] + 3, "cloudProviderTarget": 1},
        }
        for pool in ("cpu-pool", "gpu-pool")
    ]
    status = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": autoscaler_status.NAME, "namespace": autoscaler_status.NAMESPACE},
        "data": {"status": yaml.safe_dump({"autoscalerStatus": "Running", "nodeGroups": groups})},
    }
    kube.create(status, autoscaler_status.NAMESPACE)
    try:
        profile = kube_pools.effective_profile(kube, None, check_fit=True)
        assert profile is not None
        bounds = {p.name: (p.count, p.max_count) for p in profile.pools}
        scaled = ("cpu-pool", "gpu-pool")
        assert {pool: bounds[pool] for pool in scaled} == {
            pool: (live[pool], live[pool] + 3) for pool in scaled
        }
        # a pool no node group names (the real node's, when it runs) keeps no bound
        assert all(bounds[pool] == (live[pool], None) for pool in live if pool not in scaled)
    finally:
        kube.delete(CONFIG_MAP, autoscaler_status.NAME, autoscaler_status.NAMESPACE)
