"""The Experiment CRD on a real API server: what the operator cannot run is refused by
`kubectl apply` itself, with the field's path, before any operator sees it.

Each case was stored by the API server before the CRD had these rules (the operator then marked
it Applied=False).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.api.client import EXPERIMENT
from surreal_kube.launch.kube.render.custom_resource import experiment_object
from tests.operator.support import SPEC_IMAGES, connect, ensure_crd, kubectl

pytestmark = pytest.mark.cluster


@pytest.fixture
def crd_namespace(kube_cluster: Any, kube_namespace: str) -> str:
    ensure_crd(connect(kube_cluster, kube_namespace))
    return kube_namespace


def apply(cluster: Any, namespace: str, tmp_path: Path, obj: dict[str, Any]) -> Any:
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(obj))
    return kubectl(cluster, "apply", "--server-side", "-n", namespace, "-f", str(path))


def valid(name: str) -> dict[str, Any]:
    return experiment_object(resolve_experiment(name, sets=SPEC_IMAGES), "ignored")


def with_spec(name: str, **changes: Any) -> dict[str, Any]:
    obj = valid(name)
    for dotted, value in changes.items():
        node = obj["spec"]
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    obj["metadata"].pop("namespace")
    return obj


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"agents__count": 6, "agents__batch": 4}, "spec.agents", "agents.batch must divide"),
        ({"replay__startSampling": 5000, "replay__capacity": 100}, "spec.replay.startSampling",
         "must be <= replay.capacity"),
        ({"replay__kind": "uniform"}, "spec.replay.kind", "ppo is on-policy"),
        ({"env__id": "HalfCheetah-v5"}, "spec.env.id", "must look like 'gym:"),
        ({"env__kwargs": {f"k{i}": i for i in range(65)}}, "spec.env.kwargs",
         "must have at most 64"),
        ({"resources": {"lerner": {"cpu": "1"}}}, "spec.resources", "unknown component"),
        ({"placement": {"agentz": "cpu-pool"}}, "spec.placement", "unknown component"),
        ({"resources": {"agent": {"cpu": "lots"}}}, "spec.resources[agent].cpu",
         "must be a Kubernetes quantity"),
        ({"resources": {"agent": {"memory": "512m"}}}, "spec.resources[agent].memory",
         "in bytes"),
        ({"agents__count": 100_001}, "spec.agents.count", "less than or equal to 100000"),
        ({"profile": {"imagePullSecrets": "regcred"}}, "spec.profile.imagePullSecrets",
         "expected list"),
        ({"profile": {"experimentVolume": {"kind": "ceph"}}},
         "spec.profile.experimentVolume.kind", "Unsupported value"),
        ({"profile": {"storageClass": "fast"}}, "spec.profile.storageClass", "not declared"),
    ],
    ids=["batch", "start-sampling", "ppo-fifo", "env-id", "many-kwargs",
         "resources-key", "placement-key", "cpu", "memory", "agents-max",
         "profile-secrets", "profile-volume", "profile-unknown"],
)  # fmt: skip
def test_kubectl_apply_of_what_the_operator_cannot_run_is_refused_naming_the_field(
    kube_cluster: Any,
    crd_namespace: str,
    tmp_path: Path,
    changes: dict[str, Any],
    field: str,
    words: str,
) -> None:
    res = apply(kube_cluster, crd_namespace, tmp_path, with_spec("exp-bad", **changes))
    assert res.returncode != 0, res.stdout
    assert field in res.stderr and words in res.stderr, res.stderr
    kube = connect(kube_cluster, crd_namespace)
    assert kube.get_or_none(EXPERIMENT, "exp-bad") is None


def test_the_valid_and_the_scale_ones_are_accepted(
    kube_cluster: Any, crd_namespace: str, tmp_path: Path
) -> None:
    obj = with_spec(
        "exp-big",
        agents__count=10_000,
        agents__batch=10,
        resources={"agent": {"cpu": 10, "memory": "10Gi"}, "learner": {"cpu": "500m"}},
        env__kwargs={"ctrl_cost_weight": 0.1, "render_mode": None, "terminate": True},
        profile={
            "pools": [{"name": "cpu-pool", "count": 4, "cpu": 8, "memory": "32Gi"}],
            "imagePullSecrets": ["regcred"],
            "experimentVolume": {"kind": "persistentVolumeClaim", "storageClassName": "fast"},
        },
    )
    res = apply(kube_cluster, crd_namespace, tmp_path, obj)
    assert res.returncode == 0, res.stderr
    stored = connect(kube_cluster, crd_namespace).get(EXPERIMENT, "exp-big")
    assert stored["spec"]["agents"]["count"] == 10_000
    assert stored["spec"]["profile"]["pools"][0]["cpu"] == 8  # a quantity, as in a pod spec


def test_an_unset_or_null_agent_batch_is_accepted(
    kube_cluster: Any, crd_namespace: str, tmp_path: Path
) -> None:
    """`agents.batch: null` (what `config -o yaml` prints when unset) means one agent a pod."""
    obj = with_spec("exp-null-batch", agents__count=6, agents__batch=None)
    res = apply(kube_cluster, crd_namespace, tmp_path, obj)
    assert res.returncode == 0, res.stderr
    stored = connect(kube_cluster, crd_namespace).get(EXPERIMENT, "exp-null-batch")
    assert stored["spec"]["agents"]["count"] == 6
