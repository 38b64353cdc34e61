"""Status from pods, without a cluster: readiness, restarts, replacements, plain-words reasons.

The pods here are plain dicts shaped like the API server's (what `kubectl get pod -o json`
prints); the cluster tests check the same functions against real scheduler decisions.
"""

from __future__ import annotations

from typing import Any

import pytest

from surreal_kube.launch.kube.api.client import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
    ServerError,
    error_from_response,
    resource,
)
from surreal_kube.launch.kube.status.summary import (
    count_replacement,
    free_capacity,
    pending_reason,
    pod_requests,
    process_key,
    summarize,
)

EXP = "exp-a"


def pod(
    name: str,
    group: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    node: str | None = "cpu-pool-0",
    gpus: int = 0,
    cpu: str = "1",
    restarts: int = 0,
    ordinal: int | None = None,
    replicaset: str | None = None,
    uid: str | None = None,
    selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    conditions: list[dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
    terminated: dict[str, Any] | None = None,
) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/component": group,
        "app.kubernetes.io/instance": EXP,
        "surreal.ai/experiment": EXP,
    }
    if ordinal is not None:
        labels["apps.kubernetes.io/pod-index"] = str(ordinal)
    limits = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    conds = conditions or [{"type": "Ready", "status": "True" if ready else "False"}]
    state = {"terminated": terminated} if terminated else {"running": {}}
    return {
        "metadata": {
            "name": name,
            "uid": uid or f"uid-{name}",
            "labels": labels,
            "annotations": annotations or {},
            "ownerReferences": [{"kind": "ReplicaSet", "name": replicaset}] if replicaset else [],
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "nodeName": node,
            "nodeSelector": selector or {},
            "tolerations": tolerations or [],
            "containers": [
                {
                    "name": group,
                    "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": limits},
                }
            ],
        },
        "status": {
            "phase": phase,
            "conditions": conds,
            "containerStatuses": [{"name": group, "restartCount": restarts, "state": state}],
        },
    }


def node(name: str, pool: str, *, cpu: str = "8", gpus: int = 0) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    taints = []
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
        taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return {
        "metadata": {"name": name, "labels": {"cloud.google.com/gke-nodepool": pool}},
        "spec": {"taints": taints},
        "status": {"allocatable": alloc},
    }


NODES = [
    node("cpu-pool-0", "cpu-pool"),
    node("gpu-pool-0", "gpu-pool", cpu="16", gpus=4),
    node("gpu-pool-1", "gpu-pool", cpu="16", gpus=4),
]
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
    "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims.",
}


def gpu_learner(gpus: int) -> dict[str, Any]:
    return pod(
        "exp-a-learner-abc-1",
        "learner",
        phase="Pending",
        ready=False,
        node=None,
        gpus=gpus,
        replicaset="exp-a-learner-abc",
        selector={"cloud.google.com/gke-nodepool": "gpu-pool"},
        tolerations=GPU_TOLERATION,
        conditions=[UNSCHEDULABLE],
    )


def test_requests_sum_containers_and_read_limits_for_gpus() -> None:
    wants = pod_requests(pod("p", "learner", gpus=2, cpu="500m"))
    assert wants["cpu"] == 0.5 and wants["nvidia.com/gpu"] == 2 and wants["memory"] == 2**30


def test_pending_gpu_pod_bigger_than_any_node_says_the_largest_slot() -> None:
    free = free_capacity(NODES, [])
    assert pending_reason(gpu_learner(8), NODES, free) == (
        "needs 8 nvidia.com/gpu, the largest free slot on gpu-pool has 4"
    )


def test_pending_gpu_pod_counts_what_other_pods_use() -> None:
    busy = [
        pod("other-1", "x", node="gpu-pool-0", gpus=3),
        pod("other-2", "x", node="gpu-pool-1", gpus=3),
        pod("done", "x", node="gpu-pool-1", gpus=4, phase="Succeeded"),  # finished: frees its GPUs
    ]
    assert pending_reason(gpu_learner(2), NODES, free_capacity(NODES, busy)) == (
        "needs 2 nvidia.com/gpu, the largest free slot on gpu-pool has 1"
    )


def test_a_real_kubelets_zero_quantities_are_counted_not_refused() -> None:
    # a real node reports hugepages of 0 and kube-proxy's pod may request cpu "0": before, status
    # failed with "unexpected ValueError: memory must be > 0, got '0'" once the real node joined
    real = node("real-0", "real-pool", cpu="2")
    real["status"]["allocatable"].update({"hugepages-1Gi": "0", "hugepages-2Mi": "0"})
    idle = pod("kube-proxy-x", "x", node="real-0", cpu="0")
    free = free_capacity([*NODES, real], [idle])
    assert free["real-0"]["hugepages-2Mi"] == 0 and free["real-0"]["cpu"] == 2
    assert pending_reason(gpu_learner(8), [*NODES, real], free) == (
        "needs 8 nvidia.com/gpu, the largest free slot on gpu-pool has 4"
    )


