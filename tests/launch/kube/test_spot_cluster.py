"""Spot nodes on the test control plane (issue 27 item 3): pools discovered from the nodes'
labels put the agents on Spot nodes and keep the learner, replay and ps off them; a Spot node
reclaimed mid-run (its pods deleted with GKE's 15 s grace, then the node) costs only its agents,
which come back on the Spot capacity left while the learner's pod stays as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import NODE, resource
from tests.cluster import controlplane
from tests.operator.support import (
    IMAGE_ARGS,
    TINY,
    connect,
    pod_uid,
    profile_file,
    running_pods,
    sk,
    wait_for,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

POD = resource("v1", "Pod")
POOL = "spot-pool"
SPOT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}
"""GKE's recommended Spot taint: it also keeps the other tests' pods off these nodes."""
NAME = "exp-spot"


def spot_nodes() -> list[dict[str, Any]]:
    pool = controlplane.NodePool.from_dict(
        {"name": POOL, "count": 2, "cpu": "4", "memory": "16Gi", "taints": [SPOT],
         "labels": {"cloud.google.com/gke-spot": "true"}}
    )  # fmt: skip
    return pool.node_manifests()


def pods_of(kube: Any, group: str) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.list(POD, labels=naming.selector_labels(NAME, group))
        if not p["metadata"].get("deletionTimestamp")
    ]


def test_agents_on_spot_state_on_demand_a_reclaimed_node_costs_only_agents(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    nodes = spot_nodes()
    try:
        for node in nodes:
            kube.create(node)
        res = sk(
            kube_cluster,
            "create", NAME, "-n", kube_namespace, "--direct",
            "--profile", str(profile_file(tmp_path)), *IMAGE_ARGS, *TINY,
            "--num-agents", "4", "--num-evals", "1",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        agents = pods_of(kube, "agents")
        assert len(agents) == 4
        assert all(p["spec"]["nodeName"].startswith(POOL) for p in agents), agents
        for group in ("learner", "replay", "ps", "tensorplex", "loggerplex", "tensorboard"):
            (pod,) = pods_of(kube, group)
            assert not pod["spec"]["nodeName"].startswith(POOL), (group, pod["spec"]["nodeName"])
            terms = pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert {"key": "cloud.google.com/gke-spot", "operator": "NotIn",
                    "values": ["true"]} in terms[0]["matchExpressions"]  # fmt: skip
        learner = pod_uid(kube, "learner", NAME)

        # GKE reclaims a Spot node: its pods are deleted with at most 15 s of grace, then the
        # node goes
        reclaimed = next(p["spec"]["nodeName"] for p in agents)
        lost = [p["metadata"]["name"] for p in agents if p["spec"]["nodeName"] == reclaimed]
        for name in lost:
            kube.raw(
                "DELETE",
                POD.path(kube_namespace, name),
                body={"gracePeriodSeconds": 15},
                what=f"delete pod {name}",
            )
        kube.delete(NODE, reclaimed)
        left = next(n["metadata"]["name"] for n in nodes if n["metadata"]["name"] != reclaimed)

        def back() -> bool:
            pods = pods_of(kube, "agents")
            return len(running_pods(kube, NAME, "agents")) == 4 and all(
                p["spec"].get("nodeName") == left or p["metadata"]["name"] not in lost for p in pods
            )

        wait_for("the reclaimed agents back on the Spot node left", back, timeout=180)
        assert pod_uid(kube, "learner", NAME) == learner  # the run's state never moved
        status = sk(kube_cluster, "status", NAME, "-n", kube_namespace, "-o", "json")
        assert status.returncode == 0, status.stderr
        summary = json.loads(status.stdout)
        assert summary["phase"] == "Running" and summary["agents"] == "4/4", summary
    finally:
        for node in nodes:
            kube.delete(NODE, node["metadata"]["name"])
