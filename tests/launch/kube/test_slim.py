"""Pods and nodes decoded to the part we read (launch/kube/api/slim.py) are the same dicts that a
full `json.loads` followed by `slim_pod` / `slim_node` gives, for lists, watch events, bookmarks
and errors. (How much faster: `bench/scale.py`'s status rows; 15x on 1,022 real pods.)
"""

from __future__ import annotations

import json
from typing import Any

from surreal_kube.launch.kube.api import slim
from surreal_kube.launch.kube.render.objects import render_experiment
from surreal_kube.launch.kube.status.summary import slim_pod
from surreal_kube.operator.nodecache import slim_node
from tests.launch.kube.specs import IMAGES, experiment


def live_pod(name: str, index: int) -> dict[str, Any]:
    """A pod as the API server sends it: our agents' pod template, with what the server adds
    (uid, managed fields, node, a status with conditions and container states)."""
    objs = render_experiment(experiment("eight-agents-batch4-gpu"), "rl", images=IMAGES)
    sts = next(o for o in objs if o["kind"] == "StatefulSet" and "agents" in o["metadata"]["name"])
    template = sts["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "name": f"{name}-{index}",
            "namespace": "rl",
            "uid": f"uid-{index}",
            "resourceVersion": str(1000 + index),
            "creationTimestamp": "2026-12-02T03:02:56Z",
            "annotations": {"surreal.ai/progress": "{}", "other": "x" * 200},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": "u",
                 "controller": True, "blockOwnerDeletion": True}
            ],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update",
                 "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:containers": {}}}}
            ],
        },
        "spec": {**template["spec"], "nodeName": f"node-{index}"},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-02T03:02:57Z"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None},
            ],
            "containerStatuses": [
                {"name": "agents", "image": "a:b", "imageID": "", "ready": True,
                 "restartCount": 2, "started": True,
                 "state": {"running": {"startedAt": "2026-12-02T03:02:57Z"}},
                 "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
            "hostIP": "10.0.0.1",
            "podIPs": [{"ip": "10.1.0.1"}],
            "qosClass": "Guaranteed",
        },
    }  # fmt: skip
    return pod


def node(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"cpu-pool-{index}",
            "resourceVersion": "7",
            "labels": {"cloud.google.com/gke-nodepool": "cpu-pool", "type": "kwok"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.37.2"},
        },
    }


def test_a_pod_list_decodes_to_the_same_slim_pods() -> None:
    pods = [live_pod("exp-agents", i) for i in range(50)]
    data = json.dumps(
        {"kind": "PodList", "metadata": {"resourceVersion": "99", "continue": "c"}, "items": pods}
    ).encode()
    page = slim.pod_list(data)
    assert page["metadata"] == {"resourceVersion": "99", "continue": "c"}
    assert [slim_pod(p) for p in page["items"]] == [slim_pod(p) for p in json.loads(data)["items"]]
    first = page["items"][0]
    assert "managedFields" not in first["metadata"] and "env" not in first["spec"]["containers"][0]
    assert first["metadata"]["resourceVersion"] == "1000"  # a watch resumes from it


def test_a_node_list_decodes_to_the_same_slim_nodes() -> None:
    data = json.dumps({"metadata": {}, "items": [node(i) for i in range(20)]}).encode()
    assert [slim_node(n) for n in slim.node_list(data)["items"]] == [
        slim_node(n) for n in json.loads(data)["items"]
    ]
    event = json.dumps({"type": "MODIFIED", "object": node(1)}).encode()
    assert slim_node(slim.node_event(event)["object"]) == slim_node(node(1))


def test_watch_events_bookmarks_and_errors() -> None:
    pod = live_pod("exp-evals", 3)
    added = slim.pod_event(json.dumps({"type": "ADDED", "object": pod}).encode())
    assert added["type"] == "ADDED" and slim_pod(added["object"]) == slim_pod(pod)
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                "metadata": {"resourceVersion": "12"}, "spec": {"containers": None},
                "status": {}}}  # fmt: skip
    seen = slim.pod_event(json.dumps(bookmark).encode())
    assert seen["type"] == "BOOKMARK" and seen["object"]["metadata"]["resourceVersion"] == "12"
    gone = {"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": 410,
            "reason": "Expired", "message": "too old resource version: 1 (42)"}}  # fmt: skip
    assert slim.pod_event(json.dumps(gone).encode()) == gone  # whole: its `status` is a string
