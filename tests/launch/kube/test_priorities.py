"""PriorityClasses per component from the profile (issue 27 item 2): learner, replay and ps above
agents, so that a full cluster preempts agents, never the run's state; a class the cluster does
not have is refused at create in one line with nothing made, and in the operator's status."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import EXPERIMENT, Kube, resource
from surreal_kube.launch.kube.placement.priorities import PRIORITY_CLASS
from surreal_kube.launch.kube.plan import make_plan
from surreal_kube.launch.kube.profile import profile_from_dict
from tests.operator.support import (
    IMAGE_ARGS,
    TINY,
    connect,
    ensure_crd,
    objects_of,
    running_operator,
    sk,
    tiny_experiment,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[3]
TINY_SETS = [a for a in TINY if a != "--set"]
POD = resource("v1", "Pod")
CLASSES = {
    "learner": "surreal-test-state",
    "replay": "surreal-test-state",
    "agent": "surreal-test-workers",
}


def test_each_component_runs_at_its_profiles_priority() -> None:
    exp = resolve_experiment("exp-prio", sets=[])
    plan = make_plan(
        exp, "rl", profile=profile_from_dict({"priorityClasses": CLASSES}), images={"cpu": "c"}
    )
    got = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"].get("priorityClassName")
        for o in plan.objects
        if o["kind"] in ("Deployment", "StatefulSet")
    }
    assert got["exp-prio-learner"] == got["exp-prio-replay"] == "surreal-test-state"
    assert got["exp-prio-agents"] == "surreal-test-workers"
    assert got["exp-prio-ps"] is None  # not named: the cluster's default class


def test_shard_pods_run_at_their_services_priority_unless_named() -> None:
    exp = resolve_experiment(
        "exp-prio", sets=["replay.layout=pods", "replay.shards=2", "ps.layout=pods"]
    )
    classes = {**CLASSES, "ps": "surreal-test-state", "ps-shard": "surreal-test-workers"}
    plan = make_plan(
        exp, "rl", profile=profile_from_dict({"priorityClasses": classes}), images={"cpu": "c"}
    )
    got = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"].get("priorityClassName")
        for o in plan.objects
        if o["kind"] == "StatefulSet"
    }
    assert got["exp-prio-replay-shard"] == "surreal-test-state"  # the replay's
    assert got["exp-prio-ps-shard"] == "surreal-test-workers"  # its own


def test_a_priority_for_no_component_is_refused() -> None:
    with pytest.raises(SpecError, match=r"priorityClasses: .*unknown component 'agents'"):
        profile_from_dict({"priorityClasses": {"agents": "low"}})


@pytest.fixture
def classes(kube_cluster: Any) -> Iterator[None]:
    """The two PriorityClasses of CLASSES, made for the test and removed after it."""
    values = {"surreal-test-state": 1000, "surreal-test-workers": 10}
    with Kube(kubeconfig=kube_cluster.kubeconfig) as kube:
        for name, value in values.items():
            kube.apply(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                    "preemptionPolicy": "PreemptLowerPriority",
                }
            )
        try:
            yield
        finally:
            for name in values:
                kube.delete(PRIORITY_CLASS, name)


def profile_with(tmp_path: Path, name: str, classes: dict[str, str]) -> Path:
    """A profile of the test cluster (an emptyDir folder: no provisioner) with these classes."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump({"experimentVolume": {"kind": "emptyDir"}, "priorityClasses": classes})
    )
    return path


@pytest.mark.cluster
def test_create_gives_pods_their_priority_or_refuses_a_missing_class(
    kube_cluster: Any, kube_namespace: str, classes: None, tmp_path: Path
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    missing = profile_with(tmp_path, "missing", {**CLASSES, "ps": "no-such-class"})
    args = ["-n", kube_namespace, "--direct", *IMAGE_ARGS, *TINY]
    refused = sk(kube_cluster, "create", "exp-prio", "--profile", str(missing), *args)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "priorityClasses.ps: no PriorityClass 'no-such-class'" in lines[0]
    assert "surreal-test-state" in lines[0]  # what the cluster has
    assert objects_of(kube, "exp-prio") == []
    good = profile_with(tmp_path, "good", CLASSES)
    made = sk(kube_cluster, "create", "exp-prio", "--profile", str(good), *args)
    assert made.returncode == 0, made.stdout + made.stderr

    def priorities() -> dict[str, Any] | None:
        pods = kube.list(POD, kube_namespace, labels=naming.experiment_selector("exp-prio"))
        got = {p["metadata"]["labels"][naming.GROUP_LABEL]: p["spec"].get("priority") for p in pods}
        return got if {"learner", "agents"} <= set(got) else None

    got = wait_for("the pods", priorities, timeout=60)
    assert got["learner"] == got["replay"] == 1000 and got["agents"] == 10, got


@pytest.mark.cluster
def test_the_operator_says_which_class_is_missing_and_makes_nothing(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    ensure_crd(kube)
    prof = profile_with(tmp_path, "operator", {"learner": "no-such-class"})
    with running_operator(kube_cluster, kube_namespace, tmp_path, "--profile", str(prof)):
        kube.apply(tiny_experiment(kube_namespace, "exp-prio"))

        def refused() -> str | None:
            status = (kube.get_or_none(EXPERIMENT, "exp-prio") or {}).get("status") or {}
            cond = next((c for c in status.get("conditions") or [] if c["type"] == "Applied"), None)
            return cond["message"] if cond and cond["status"] == "False" else None

        message = wait_for("Applied=False", refused)
        assert "priorityClasses.learner: no PriorityClass 'no-such-class'" in message
        assert "\n" not in message
        assert objects_of(kube, "exp-prio") == []