def test_pending_without_usage_uses_capacity_and_without_nodes_the_scheduler() -> None:
    assert pending_reason(gpu_learner(8), NODES, None) == (
        "needs 8 nvidia.com/gpu, the largest node on gpu-pool has 4"
    )
    assert pending_reason(gpu_learner(2), NODES, None) == (
        "needs 2 nvidia.com/gpu, and no gpu-pool node has that much free now"
    )
    assert pending_reason(gpu_learner(2)) == (
        "needs 2 nvidia.com/gpu, more than any node has free (0/3 nodes are available: 1 node(s) "
        "didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu)"
    )


def test_pending_with_no_matching_pool() -> None:
    lost = gpu_learner(1)
    lost["spec"]["nodeSelector"] = {"cloud.google.com/gke-nodepool": "tpu-pool"}
    assert pending_reason(lost, NODES, free_capacity(NODES, [])) == (
        "no node matches cloud.google.com/gke-nodepool=tpu-pool"
    )


def test_other_reasons_in_words() -> None:
    failed = pod(
        "f",
        "agents",
        phase="Failed",
        ready=False,
        terminated={"exitCode": 1, "reason": "containerFailed"},
    )
    assert pending_reason(failed) == "failed: container agents exited with code 1 (containerFailed)"
    pulling = pod("i", "agents", phase="Pending", ready=False)
    pulling["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "ImagePullBackOff", "message": "not found"}
    }
    assert pending_reason(pulling) == "image None cannot be pulled (ImagePullBackOff): not found"
    assert pending_reason(pod("u", "agents", phase="Pending", ready=False, node=None)) == (
        "waiting for the scheduler"
    )
    assert pending_reason(pod("ok", "agents")) is None


def test_process_keys_survive_replacement() -> None:
    assert process_key(pod("exp-a-agents-3", "agents", ordinal=3)) == "exp-a-agents-3"
    learner = pod("exp-a-learner-7d9f-x1", "learner", replicaset="exp-a-learner-7d9f")
    assert process_key(learner) == "exp-a-learner"


def test_a_failure_is_counted_once_per_pod_uid() -> None:
    failed = pod("exp-a-agents-0", "agents", ordinal=0, phase="Failed", ready=False, uid="u1")
    record = count_replacement({}, failed)
    assert record == {"count": 1, "uids": ["u1"]}
    assert count_replacement({"exp-a-agents-0": record}, failed) is None  # replayed event
    again = pod("exp-a-agents-0", "agents", ordinal=0, phase="Failed", ready=False, uid="u2")
    assert count_replacement({"exp-a-agents-0": record}, again) == {
        "count": 2,
        "uids": ["u1", "u2"],
    }
    assert count_replacement({}, pod("exp-a-agents-0", "agents", ordinal=0)) is None  # running


DESIRED = {"learner": 1, "replay": 1, "agents": 2}


def running_set() -> list[dict[str, Any]]:
    return [
        pod("exp-a-learner-abc-1", "learner", replicaset="exp-a-learner-abc"),
        pod("exp-a-replay-def-1", "replay", replicaset="exp-a-replay-def"),
        pod("exp-a-agents-0", "agents", ordinal=0),
        pod("exp-a-agents-1", "agents", ordinal=1, restarts=2),
    ]


def test_summary_of_a_running_experiment() -> None:
    st = summarize(experiment=EXP, desired=DESIRED, pods=running_set(), agents_per_pod=4, gpus=1)
    assert (st.phase, st.ready, st.agents, st.agents_ready) == ("Running", "4/4", "8/8", 8)
    assert st.components["agents"].restarts == 2 and st.restarts == 2
    assert st.processes["exp-a-agents-1"].restarts == 2
    assert st.learner_iteration is None and st.eval_return is None


def test_summary_pending_names_the_first_reason() -> None:
    pods = running_set()
    pods[0] = gpu_learner(8)
    st = summarize(experiment=EXP, desired=DESIRED, pods=pods, nodes=NODES, all_pods=pods)
    assert st.phase == "Pending" and st.ready == "3/4"
    assert st.reason == (
        "3/4 pods ready; exp-a-learner-abc-1: needs 8 nvidia.com/gpu, the largest free slot on "
        "gpu-pool has 4"
    )
    assert st.components["learner"].pending == {
        "exp-a-learner-abc-1": st.processes["exp-a-learner-abc-1"].reason
    }


