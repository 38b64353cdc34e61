"""The test cluster's node autoscaler (Karpenter's kwok provider, tests/cluster/addons.py): a GPU
pool at zero grows for a pending GPU pod and shrinks back to zero once the pod is gone."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster import addons, controlplane
from tests.cluster.fixtures import AutoscaledCluster
from tests.cluster.test_controlplane import wait_for

pytestmark = pytest.mark.cluster


def gpu_pod(name: str) -> dict[str, Any]:
    """A pod as a GKE user writes one for a GPU: the pool's selector, GKE's GPU toleration."""
    resources = {"cpu": "1", "memory": "1Gi", controlplane.GPU_RESOURCE: "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
            "nodeSelector": {controlplane.NODEPOOL_LABEL: "gpu-pool"},
            "tolerations": [{**controlplane.GPU_TAINT, "operator": "Equal"}],
        },
    }


def test_a_gpu_pool_grows_from_zero_for_a_pending_pod_and_shrinks_back(
    autoscaled_cluster: AutoscaledCluster,
) -> None:
    cp = autoscaled_cluster.control_plane
    autoscaler = autoscaled_cluster.autoscaler
    assert autoscaler.pool_nodes("gpu-pool") == [] and autoscaler.pool_nodes("cpu-pool") == []
    ns = autoscaled_cluster.create_namespace("t-autoscale")
    try:
        cp.request("POST", f"/api/v1/namespaces/{ns}/pods", gpu_pod("learner"))
        pod = wait_for(
            "the GPU pod Running on a node the autoscaler added",
            lambda: (
                p
                if (p := cp.request("GET", f"/api/v1/namespaces/{ns}/pods/learner"))["status"].get(
                    "phase"
                )
                == "Running"
                else None
            ),
            timeout=120,
        )
        nodes = autoscaler.pool_nodes("gpu-pool")
        assert nodes == [pod["spec"]["nodeName"]]
        node = cp.request("GET", f"/api/v1/nodes/{nodes[0]}")
        labels = node["metadata"]["labels"]
        assert labels[controlplane.NODEPOOL_LABEL] == "gpu-pool"
        assert labels[controlplane.ACCELERATOR_LABEL] == "nvidia-tesla-t4"
        assert labels["node.kubernetes.io/instance-type"] == "n1-standard-16"
        assert labels["topology.kubernetes.io/zone"] == addons.ZONE
        # the machine's GPUs are allocatable (kwok's provider writes only the pods' requests
        # into the node's capacity)
        assert node["status"]["allocatable"][controlplane.GPU_RESOURCE] == "4"
        taints = [(t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints", [])]
        assert ("nvidia.com/gpu", "present", "NoSchedule") in taints
        assert autoscaler.pool_nodes("cpu-pool") == []  # nothing asked for a CPU node

        cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/learner?gracePeriodSeconds=0")
        wait_for(
            "the GPU pool back at zero nodes",
            lambda: autoscaler.pool_nodes("gpu-pool") == [],
            timeout=180,
        )
    finally:
        autoscaled_cluster.delete_namespace(ns)
