"""Spot capacity (issue 27 item 3): agents and evals may run on a Spot pool and go there first;
the learner, replay, ps and the data pods stay off Spot nodes, by fit and by a required node
affinity that holds where the pools are not known.
"""

from __future__ import annotations

from typing import Any

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.placement.place import place
from surreal_kube.launch.kube.profile import (
    ClusterProfile,
    ExperimentVolume,
    merge_pools,
    pools_from_nodes,
    profile_from_dict,
)
from surreal_kube.launch.kube.render.objects import render_experiment
from surreal_kube.launch.kube.spot import SPOT_LABELS, is_spot_node
from tests.operator.support import IMAGES

OFF_SPOT = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": key, "operator": "NotIn", "values": [value]} for key, value in SPOT_LABELS
            ]}
        ]
    }
}  # fmt: skip
STATEFUL = ("learner", "replay", "ps", "tensorplex", "loggerplex", "tensorboard")
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


def two_pools(spot_taint: bool = False, spot_count: int = 2) -> ClusterProfile:
    return profile_from_dict(
        {
            "pools": [
                {"name": "on-demand", "count": 2, "cpu": 16, "memory": "64Gi"},
                {"name": "spot", "count": spot_count, "cpu": 8, "memory": "32Gi", "spot": True,
                 "taints": [SPOT_TAINT] if spot_taint else []},
            ]
        }
    )  # fmt: skip


def placed(sets: list[str], profile: ClusterProfile | None) -> dict:
    exp = resolve_experiment("exp-spot", sets=sets)
    return place(exp, exp.topology, profile)


def pods(sets: list[str], profile: ClusterProfile | None) -> dict[str, dict[str, Any]]:
    exp = resolve_experiment("exp-spot", sets=sets)
    objects = render_experiment(exp, "rl", images=IMAGES, profile=profile)
    return {
        o["metadata"]["name"].removeprefix("exp-spot-"): o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("StatefulSet", "Deployment")
    }


def test_nodes_labelled_spot_are_a_spot_pool() -> None:
    def node(name: str, pool: str, **labels: str) -> dict:
        return {
            "name": name,
            "labels": {"cloud.google.com/gke-nodepool": pool, **labels},
            "taints": [],
            "allocatable": {"cpu": "8", "memory": "32Gi"},
        }

    pools = {
        p.name: p
        for p in pools_from_nodes(
            [
                node("s-1", "spot", **{"cloud.google.com/gke-spot": "true"}),
                node("s-2", "spot", **{"cloud.google.com/gke-spot": "true"}),
                node("p-1", "preempt", **{"cloud.google.com/gke-preemptible": "true"}),
                node("m-1", "mixed", **{"cloud.google.com/gke-spot": "true"}),
                node("m-2", "mixed"),
                node("d-1", "on-demand", **{"cloud.google.com/gke-spot": "false"}),
            ]
        )
    }
    assert pools["spot"].spot and pools["preempt"].spot
    assert not pools["mixed"].spot  # one on-demand node: not a pool a preemption empties
    assert not pools["on-demand"].spot
    assert is_spot_node({"karpenter.sh/capacity-type": "spot"})
    assert is_spot_node({"eks.amazonaws.com/capacityType": "SPOT"})


def test_agents_and_evals_go_to_spot_first_the_rest_never() -> None:
    out = placed(["agents.count=8", "evals.count=2"], two_pools(spot_taint=True))
    assert out["agents"].pool == "spot"
    for group in STATEFUL:
        assert out[group].pool == "on-demand", group
        assert out[group].off_spot, group
    # the evals share the learner's node (a ReadWriteOnce volume): on-demand with it
    assert out["evals"].pool == "on-demand"
    assert not out["agents"].off_spot
    assert {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
            "effect": "NoSchedule"} in out["agents"].tolerations  # fmt: skip


def test_with_a_shared_volume_evals_may_go_to_spot_too() -> None:
    rwx = ExperimentVolume(access_mode="ReadWriteMany")
    profile = two_pools().model_copy(update={"experiment_volume": rwx})
    out = placed(["agents.count=4"], profile)
    assert out["agents"].pool == "spot" and out["evals"].pool == "spot"


def test_a_full_spot_pool_overflows_to_on_demand() -> None:
    out = placed(["agents.count=12"], two_pools(spot_count=1))  # 8 cores of spot for 12 agents
    assert out["agents"].pool == "on-demand"


def test_the_rendered_pods_carry_the_rule() -> None:
    specs = pods(["agents.count=4"], two_pools(spot_taint=True))
    for group in STATEFUL:
        assert specs[group]["affinity"]["nodeAffinity"] == OFF_SPOT, group
        assert specs[group]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "on-demand"}
    assert "nodeAffinity" not in specs["agents"].get("affinity", {})
    assert specs["agents"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "spot"}


def test_without_pools_the_affinity_keeps_state_off_spot() -> None:
    """No profile, no pre-flight (or a Spot pool the autoscaler grows from zero): the
    scheduler places, and the affinity is what keeps the learner off a Spot node."""
    specs = pods(["agents.count=2"], None)
    for group in STATEFUL:
        assert specs[group]["affinity"]["nodeAffinity"] == OFF_SPOT, group
    assert "nodeAffinity" not in specs["agents"].get("affinity", {})
    assert "nodeAffinity" not in specs["evals"].get("affinity", {})


def test_only_spot_capacity_is_refused_for_the_learner_naming_what_to_do() -> None:
    only_spot = profile_from_dict(
        {"pools": [{"name": "spot", "count": 3, "cpu": 16, "memory": "64Gi", "spot": True}]}
    )
    with pytest.raises(SpecError) as err:
        placed(["agents.count=2"], only_spot)
    message = str(err.value)
    assert "only Spot node pools have nodes that large (spot)" in message, message
    assert "spec.placement.learner" in message and "on-demand pool" in message
    # named, it is the user's choice: no affinity against the pool it names
    out = placed(["agents.count=2", "placement.learner=spot", "placement.replay=spot",
                  "placement.ps=spot", "placement.tensorplex=spot", "placement.loggerplex=spot",
                  "placement.tensorboard=spot", "placement.eval=spot"], only_spot)  # fmt: skip
    assert out["learner"].pool == "spot" and not out["learner"].off_spot


def test_a_spot_pool_at_zero_is_declared_and_kept_spot() -> None:
    live = pools_from_nodes(
        [
            {
                "name": "s-1",
                "labels": {"cloud.google.com/gke-nodepool": "spot",
                           "cloud.google.com/gke-spot": "true"},
                "taints": [],
                "allocatable": {"cpu": "8", "memory": "32Gi"},
            }
        ]
    )  # fmt: skip
    declared = profile_from_dict(
        {"pools": [{"name": "spot", "count": 0, "maxCount": 10, "cpu": 8, "memory": "32Gi"}]}
    ).pools
    (merged,) = merge_pools(live, declared)
    assert merged.spot and merged.count == 1 and merged.max_count == 10
