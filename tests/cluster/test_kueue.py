"""Kueue on the test cluster (tests/cluster/addons.py), webhooks and all: a plain Job with the
queue-name label is suspended at create by Kueue's webhook; a LocalQueue admits a GPU Job within
the ClusterQueue's quota and keeps a second one, of which one pod would fit but not both, queued
whole (no pod of it created) until the first is deleted; then both its pods run on the flavor's
pool."""

from __future__ import annotations

import json
import urllib.error
from typing import Any

import pytest

from tests.cluster import addons, controlplane
from tests.cluster.fixtures import KueueCluster
from tests.cluster.test_controlplane import wait_for

pytestmark = pytest.mark.cluster

KEEP_RUNNING = "surreal-kube.dev/kwok-keep-running"  # kwok/stages.yaml: the pod never completes


def gpu_job(name: str, queue: str, gpus: int, pods: int = 1) -> dict[str, Any]:
    """A plain Job of `pods` pods of `gpus` GPUs each, submitted to `queue` by its label alone:
    Kueue's webhook suspends it."""
    resources = {"cpu": "1", "memory": "1Gi", controlplane.GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {addons.QUEUE_NAME_LABEL: queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {"labels": {KEEP_RUNNING: "true", "job": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {"requests": resources, "limits": resources},
                        }
                    ],
                },
            },
        },
    }


def workload_of(cp: controlplane.ControlPlane, ns: str, job: str) -> dict[str, Any] | None:
    items = cp.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads")["items"]
    for wl in items:
        if any(o["name"] == job for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return c
    return None


def running_pods(cp: controlplane.ControlPlane, ns: str, job: str) -> list[dict[str, Any]]:
    pods = cp.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=job%3D{job}")["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


def test_a_local_queue_admits_within_quota_and_queues_a_job_whole_until_space_frees(
    kueue_cluster: KueueCluster,
) -> None:
    cp = kueue_cluster.control_plane
    ns = kueue_cluster.create_namespace("t-kueue")
    try:
        queue = kueue_cluster.kueue.create_local_queue(ns)
        jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
        created = cp.request("POST", jobs, gpu_job("first", queue, gpus=2))  # half the quota
        assert created["spec"]["suspend"] is True  # by Kueue's mutating webhook
        first = wait_for(
            "the first Job admitted and its pod Running",
            lambda: running_pods(cp, ns, "first"),
            timeout=90,
        )
        node = cp.request("GET", f"/api/v1/nodes/{first[0]['spec']['nodeName']}")
        assert node["metadata"]["labels"][controlplane.NODEPOOL_LABEL] == "gpu-pool"
        assert cp.request("GET", f"{jobs}/first")["spec"]["suspend"] is False

        # 2 pods x 2 GPUs: one pod would fit in the 2 GPUs left, the whole Job does not
        created = cp.request("POST", jobs, gpu_job("second", queue, gpus=2, pods=2))
        assert created["spec"]["suspend"] is True
        pending = wait_for(
            "the second Job's Workload refused quota",
            lambda: (
                c
                if (c := condition(workload_of(cp, ns, "second"), "QuotaReserved"))
                and c["status"] == "False"
                else None
            ),
        )
        assert pending is not None and "insufficient quota" in pending["message"], pending
        assert cp.request("GET", f"{jobs}/second")["spec"]["suspend"] is True
        pods = f"/api/v1/namespaces/{ns}/pods?labelSelector=job%3Dsecond"
        assert cp.request("GET", pods)["items"] == []  # queued whole: no pod of it exists
        lq_path = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues/{queue}"
        wait_for(
            "the LocalQueue to count one admitted and one pending Workload",
            lambda: (
                (st := cp.request("GET", lq_path).get("status") or {}).get("pendingWorkloads") == 1
                and st.get("admittedWorkloads") == 1
            ),
        )

        cp.request("DELETE", f"{jobs}/first?propagationPolicy=Background")
        second = wait_for(
            "both pods of the second Job Running once the first is deleted",
            lambda: p if len(p := running_pods(cp, ns, "second")) == 2 else None,
            timeout=90,
        )
        assert second is not None
        for pod in second:
            node = cp.request("GET", f"/api/v1/nodes/{pod['spec']['nodeName']}")
            assert node["metadata"]["labels"][controlplane.NODEPOOL_LABEL] == "gpu-pool"
        admitted = condition(workload_of(cp, ns, "second"), "Admitted")
        assert admitted is not None and admitted["status"] == "True"
    finally:
        kueue_cluster.delete_namespace(ns)


def test_kueue_serves_its_webhooks_to_the_api_server(kueue_cluster: KueueCluster) -> None:
    """The API server reaches Kueue's webhooks with the CA its rotator injected: a v1beta1 read
    of the ClusterQueue goes through the CRD's conversion webhook (v1beta2 is stored), and an
    invalid ClusterQueue (a negative quota, which the CRD's schema admits) is refused by the
    validating webhook."""
    cp = kueue_cluster.control_plane
    name = kueue_cluster.kueue.cluster_queue
    old = cp.request("GET", f"/apis/kueue.x-k8s.io/v1beta1/clusterqueues/{name}")
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert old["metadata"]["name"] == name

    bad = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "t-kueue-bad"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "cpu-pool", "resources": [{"name": "cpu", "nominalQuota": "-1"}]}
                    ],
                }
            ]
        },
    }
    with pytest.raises(urllib.error.HTTPError) as refused:
        cp.request("POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", bad)
    status = json.loads(refused.value.read())
    assert refused.value.code == 403, status  # a webhook's denial is Forbidden
    assert 'admission webhook "vclusterqueue.kb.io" denied' in status["message"], status