def test_failed_pods_count_as_restarts_and_old_ones_hide_behind_their_replacement() -> None:
    pods = running_set()
    pods.append(
        pod(
            "exp-a-learner-abc-0",
            "learner",
            phase="Failed",
            ready=False,
            replicaset="exp-a-learner-abc",
            terminated={"exitCode": 1},
        )
    )
    st = summarize(experiment=EXP, desired=DESIRED, pods=pods)
    assert st.phase == "Running" and st.learner_restarts == 1
    assert "exp-a-learner-abc-0" not in st.processes
    # the operator's records win over what is visible (a StatefulSet deletes failed pods)
    records = {
        "exp-a-agents-0": {"count": 3, "uids": ["a", "b", "c"]},
        "exp-a-learner": {"count": 1, "uids": ["uid-exp-a-learner-abc-0"]},
    }
    st = summarize(experiment=EXP, desired=DESIRED, pods=pods, replacements=records)
    assert st.processes["exp-a-agents-0"].restarts == 3
    assert st.components["agents"].restarts == 5 and st.learner_restarts == 1
    assert st.to_wire()["replacements"]["exp-a-agents-0"]["count"] == 3


def test_reported_progress_appears_only_when_reported() -> None:
    # the keys the roles write (runtime/status.py): `iteration`, `last_return`; status.py read
    # `iterations` / `last_eval_return` and showed nothing
    pods = running_set()
    pods[0]["metadata"]["annotations"]["surreal.ai/progress"] = (
        '{"iteration": 42, "state": "running", "last_return": 12.5}'
    )
    st = summarize(experiment=EXP, desired=DESIRED, pods=pods)
    assert (st.learner_iteration, st.eval_return, st.phase) == (42, 12.5, "Running")
    pods[0]["metadata"]["annotations"]["surreal.ai/progress"] = (
        '{"iteration": 50, "state": "finished"}'
    )
    assert summarize(experiment=EXP, desired=DESIRED, pods=pods).phase == "Succeeded"
    pods[0]["metadata"]["annotations"]["surreal.ai/progress"] = "not json"
    assert summarize(experiment=EXP, desired=DESIRED, pods=pods).learner_iteration is None


def test_many_pending_pods_are_said_once() -> None:
    pods = [
        pod(f"exp-a-agents-{i}", "agents", ordinal=i, phase="Pending", ready=False, node=None)
        for i in range(30)
    ]
    st = summarize(experiment=EXP, desired={"agents": 30}, pods=pods)
    assert len(st.components["agents"].pending) == 11
    assert st.components["agents"].pending["..."] == "and 20 more"


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, NotFoundError),
        (409, ConflictError),
        (403, ForbiddenError),
        (422, InvalidError),
        (500, ServerError),
    ],
)
def test_server_answers_become_our_errors(status: int, cls: type) -> None:
    body = '{"kind":"Status","reason":"X","message":"exceeded quota: q, requested: count/deployments.apps=1"}'
    err = error_from_response(status, body.encode(), "apply Deployment/d")
    assert type(err) is cls and err.status == status
    assert str(err) == "apply Deployment/d: exceeded quota: q, requested: count/deployments.apps=1"


def test_resource_paths() -> None:
    assert resource("apps/v1", "StatefulSet").path("ns", "s") == (
        "/apis/apps/v1/namespaces/ns/statefulsets/s"
    )
    assert resource("v1", "Node").path("ignored") == "/api/v1/nodes"
    assert resource("surreal.ai/v1alpha1", "Experiment").path("ns", "e", "scale") == (
        "/apis/surreal.ai/v1alpha1/namespaces/ns/experiments/e/scale"
    )


def test_exec_exit_status_from_the_status_channel() -> None:
    from surreal_kube.launch.kube.lifecycle.pods import exit_status

    assert exit_status("") == (0, None)
    assert exit_status('{"metadata":{},"status":"Success"}') == (0, None)
    kubelet = (
        '{"status":"Failure","reason":"NonZeroExitCode","message":"command terminated with '
        'non-zero exit code: error executing command [false], exit code 2","details":{"causes":'
        '[{"reason":"ExitCode","message":"2"}]}}'
    )
    assert exit_status(kubelet) == (2, None)
    kwok = '{"status":"Failure","message":"error executing command in container: cmd wait: sh: exit status 3"}'
    assert exit_status(kwok) == (3, None)
    missing = '{"status":"Failure","message":"no exec found for container \\"agents\\""}'
    assert exit_status(missing) == (1, 'no exec found for container "agents"')
