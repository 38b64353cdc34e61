"""The operator's pod cache: what a refresh reads instead of listing every pod each time."""

from __future__ import annotations

import copy
import json
from typing import Any

from surreal_kube.launch.kube.status.summary import slim_pod, summarize
from surreal_kube.operator.podcache import PodCache

NS, EXP = "rl", "exp-a"


def pod(name: str, rv: int, phase: str = "Running", group: str = "agents") -> dict[str, Any]:
    """A pod as the API server returns it, with the bulk a real one carries."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "surreal.ai/experiment": EXP,
                "app.kubernetes.io/component": group,
                "apps.kubernetes.io/pod-index": name.rsplit("-", 1)[-1],
            },
            "annotations": {"surreal.ai/progress": json.dumps({"iteration": 7})},
            "ownerReferences": [{"kind": "StatefulSet", "name": f"{EXP}-{group}", "uid": "x"}],
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:x": {}}}] * 5,
        },
        "spec": {
            "nodeName": "cpu-pool-3",
            "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-pool"},
            "containers": [
                {
                    "name": "agent",
                    "image": "registry.test/runtime:1",
                    "env": [{"name": f"SURREAL_{i}", "value": "x" * 40} for i in range(30)],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "True" if phase == "Running" else "False"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [
                {"name": "agent", "ready": phase == "Running", "restartCount": 2, "state": {}}
            ],
        },
    }


def test_a_slim_pod_summarizes_like_the_whole_pod_at_a_fraction_of_its_size() -> None:
    pods = [pod(f"{EXP}-agents-{i}", 10 + i, "Running" if i % 3 else "Pending") for i in range(9)]
    pods.append(pod(f"{EXP}-learner-0", 5, group="learner"))
    args = {"experiment": EXP, "desired": {"agents": 9, "learner": 1}, "agents_per_pod": 2}
    whole = summarize(pods=pods, **args)
    slim = summarize(pods=[slim_pod(p) for p in pods], **args)
    assert slim.to_wire() == whole.to_wire()
    assert slim.learner_iteration == 7
    assert len(json.dumps(slim_pod(pods[0]))) * 3 < len(json.dumps(pods[0]))


def test_events_update_and_remove_pods() -> None:
    cache = PodCache()
    cache.prime((NS, EXP), lambda: ([], "1"))
    cache.observe("ADDED", pod(f"{EXP}-agents-0", 2, "Pending"))
    cache.observe("MODIFIED", pod(f"{EXP}-agents-0", 3, "Running"))
    cache.observe(None, pod(f"{EXP}-agents-1", 4, "Running"))
    assert {p["metadata"]["name"]: p["status"]["phase"] for p in cache.pods((NS, EXP), _no)} == {
        f"{EXP}-agents-0": "Running",
        f"{EXP}-agents-1": "Running",
    }
    cache.observe("DELETED", pod(f"{EXP}-agents-0", 5))
    assert [p["metadata"]["name"] for p in cache.pods((NS, EXP), _no)] == [f"{EXP}-agents-1"]
    assert cache.observe("ADDED", {"metadata": {"name": "other", "namespace": NS}}) is None


def _no() -> tuple[list[dict[str, Any]], str]:
    raise AssertionError("a primed experiment must not be listed again")


def test_events_during_the_first_list_are_applied_when_newer_than_it() -> None:
    cache = PodCache()
    key = (NS, EXP)

    def lister() -> tuple[list[dict[str, Any]], str]:
        # while the list is on its way: one pod runs (after the list), one goes away (after),
        # and an old event of a third arrives late (before the list: must not win)
        cache.observe("MODIFIED", pod(f"{EXP}-agents-0", 21, "Running"))
        cache.observe("DELETED", pod(f"{EXP}-agents-1", 22))
        cache.observe("MODIFIED", pod(f"{EXP}-agents-2", 15, "Pending"))
        listed = [
            pod(f"{EXP}-agents-0", 11, "Pending"),
            pod(f"{EXP}-agents-1", 12, "Running"),
            pod(f"{EXP}-agents-2", 18, "Running"),
        ]
        return copy.deepcopy(listed), "20"

    phases = {p["metadata"]["name"]: p["status"]["phase"] for p in cache.pods(key, lister)}
    assert phases == {f"{EXP}-agents-0": "Running", f"{EXP}-agents-2": "Running"}


def test_forget_and_retain_bound_the_cache() -> None:
    cache = PodCache()
    for exp in ("a", "b", "c"):
        cache.prime((NS, exp), lambda: ([], "1"))
        p = pod(f"{exp}-agents-0", 2)
        p["metadata"]["labels"]["surreal.ai/experiment"] = exp
        cache.observe("ADDED", p)
    assert cache.size() == 3
    cache.forget((NS, "a"))
    cache.retain({(NS, "b")}, NS)
    assert cache.size() == 1
    listed: list[int] = []

    def lister() -> tuple[list[dict[str, Any]], str]:
        listed.append(1)
        return [], "9"

    assert cache.pods((NS, "c"), lister) == [] and listed == [1]  # forgotten: listed again
