"""Disruption budgets on the test control plane (issue 27 item 2): the kube-controller-manager's
disruption controller and the Eviction API, as a drain or an upgrade uses them. The learner's
pod (the run's state) cannot be evicted; an agent's can."""

from __future__ import annotations

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import Kube, KubeError, resource
from surreal_kube.launch.kube.lifecycle.apply import create_objects
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.operator.support import IMAGES, TINY, wait_for

pytestmark = pytest.mark.cluster

POD = resource("v1", "Pod")
PDB = resource("policy/v1", "PodDisruptionBudget")
TINY_SETS = [TINY[i + 1] for i in range(0, len(TINY), 2)]


def evict(kube: Kube, pod: str) -> str:
    """Ask the Eviction API to evict `pod`, as `kubectl drain` does: "evicted" or its refusal."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": kube.namespace},
    }
    try:
        kube.raw("POST", POD.path(kube.namespace, pod, "eviction"), body=body, what="evict")
    except KubeError as exc:
        return str(exc)
    return "evicted"


def test_a_drain_cannot_evict_the_learner_but_may_take_an_agent(
    kube: Kube, kube_namespace: str
) -> None:
    exp = resolve_experiment("exp-pdb", sets=["agents.count=2", "evals.count=0", *TINY_SETS])
    objects = render_experiment(exp, kube_namespace, images=IMAGES)
    budgets = {o["metadata"]["name"] for o in objects if o["kind"] == "PodDisruptionBudget"}
    assert budgets == {"exp-pdb-learner", "exp-pdb-replay", "exp-pdb-ps"}
    create_objects(kube, objects, kube_namespace)
    selector = naming.experiment_selector("exp-pdb")

    def running(group: str) -> list[str]:
        pods = kube.list(POD, kube_namespace, labels=f"{selector},{naming.GROUP_LABEL}={group}")
        return [
            p["metadata"]["name"]
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]

    (learner,) = wait_for("the learner Running", lambda: running("learner"), timeout=120)
    agents = wait_for("the agents Running", lambda: running("agents"), timeout=120)
    wait_for(
        "the disruption controller to count the learner's pod",
        lambda: (kube.get(PDB, "exp-pdb-learner").get("status") or {}).get("currentHealthy"),
        timeout=60,
    )
    refused = evict(kube, learner)
    assert "disruption budget" in refused, refused
    assert learner in running("learner")
    assert evict(kube, agents[0]) == "evicted"
