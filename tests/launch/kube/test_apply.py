"""The order in which an experiment's objects are applied."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from surreal_kube.launch.kube.lifecycle import apply
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.specs import IMAGES, experiment


class Recorder:
    """A Kube whose apply records when each object's request began and ended."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float]] = {}
        self.started: list[str] = []
        self._lock = threading.Lock()

    def apply(self, obj: dict[str, Any], namespace: str, dry_run: bool = False) -> dict[str, Any]:
        key = f"{obj['kind']}/{obj['metadata']['name']}"
        begin = time.monotonic()
        with self._lock:
            self.started.append(key)
        time.sleep(0.01)  # a round trip
        with self._lock:
            self.spans[key] = (begin, time.monotonic())
        return obj


def test_workloads_wait_only_for_what_their_pods_need_and_the_largest_goes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 10,000 agents the Services and RBAC went in the first wave with the ConfigMaps: one
    more round of requests before the StatefulSet of a thousand agent pods was applied."""
    objects = render_experiment(experiment("thousand-agents"), "rl", images=IMAGES)
    kinds = {o["kind"] for o in objects}
    assert {"Service", "Role", "RoleBinding", "StatefulSet"} <= kinds
    kube = Recorder()
    apply.apply_objects(kube, objects, "rl")
    assert len(kube.spans) == len(objects)

    def keys(*wanted: str) -> list[str]:
        return [k for k in kube.spans if k.split("/")[0] in wanted]

    needs = keys(*apply.POD_NEEDS)
    workloads = keys(*apply.WORKLOAD_KINDS)
    assert needs and workloads
    needs_done = max(kube.spans[k][1] for k in needs)
    assert all(kube.spans[k][0] >= needs_done for k in kube.spans if k not in needs)
    # the second wave: the workloads by size, then what only running processes use (one
    # request at a time: with several, threads start them in any order)
    monkeypatch.setattr(apply, "PARALLEL", 1)
    kube = Recorder()
    apply.apply_objects(kube, objects, "rl")
    second = [k for k in kube.started if k not in needs]
    replicas = {
        f"{o['kind']}/{o['metadata']['name']}": o["spec"].get("replicas") or 1
        for o in objects
        if o["kind"] in apply.WORKLOAD_KINDS
    }
    assert second[: len(workloads)] == sorted(replicas, key=lambda k: -replicas[k])
    # (and the disruption budgets, which matter once the pods run)
    after = {k.split("/")[0] for k in second[len(workloads) :]}
    assert after == {"Service", "Role", "RoleBinding", "PodDisruptionBudget"}
