"""The experiment as one Kueue `Workload`: admitted whole, or waiting whole.

An experiment is a gang: agents without a learner poll a parameter server that has nothing to
serve, and a GPU learner without its replay holds the GPU for nothing. Kueue admits a Workload
only when every one of its pod sets fits the ClusterQueue's quota at once, so the experiment is
submitted as a single Workload with one pod set per group (learner, replay, ..., agents: each
group's pod template and replica count, exactly as rendered), and the operator creates the
pods' Deployments and StatefulSets only once Kueue has admitted it (operator/apply.py).

Why the Workload API and not Kueue's pod-group integration or JobSet: pod groups need every pod
created (gated) before admission, 10,000 gated agent pods in etcd for an experiment that may wait
an hour, and they tie a Deployment's replacement pods to Kueue's group rules; JobSet would
replace our Deployments and StatefulSets (which give agents stable names and the learner its
restarts) by Jobs. A Workload is one object, owned by the `Experiment` (deleting the experiment
frees its quota), and changes nothing of what runs once it is admitted.

Placement stays ours (the pools' node selectors, launch/kube/placement): Kueue's flavors are
quota accounting here, their node labels are not merged into the pods.

Kueue allows at most 8 pod sets (its Workload API's limit): our groups are at most 8 (learner,
replay, ps, tensorplex, loggerplex, tensorboard, agents, evals) in the default layout; shards as
pods (`replay.layout` or `ps.layout: pods`) add a group each, and such an experiment is refused
with a queue, in one line that says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from surreal_kube.errors import SpecError
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import Resource

WORKLOAD = Resource("kueue.x-k8s.io/v1beta2", "Workload", "workloads", namespaced=True)
LOCAL_QUEUE = Resource("kueue.x-k8s.io/v1beta2", "LocalQueue", "localqueues", namespaced=True)
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue's own label naming the LocalQueue; on the Workload and on the pods it admits."""
DIGEST_ANNOTATION = "surreal.ai/pod-sets-digest"
"""On the Workload: a digest of the pod sets as we rendered them. Kueue's webhook defaults the
stored templates, so comparing them is no test of a change; the digest is."""
MAX_POD_SETS = 8
POD_KINDS = ("Deployment", "StatefulSet")
"""What holds an experiment's pods: created only once the Workload is admitted."""


