"""Kubernetes Events on Experiments (issue 27 item 5): each phase change and each refusal is an
Event beside the pods' own, as `kubectl get events` shows them; repeats are counted up.

Before, the operator posted only kopf's handler warnings: an experiment that became Running or
was refused for its spec left no Event of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from surreal_kube.operator import events
from tests.operator.support import (
    connect,
    ensure_crd,
    profile_file,
    running_operator,
    tiny_experiment,
    wait_for,
)

pytestmark = pytest.mark.cluster


@pytest.fixture
def kube(kube_cluster: Any, kube_namespace: str) -> Any:
    k = connect(kube_cluster, kube_namespace)
    ensure_crd(k)
    return k


def events_of(kube: Any, name: str) -> list[dict[str, Any]]:
    return kube.list(
        events.EVENT,
        kube.namespace,
        fields=f"involvedObject.name={name},involvedObject.kind=Experiment",
    )


def test_phase_changes_and_refusals_are_events_of_the_experiment(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    with running_operator(
        kube_cluster, kube_namespace, tmp_path, "--profile", str(profile_file(tmp_path))
    ):
        kube.apply(tiny_experiment(kube.namespace, "exp-ev"))

        def running() -> dict[str, Any] | None:
            return next((e for e in events_of(kube, "exp-ev") if e["reason"] == "Running"), None)

        event = wait_for("a Running event", running, timeout=120)
        assert event["type"] == "Normal"
        assert event["message"].split(":")[0].endswith("-> Running"), event["message"]
        assert event["source"]["component"] == "surreal-kube-operator"
        assert (
            event["involvedObject"]["uid"]
            == kube.get(events.EXPERIMENT, "exp-ev")["metadata"]["uid"]
        )

        hostpath = {"experimentVolume": {"kind": "hostPath", "path": "/var"}}
        kube.apply(tiny_experiment(kube.namespace, "exp-ev-bad", profile=hostpath))

        def refused() -> dict[str, Any] | None:
            found = events_of(kube, "exp-ev-bad")
            return next((e for e in found if e["reason"] == "InvalidSpec"), None)

        warning = wait_for("an InvalidSpec event", refused)
        assert warning["type"] == "Warning"
        assert "experimentVolume.kind" in warning["message"], warning["message"]


def test_a_repeated_event_is_one_event_counted_up(kube: Any) -> None:
    obj = kube.apply(tiny_experiment(kube.namespace, "exp-ev-count"))
    for _ in range(3):
        events.record(kube, obj, "WaitingForCapacity", "no room yet", warning=True)
    (event,) = [e for e in events_of(kube, "exp-ev-count") if e["reason"] == "WaitingForCapacity"]
    assert event["count"] == 3 and event["type"] == "Warning"
