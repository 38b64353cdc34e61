"""The rules the operator's RBAC grants (operator/rbac.py): enough for what it renders, no more."""

from __future__ import annotations

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.api.client import RESOURCES
from surreal_kube.launch.kube.render.objects import render_experiment
from surreal_kube.operator import rbac

IMAGES = {"cpu": "registry.test/runtime-cpu:1", "gpu": "registry.test/runtime-cuda:1"}


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["agents.count=8", "agents.batch=4", "resources.agent.gpu=1", "resources.learner.gpu=1"],
        ["algorithm.name=ddpg", "replay.shards=3", "ps.shards=2", "evals.count=0"],
    ],
)
def test_the_role_covers_every_kind_the_renderer_makes(sets: list[str]) -> None:
    exp = resolve_experiment("exp-rbac", sets=sets)
    owner = {"apiVersion": "surreal.ai/v1alpha1", "kind": "Experiment", "name": "e", "uid": "u"}
    for obj in render_experiment(exp, "ns", owner=owner, images=IMAGES):
        res = RESOURCES[(obj["apiVersion"], obj["kind"])]
        group = "" if "/" not in obj["apiVersion"] else obj["apiVersion"].split("/")[0]
        for verb in ("get", "list", "watch", "create", "patch", "delete"):
            assert rbac.allows(rbac.RULES, group, res.plural, verb), (obj["kind"], verb)


def test_the_role_is_least_privilege() -> None:
    # secrets: get and create only (the CURVE key); no cluster-scoped writes, pods read-only,
    # no wildcards
    for rule in rbac.RULES:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if "secrets" in rule["resources"]:
            assert rule["resources"] == ["secrets"] and sorted(rule["verbs"]) == ["create", "get"]
    for verb in ("list", "watch", "patch", "update", "delete"):
        assert not rbac.allows(rbac.RULES, "", "secrets", verb)
    assert not rbac.allows(rbac.RULES, "", "pods", "create")
    assert not rbac.allows(rbac.RULES, "", "pods", "delete")
    assert not rbac.allows(rbac.RULES, "surreal.ai", "experiments", "create")
    # it creates the reporter's Role and RoleBinding, but may grant only what it holds itself:
    # no escalate, no bind, nothing cluster-wide
    for verb in ("escalate", "bind"):
        assert not rbac.allows(rbac.RULES, "rbac.authorization.k8s.io", "roles", verb)
    assert not rbac.allows(rbac.RULES, "rbac.authorization.k8s.io", "clusterroles", "create")
    assert not rbac.allows(rbac.RULES, "rbac.authorization.k8s.io", "clusterrolebindings", "create")
    assert not rbac.allows(rbac.RULES, "", "serviceaccounts/token", "create")
    assert rbac.NODE_RULES == [  # cluster-wide reads only
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["scheduling.k8s.io"],
            "resources": ["priorityclasses"],
            "verbs": ["get", "list"],
        },
    ]