def workload_object(
    experiment: str,
    queue: str,
    objects: Sequence[Mapping[str, Any]],
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The experiment's Workload in `queue`: a pod set per Deployment/StatefulSet of `objects`
    (the rendered plan), in their order, named by group. owner: the `Experiment` (with uid)."""
    pod_sets = []
    for obj in objects:
        if obj["kind"] not in POD_KINDS:
            continue
        template = obj["spec"]["template"]
        group = template["metadata"]["labels"][naming.GROUP_LABEL]
        pod_sets.append(
            {
                "name": group,
                "count": int(obj["spec"].get("replicas", 1)),
                "template": {"metadata": {"labels": {}}, "spec": template["spec"]},
            }
        )
    if not pod_sets:
        raise SpecError(f"experiment {experiment!r} renders no pods to admit")
    if len(pod_sets) > MAX_POD_SETS:
        raise SpecError(
            f"spec.queue: Kueue admits at most {MAX_POD_SETS} pod groups per workload, this "
            f"experiment has {len(pod_sets)} ({', '.join(p['name'] for p in pod_sets)}); "
            "replay.layout or ps.layout 'pods' adds one each: 'containers' keeps the shards in "
            "their service's pod"
        )
    meta: dict[str, Any] = {
        "name": experiment,
        "labels": {**naming.labels(experiment), QUEUE_NAME_LABEL: queue},
    }
    if owner is not None and owner.get("uid"):
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["name"],
                "uid": owner["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": WORKLOAD.api_version,
        "kind": WORKLOAD.kind,
        "metadata": meta,
        "spec": {"queueName": queue, "podSets": pod_sets},
    }


def pod_sets_digest(workload: Mapping[str, Any]) -> str:
    """A digest of the rendered pod sets (names, counts, templates)."""
    text = json.dumps(workload["spec"]["podSets"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digest_of(workload: Mapping[str, Any]) -> str | None:
    """The digest a stored Workload was made with (None: not ours, or older)."""
    return ((workload.get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)


def condition_of(workload: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    """One condition of a Workload's status, or None."""
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def is_admitted(workload: Mapping[str, Any] | None) -> bool:
    """Kueue's verdict: quota reserved and every admission check passed (`Admitted` True), and
    not being evicted (an evicted workload's pods must go, then it waits again)."""
    admitted = condition_of(workload, "Admitted")
    evicted = condition_of(workload, "Evicted")
    return bool(
        admitted
        and admitted.get("status") == "True"
        and not (evicted and evicted.get("status") == "True")
    )


def is_pending(workload: Mapping[str, Any]) -> bool:
    """Waiting in its queue: no quota reserved yet (one with quota reserved is being admitted,
    ahead of every pending one) and not finished."""
    reserved = condition_of(workload, "QuotaReserved")
    finished = condition_of(workload, "Finished")
    return not (
        (reserved and reserved.get("status") == "True")
        or (finished and finished.get("status") == "True")
    )


def _queue_order(workload: Mapping[str, Any]) -> tuple[int, str, str]:
    """Kueue's order within a queue (its queue ordering function, StrictFIFO and BestEffortFIFO
    alike): higher `spec.priority` first, then the older queue-order timestamp, which is the
    creation time unless an eviction requeued it (then the eviction's time)."""
    meta = workload.get("metadata") or {}
    stamp = str(meta.get("creationTimestamp") or "")
    evicted = condition_of(workload, "Evicted")
    if evicted and evicted.get("status") == "True" and evicted.get("lastTransitionTime"):
        stamp = str(evicted["lastTransitionTime"])
    priority = int((workload.get("spec") or {}).get("priority") or 0)
    return -priority, stamp, str(meta.get("name") or "")


def queue_position(
    workload: Mapping[str, Any], others: Sequence[Mapping[str, Any]]
) -> tuple[int, int] | None:
    """(position from 1, how many wait) of `workload` among the pending Workloads of its
    LocalQueue (`others`: the namespace's Workloads, itself included), in Kueue's order; None
    when it is not pending.

    Kueue's visibility API serves the same figure, but as an aggregated API that a cluster may
    not register and a namespace's user may not read; the Workloads of one's own namespace are
    what the operator may read anywhere. Position counts the LocalQueue only: its ClusterQueue
    may also hold other namespaces' workloads, interleaved by the same order.
    """
    if not is_pending(workload):
        return None
    queue = (workload.get("spec") or {}).get("queueName")
    waiting = sorted(
        (w for w in others if (w.get("spec") or {}).get("queueName") == queue and is_pending(w)),
        key=_queue_order,
    )
    names = [(w.get("metadata") or {}).get("name") for w in waiting]
    name = (workload.get("metadata") or {}).get("name")
    if name not in names:
        return None
    return names.index(name) + 1, len(names)


def waiting_reason(
    workload: Mapping[str, Any] | None, queue: str, position: tuple[int, int] | None = None
) -> str:
    """Why the workload waits, in one line: where it stands in the queue (`position`), then
    Kueue's own message (which pod set does not fit, which resource, how much more) or, before
    Kueue has looked at it, that it was submitted."""
    where = f"queued in {queue}"
    if position is not None:
        where += f" (position {position[0]} of {position[1]})"
    for type_ in ("Evicted", "QuotaReserved", "Admitted"):
        cond = condition_of(workload, type_)
        if cond and cond.get("message") and not (type_ == "Evicted" and cond["status"] != "True"):
            return f"{where}: {' '.join(str(cond['message']).split())}"
    return f"{where}: waiting for Kueue to consider it"
