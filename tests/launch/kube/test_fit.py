"""The scheduler's fit rules, once (placement/fit.py): taints and tolerations, node selectors,
resource fit; pre-flight placement and status read the same rules."""

from __future__ import annotations

from typing import Any

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.placement import fit
from surreal_kube.launch.kube.placement.place import place
from surreal_kube.launch.kube.profile import ClusterProfile

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

# (toleration, taint, matches)
MATCHES = [
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, GPU_TAINT, True),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU_TAINT, True),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU_TAINT, False),
    ({"operator": "Exists"}, GPU_TAINT, True),
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}, GPU_TAINT, True),
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}, GPU_TAINT, False),
    ({"key": "nvidia.com/gpu", "value": "present"}, GPU_TAINT, True),  # Equal is the default
    ({"key": "other", "operator": "Exists"}, GPU_TAINT, False),
]


@pytest.mark.parametrize(("toleration", "taint", "matches"), MATCHES)
def test_a_toleration_matches_a_taint_as_the_scheduler_says(
    toleration: dict[str, str], taint: dict[str, str], matches: bool
) -> None:
    assert fit.toleration_matches(toleration, taint) is matches


def test_only_hard_effects_keep_pods_off_unless_every_effect_is_asked_for() -> None:
    soft = {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}
    assert fit.tolerates([], [soft])
    assert not fit.tolerates([], [soft], effects=None)
    assert not fit.tolerates([], [GPU_TAINT])
    assert fit.tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], [GPU_TAINT, soft])


def node(labels: dict[str, str], taints: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels}, "spec": {"taints": taints}}


def test_a_node_admits_a_pod_by_its_selector_and_its_tolerations() -> None:
    gpu_node = node({"pool": "gpu"}, [GPU_TAINT])
    pod = {"spec": {"nodeSelector": {"pool": "gpu"}}}
    assert not fit.admits(gpu_node, pod)
    pod["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert fit.admits(gpu_node, pod)
    assert not fit.admits(node({"pool": "cpu"}, []), pod)
    assert fit.admits(node({}, []), {"spec": {}})


def test_fit_is_every_resource_asked_for_at_most_what_is_there() -> None:
    assert fit.fits({"cpu": 2, "memory": 4}, {"cpu": 2, "memory": 8, "nvidia.com/gpu": 1})
    assert not fit.fits({"cpu": 2, "nvidia.com/gpu": 1}, {"cpu": 8})
    assert fit.fits({"nvidia.com/gpu": 0}, {})


def test_free_capacity_subtracts_what_running_pods_ask_for() -> None:
    alloc = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}

    def pod(phase: str) -> dict[str, Any]:
        requests = {"cpu": "1500m", "memory": "1Gi"}
        return {
            "spec": {"nodeName": "n", "containers": [{"resources": {"requests": requests}}]},
            "status": {"phase": phase},
        }

    free = fit.free_capacity([alloc], [pod("Running"), pod("Succeeded"), pod("Pending")])
    assert free == {"n": {"cpu": 1.0, "memory": 6 * 2**30}}


def test_placement_picks_by_fit_only_pools_whose_taints_it_takes() -> None:
    profile = ClusterProfile.model_validate(
        {
            "pools": [
                {"name": "spot", "count": 4, "cpu": "64", "memory": "256Gi",
                 "taints": [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]},
                {"name": "gpu", "count": 2, "cpu": "16", "memory": "64Gi", "gpus": 4},
                {"name": "small", "count": 8, "cpu": "8", "memory": "32Gi"},
            ]
        }
    )  # fmt: skip
    exp = resolve_experiment("exp", sets=["agents.count=2", "resources.learner.gpu=1"])
    placed = place(exp, exp.topology, profile)
    assert placed["learner"].pool == "gpu"  # the GPU taint is taken by a GPU pod
    assert placed["agents"].pool == "small"  # a soft taint still keeps a pool from being picked
    big = resolve_experiment("exp", sets=["resources.agent.cpu=32"])
    with pytest.raises(SpecError, match="only tainted node pools have nodes that large"):
        place(big, big.topology, profile)
