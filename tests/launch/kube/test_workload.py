"""The experiment as one Kueue Workload (render/workload.py), without a cluster: a pod set per
group as rendered, the owner, the digest that tells a changed experiment, Kueue's verdict."""

from __future__ import annotations

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.render import workload
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.specs import IMAGES

OWNER = {
    "apiVersion": "surreal.ai/v1alpha1",
    "kind": "Experiment",
    "name": "exp-q",
    "uid": "0f1e2d3c-aaaa-bbbb-cccc-000000000009",
}


def rendered(*sets: str) -> list[dict]:
    exp = resolve_experiment("exp-q", sets=["queue=team-a", *sets])
    return render_experiment(exp, "rl", images=IMAGES)


def test_one_pod_set_per_group_with_its_replicas_and_pod_template() -> None:
    objects = rendered("agents.count=6", "agents.batch=2", "resources.learner.gpu=1")
    wl = workload.workload_object("exp-q", "team-a", objects, OWNER)
    assert wl["spec"]["queueName"] == "team-a"
    assert wl["metadata"]["labels"][workload.QUEUE_NAME_LABEL] == "team-a"
    (ref,) = wl["metadata"]["ownerReferences"]
    assert ref["uid"] == OWNER["uid"] and ref["controller"] is True
    sets = {p["name"]: p for p in wl["spec"]["podSets"]}
    workloads = {
        o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: o
        for o in objects
        if o["kind"] in workload.POD_KINDS
    }
    assert set(sets) == set(workloads)
    assert sets["agents"]["count"] == 3  # 6 agents, 2 per pod
    assert sets["learner"]["count"] == 1
    for group, obj in workloads.items():
        assert sets[group]["template"]["spec"] == obj["spec"]["template"]["spec"]
    learner = sets["learner"]["template"]["spec"]["containers"][0]["resources"]
    assert learner["limits"]["nvidia.com/gpu"] == 1  # what Kueue counts against the quota


def test_the_digest_changes_with_the_pod_sets_only() -> None:
    one = workload.workload_object("exp-q", "team-a", rendered("agents.count=2"), OWNER)
    same = workload.workload_object("exp-q", "team-a", rendered("agents.count=2"), OWNER)
    more = workload.workload_object("exp-q", "team-a", rendered("agents.count=4"), OWNER)
    assert workload.pod_sets_digest(one) == workload.pod_sets_digest(same)
    assert workload.pod_sets_digest(one) != workload.pod_sets_digest(more)


def test_more_pod_sets_than_kueue_takes_is_a_clear_error() -> None:
    objects = rendered()
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    many = objects + [deployment] * workload.MAX_POD_SETS
    with pytest.raises(SpecError, match=r"at most 8 pod groups per workload, this experiment has"):
        workload.workload_object("exp-q", "team-a", many, OWNER)


def test_shards_as_pods_with_a_queue_are_refused_with_the_way_out() -> None:
    objects = rendered("replay.layout=pods", "ps.layout=pods")
    with pytest.raises(
        SpecError,
        match=r"has 10 \(learner, replay, replay-shard, ps, ps-shard, .*"
        r"'containers' keeps the shards in their service's pod",
    ):
        workload.workload_object("exp-q", "team-a", objects, OWNER)


def test_kueues_verdict_and_its_reason() -> None:
    assert not workload.is_admitted(None)
    assert workload.waiting_reason(None, "team-a") == (
        "queued in team-a: waiting for Kueue to consider it"
    )
    waiting = {
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "message": "couldn't assign flavors to pod set learner:\n insufficient quota",
                }
            ]
        }
    }
    assert not workload.is_admitted(waiting)
    assert workload.waiting_reason(waiting, "team-a") == (
        "queued in team-a: couldn't assign flavors to pod set learner: insufficient quota"
    )
    admitted = {"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}
    assert workload.is_admitted(admitted)
    evicted = {
        "status": {
            "conditions": [
                {"type": "Admitted", "status": "True"},
                {"type": "Evicted", "status": "True", "message": "Preempted to accommodate"},
            ]
        }
    }
    assert not workload.is_admitted(evicted)
    assert workload.waiting_reason(evicted, "q") == "queued in q: Preempted to accommodate"


def test_a_queue_name_that_is_no_local_queue_is_refused() -> None:
    with pytest.raises(SpecError, match=r"spec.queue: must be a LocalQueue's name .* got 'Team_A'"):
        resolve_experiment("exp-q", sets=["queue=Team_A"])


def queued(name: str, created: str, queue: str = "team-a", **spec: object) -> dict:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"queueName": queue, **spec},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]},
    }


def test_the_position_in_the_queue_is_kueues_order() -> None:
    running = {
        "metadata": {"name": "exp-a", "creationTimestamp": "2026-12-05T10:00:00Z"},
        "spec": {"queueName": "team-a"},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
    }
    b = queued("exp-b", "2026-12-05T10:01:00Z")
    c = queued("exp-c", "2026-12-05T10:02:00Z")
    urgent = queued("exp-d", "2026-12-05T10:03:00Z", priority=100)  # later, but higher priority
    elsewhere = queued("exp-e", "2026-12-05T09:00:00Z", queue="team-b")
    # an eviction requeues at the time of the eviction: behind those created before it
    evicted = queued("exp-f", "2026-12-05T09:30:00Z")
    evicted["status"]["conditions"].append(
        {"type": "Evicted", "status": "True", "lastTransitionTime": "2026-12-05T10:01:30Z"}
    )
    found = [running, b, c, urgent, elsewhere, evicted]
    positions = {w["metadata"]["name"]: workload.queue_position(w, found) for w in found}
    assert positions == {
        "exp-a": None,  # quota reserved: being admitted, ahead of every waiting one
        "exp-d": (1, 4),
        "exp-b": (2, 4),
        "exp-f": (3, 4),
        "exp-c": (4, 4),
        "exp-e": (1, 1),
    }
    assert workload.waiting_reason(c, "team-a", positions["exp-c"]) == (
        "queued in team-a (position 4 of 4): waiting for Kueue to consider it"
    )
