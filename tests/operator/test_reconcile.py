"""The operator's pure parts: status patches, conditions, and the rules its RBAC grants."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.api.client import RESOURCES
from surreal_kube.launch.kube.render.objects import render_experiment
from surreal_kube.operator import rbac, reconcile

IMAGES = {"cpu": "registry.test/runtime-cpu:1", "gpu": "registry.test/runtime-cuda:1"}


def test_status_patch_nulls_what_disappeared_and_recurses_into_maps() -> None:
    old = {
        "phase": "Running",
        "components": {"agents": {"ready": 2}, "evals": {"ready": 1}},
        "conditions": [{"type": "Ready"}],
    }
    new = {"phase": "Running", "components": {"agents": {"ready": 4}}, "conditions": []}
    assert reconcile.status_patch(old, new) == {
        "components": {"agents": {"ready": 4}, "evals": None},
        "conditions": [],
    }
    assert reconcile.status_patch(new, new) == {}


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    old = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    same = reconcile.merge_conditions(old, [reconcile.condition("Ready", "True", "Running", "ok")])
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = reconcile.merge_conditions(
        old, [reconcile.condition("Ready", "False", "Pending", "")]
    )
    assert flipped[0]["lastTransitionTime"] != "2026-01-01T00:00:00Z"
    both = reconcile.merge_conditions(old, [reconcile.condition("Applied", "True", "Applied", "")])
    assert [c["type"] for c in both] == ["Applied", "Ready"]


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
    # never secrets, never cluster-scoped writes, pods read-only, no wildcards
    for rule in rbac.RULES:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "secrets" not in rule["resources"]
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
    assert rbac.NODE_RULES == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]


def test_a_costly_status_refresh_spaces_out_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh that took c CPU seconds is followed by the next no sooner than c / share:
    at 1,000 pods the status refreshes had the operator busiest while the cluster created the
    pods, refreshing twice a second whatever one cost."""
    done: list[float] = []
    refreshed = threading.Event()

    def costly_refresh(*_: Any) -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.05:  # 50 ms of CPU: the next waits >= 1 s
            pass
        done.append(time.monotonic())
        refreshed.set()

    monkeypatch.setattr(reconcile, "refresh", costly_refresh)
    config = reconcile.Config(refresh_delay=0.01, refresh_cpu_share=0.05)
    refresher = reconcile.Refresher(None, config)  # type: ignore[arg-type]
    try:
        refresher.poke("ns", "exp")
        assert refreshed.wait(10)
        refreshed.clear()
        refresher.poke("ns", "exp")
        assert not refreshed.wait(0.5), "refreshed again after 0.5 s, not after >= 1 s"
        assert refreshed.wait(10), "the second poke was never served"
        assert done[1] - done[0] >= 1.0
    finally:
        refresher.stop()
        refresher.poke("ns", "exp")  # wakes the worker, which sees the stop and exits


def test_a_refresh_resolves_a_spec_once_per_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolving the spec and building its topology was half of each status refresh's CPU
    while 1,022 pods started; the spec changes only with the object's generation."""
    from surreal_kube.launch.kube.render import custom_resource

    exp = resolve_experiment("exp-shape", sets=["agents.count=40", "agents.batch=10"])
    obj = custom_resource.experiment_object(exp, "ns")
    obj["metadata"].update(uid="uid-1", generation=1)
    resolved: list[str] = []
    real = custom_resource.resolve_object
    monkeypatch.setattr(
        custom_resource,
        "resolve_object",
        lambda o: resolved.append(o["metadata"]["uid"]) or real(o),
    )
    first = reconcile.shape_of(obj)
    assert first.desired["agents"] == 4 and first.agents_per_pod == 10
    assert reconcile.shape_of(obj) == first and resolved == ["uid-1"]
    # an edit: a new generation is resolved again
    obj["spec"]["agents"]["count"] = 80
    obj["metadata"]["generation"] = 2
    assert reconcile.shape_of(obj).desired["agents"] == 8 and len(resolved) == 2
    # bounded: the oldest shapes go first
    monkeypatch.setattr(reconcile, "SHAPES_KEPT", 3)
    for uid in ("a", "b", "c", "d"):
        reconcile.shape_of({**obj, "metadata": {**obj["metadata"], "uid": uid}})
    assert len(reconcile._shapes) == 3 and ("a", 2) not in reconcile._shapes


def test_kopf_watches_experiments_alone() -> None:
    # py-spy on the operator during a 10,000-agent create: kopf's diff-base copy of every
    # StatefulSet status event (the child-deleted handlers were kopf event handlers) was a
    # quarter of the operator's CPU; the children are now watched as metadata by `Watcher`
    import kopf

    from surreal_kube.operator import handlers

    registry = handlers.register(kopf.OperatorRegistry())
    watched = {
        (h.selector.group, h.selector.plural or h.selector.any_name)
        for reg in (registry._watching, registry._changing, registry._spawning)
        for h in reg.get_all_handlers()
    }
    assert watched == {("surreal.ai", "experiments")}
