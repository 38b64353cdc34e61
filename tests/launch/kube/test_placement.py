"""Placement against cluster profiles: choice of pool, selectors and tolerations, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.placement.place import (
    Placements,
    format_cpu,
    format_memory,
    place,
)
from surreal_kube.launch.kube.profile import (
    ClusterProfile,
    ExperimentVolume,
    load_profile,
    merge_pools,
    pools_from_nodes,
    profile_from_dict,
)

ROOT = Path(__file__).resolve().parents[3]
KWOK_POOLS = ROOT / "tests" / "cluster" / "kwok" / "pools.yaml"
GPU_TOLERATION = {
    "key": "nvidia.com/gpu",
    "operator": "Equal",
    "value": "present",
    "effect": "NoSchedule",
}


@pytest.fixture
def profile() -> ClusterProfile:
    """The test control plane's own pools file is a valid profile; with a ReadWriteMany volume
    each component is placed on its own (the ReadWriteOnce bundle: tests/launch/kube/
    test_storage.py)."""
    rwx = ExperimentVolume(access_mode="ReadWriteMany")
    return load_profile(KWOK_POOLS).model_copy(update={"experiment_volume": rwx})


def placed(sets: list[str], profile: ClusterProfile | None) -> Placements:
    exp = resolve_experiment("exp-p", sets=sets)
    return place(exp, exp.topology, profile)


def test_gpu_components_go_to_gpu_pool_cpu_components_elsewhere(profile: ClusterProfile) -> None:
    out = placed(
        ["agents.count=8", "agents.batch=4", "resources.agent.gpu=1", "resources.learner.gpu=1"],
        profile,
    )
    assert {g: p.pool for g, p in out.items()} == {
        "learner": "gpu-pool",
        "replay": "cpu-pool",
        "ps": "cpu-pool",
        "tensorplex": "cpu-pool",
        "loggerplex": "cpu-pool",
        "tensorboard": "cpu-pool",
        "agents": "gpu-pool",
        "evals": "cpu-pool",
    }
    assert out["agents"].node_selector == {"cloud.google.com/gke-nodepool": "gpu-pool"}
    assert out["agents"].tolerations == (GPU_TOLERATION,)
    assert out["replay"].tolerations == ()


def test_explicit_pool_wins_and_tolerates_its_taints(profile: ClusterProfile) -> None:
    out = placed(["placement.replay=gpu-pool"], profile)
    assert out["replay"].pool == "gpu-pool" and out["replay"].tolerations == (GPU_TOLERATION,)


def test_unknown_pool_is_refused(profile: ClusterProfile) -> None:
    with pytest.raises(SpecError) as err:
        placed(["placement.learner=tpu-pool"], profile)
    assert str(err.value) == (
        "spec.placement.learner: no node pool 'tpu-pool' in the cluster profile; "
        "pools: cpu-pool, gpu-pool"
    )


def test_pod_larger_than_any_node_is_refused(profile: ClusterProfile) -> None:
    with pytest.raises(SpecError) as err:
        placed(["resources.learner.gpu=8"], profile)
    assert str(err.value) == (
        "cannot place learner: each pod asks for cpu 2, memory 4Gi, nvidia.com/gpu 8, but no node "
        "pool has a node that large; the largest, gpu-pool, offers cpu 16, memory 64Gi, "
        "nvidia.com/gpu 4 per node"
    )


def test_more_gpus_than_the_pools_have_is_refused(profile: ClusterProfile) -> None:
    with pytest.raises(SpecError) as err:
        placed(["agents.count=12", "resources.agent.gpu=1", "resources.learner.gpu=1"], profile)
    assert str(err.value) == (
        "cannot place agents (agent): 12 pods of cpu 1, memory 1Gi, nvidia.com/gpu 1 (cpu 12, "
        "memory 12Gi, nvidia.com/gpu 12 in total) do not fit the node pools: the largest pool for "
        "it, gpu-pool, has 2 nodes of cpu 16, memory 64Gi, nvidia.com/gpu 4, 110 pods each (cpu "
        "32, memory 128Gi, nvidia.com/gpu 8 in total); already placed there: learner (cpu 2, "
        "memory 4Gi, nvidia.com/gpu 1); what fits there: 7 agents (7 pods of 1 agent), "
        "nvidia.com/gpu 7 of the 7 left"
    )


def test_refusal_names_what_is_already_placed(profile: ClusterProfile) -> None:
    with pytest.raises(SpecError) as err:
        placed(["agents.count=7", "resources.agent.gpu=1", "resources.learner.gpu=2"], profile)
    assert str(err.value).endswith(
        "(cpu 32, memory 128Gi, nvidia.com/gpu 8 in total); already placed there: learner (cpu 2, "
        "memory 4Gi, nvidia.com/gpu 2); what fits there: 6 agents (6 pods of 1 agent), "
        "nvidia.com/gpu 6 of the 6 left"
    )
    placed(["agents.count=6", "resources.agent.gpu=1", "resources.learner.gpu=2"], profile)


def test_cpu_pods_never_go_to_tainted_pools_by_fit(profile: ClusterProfile) -> None:
    with pytest.raises(SpecError) as err:
        placed(["resources.learner.cpu=12"], profile)
    assert str(err.value) == (
        "cannot place learner: each pod asks for cpu 12, memory 4Gi; only tainted node pools have "
        "nodes that large (gpu-pool): name one in spec.placement.learner to use it"
    )
    out = placed(["resources.learner.cpu=12", "placement.learner=gpu-pool"], profile)
    assert out["learner"].pool == "gpu-pool"


def test_pod_slots_count(profile: ClusterProfile) -> None:
    tiny = ["resources.agent.cpu=1m", "resources.agent.memory=1Mi"]
    placed(["agents.count=400", *tiny], profile)  # 4 cpu nodes x 110 pods, minus the rest
    with pytest.raises(SpecError, match=r"cannot place agents \(agent\): 500 pods"):
        placed(["agents.count=500", *tiny], profile)


def test_cpu_pool_preferred_and_smallest_fit_first() -> None:
    profile = profile_from_dict(
        {
            "pools": [
                {"name": "big", "count": 2, "cpu": 64, "memory": "256Gi"},
                {"name": "small", "count": 3, "cpu": 4, "memory": "16Gi"},
                {"name": "gpu", "count": 1, "cpu": 32, "memory": "128Gi", "gpus": 8},
            ]
        }
    )
    out = placed(["resources.learner.cpu=8", "agents.count=2"], profile)
    assert out["learner"].pool == "big"  # does not fit small
    assert out["agents"].pool == "small"
    out = placed(["agents.count=40"], profile)  # 12 cores of small cannot take 40 agents
    assert out["agents"].pool == "big"


def test_custom_selector_and_taints() -> None:
    profile = profile_from_dict(
        {
            "poolLabel": "eks.amazonaws.com/nodegroup",
            "pools": [
                {"name": "cpu", "count": 2},
                {
                    "name": "a100",
                    "count": 1,
                    "gpus": 8,
                    "cpu": 96,
                    "memory": "1Ti",
                    "taints": [{"key": "dedicated", "value": "rl", "effect": "NoSchedule"}],
                    "nodeSelector": {"node.kubernetes.io/instance-type": "p4d.24xlarge"},
                },
            ],
        }
    )
    out = placed(["resources.learner.gpu=4", "placement.learner=a100"], profile)
    assert out["learner"].node_selector == {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    assert out["learner"].tolerations == (
        {"key": "dedicated", "operator": "Equal", "value": "rl", "effect": "NoSchedule"},
        GPU_TOLERATION,
    )
    assert out["replay"].node_selector == {"eks.amazonaws.com/nodegroup": "cpu"}
    with pytest.raises(SpecError, match="only tainted node pools"):
        placed(["resources.learner.gpu=4"], profile)  # by fit: 'dedicated' is not ours to take


def test_without_profile_nothing_is_checked() -> None:
    out = placed(["resources.learner.gpu=16", "placement.replay=highmem"], None)
    assert out["learner"].pool is None and out["learner"].node_selector == {}
    assert out["learner"].tolerations == (
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    )
    assert out["replay"].node_selector == {"cloud.google.com/gke-nodepool": "highmem"}


def test_bad_profiles_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("pools:\n  - name: a\n    cpu: lots\n")
    with pytest.raises(
        SpecError, match=r"p.yaml: pools.0.cpu: .*'lots' is not a Kubernetes quantity"
    ):
        load_profile(bad)
    bad.write_text("pools:\n  - name: a\n  - name: a\n")
    with pytest.raises(SpecError, match="pool 'a' is listed twice"):
        load_profile(bad)
    bad.write_text("pools:\n  - name: a\n    gpu: 4\n")
    with pytest.raises(SpecError, match=r"pools\.0\.gpu: Extra inputs are not permitted"):
        load_profile(bad)


def test_discovered_pools_from_node_records() -> None:
    def node(name: str, pool: str, cpu: str, gpus: int = 0, taints: list | None = None) -> dict:
        alloc = {"cpu": cpu, "memory": "30Gi", "pods": "110"}
        if gpus:
            alloc["nvidia.com/gpu"] = str(gpus)
        labels = {"cloud.google.com/gke-nodepool": pool, "kubernetes.io/hostname": name}
        if gpus:
            labels["cloud.google.com/gke-accelerator"] = "nvidia-l4"
        return {"name": name, "labels": labels, "taints": taints or [], "allocatable": alloc}

    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    pools = pools_from_nodes(
        [
            node("a-1", "cpu-pool", "7910m"),
            node("a-2", "cpu-pool", "7800m"),
            node("g-1", "gpu-pool", "15", 4, [gpu_taint]),
            {
                "name": "lonely",
                "labels": {},
                "taints": [],
                "allocatable": {"cpu": "2", "memory": "4Gi"},
            },
        ]
    )
    by_name = {p.name: p for p in pools}
    assert by_name["cpu-pool"].count == 2 and by_name["cpu-pool"].cpu == "7800m"
    assert by_name["gpu-pool"].gpus == 4 and by_name["gpu-pool"].accelerator == "nvidia-l4"
    assert [t.key for t in by_name["gpu-pool"].node_taints] == ["nvidia.com/gpu"]
    assert by_name["lonely"].node_selector == {"kubernetes.io/hostname": "lonely"}


def test_a_node_under_pressure_is_not_a_tainted_pool() -> None:
    """CI saw `create` refuse with "only tainted node pools have nodes that large (real-pool):
    name one in spec.placement.learner" while its one node was short of disk: the node lifecycle
    controller's condition taints (node.kubernetes.io/disk-pressure and the like) say how a node
    is now, not what the pool is; the pods wait for the condition to clear, as kubectl's would."""
    conditions = [
        {"key": f"node.kubernetes.io/{k}", "effect": "NoSchedule"}
        for k in ("disk-pressure", "memory-pressure", "not-ready", "unschedulable")
    ] + [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}]
    own = {"key": "dedicated", "value": "rl", "effect": "NoSchedule"}
    node = {
        "name": "real-0",
        "labels": {"cloud.google.com/gke-nodepool": "real-pool"},
        "taints": [*conditions, own],
        "allocatable": {"cpu": "32", "memory": "128Gi"},
    }
    (pool,) = pools_from_nodes([node])
    assert [t.key for t in pool.node_taints] == ["dedicated"]
    (pool,) = pools_from_nodes([{**node, "taints": conditions}])
    assert pool.node_taints == []
    exp = resolve_experiment("exp-p", sets=[])
    out = place(exp, exp.topology, ClusterProfile(pools=[pool]))
    assert {p.pool for p in out.values()} == {"real-pool"}


def test_quantity_formatting() -> None:
    assert [format_cpu(m) for m in (2000, 500, 1500)] == ["2", "500m", "1500m"]
    assert [format_memory(b) for b in (4 * 2**30, 512 * 2**20, 1000)] == ["4Gi", "512Mi", "1000"]


SCALE_PROFILE = {
    "pools": [
        {"name": "cpu-pool", "count": 900, "cpu": "32", "memory": "128Gi"},
        {"name": "gpu-pool", "count": 100, "cpu": "64", "memory": "256Gi", "gpus": 8},
    ]
}


def test_ten_thousand_gpu_agents_on_a_thousand_nodes_are_refused_with_what_fits() -> None:
    with pytest.raises(SpecError) as err:
        placed(
            ["agents.count=10000", "agents.batch=10", "resources.agent.gpu=1"],
            profile_from_dict(SCALE_PROFILE),
        )
    assert str(err.value).startswith("cannot place agents (agent): 1000 pods of cpu 1, memory 1Gi")
    assert str(err.value).endswith(
        "what fits there: 8,000 agents (800 pods of 10 agents), nvidia.com/gpu 800 of the 800 left"
    )


def test_ten_thousand_cpu_agents_fit_a_thousand_nodes() -> None:
    out = placed(["agents.count=10000", "agents.batch=10"], profile_from_dict(SCALE_PROFILE))
    assert out["agents"].pool == "cpu-pool"
    with pytest.raises(SpecError, match=r"what fits there: 26,990 agents \(2,699 pods of 10 "):
        placed(
            ["agents.count=30000", "agents.batch=10", "resources.agent.cpu=10"],
            profile_from_dict(SCALE_PROFILE),
        )


AUTOSCALED = {
    "pools": [
        {"name": "cpu-pool", "count": 2, "cpu": "8", "memory": "32Gi"},
        # GKE's GPU pool at zero nodes: the autoscaler adds up to 3 when pods ask for GPUs
        {"name": "gpu-pool", "count": 0, "maxCount": 3, "cpu": "16", "memory": "64Gi", "gpus": 4},
    ]
}
GPU_SETS = ["agents.count=8", "agents.batch=4", "resources.agent.gpu=1", "resources.learner.gpu=1"]


def test_a_gpu_pool_scaled_to_zero_is_a_place_to_go() -> None:
    out = placed(GPU_SETS, profile_from_dict(AUTOSCALED))
    assert out["learner"].pool == "gpu-pool" and out["agents"].pool == "gpu-pool"
    assert out["learner"].node_selector == {"cloud.google.com/gke-nodepool": "gpu-pool"}
    assert GPU_TOLERATION in out["learner"].tolerations
    # without the autoscaler's maximum, a pool with no node cannot take anything
    fixed = {"pools": [AUTOSCALED["pools"][0], {**AUTOSCALED["pools"][1], "maxCount": None}]}
    with pytest.raises(SpecError, match="no node pool has a node that large"):
        placed(GPU_SETS, profile_from_dict(fixed))


def test_pre_flight_counts_the_autoscalers_maximum_and_says_so() -> None:
    profile = profile_from_dict(AUTOSCALED)
    placed(["agents.count=11", "resources.agent.gpu=1", "resources.learner.gpu=1"], profile)
    with pytest.raises(SpecError) as err:  # 3 nodes x 4 GPUs = 12: 13 do not fit
        placed(["agents.count=13", "resources.agent.gpu=1", "resources.learner.gpu=1"], profile)
    assert "gpu-pool, has at most 3 nodes (autoscaled, 0 now)" in str(err.value)
    assert "nvidia.com/gpu 12 in total" in str(err.value)


def test_placement_says_how_many_nodes_an_autoscaled_pool_must_add() -> None:
    # learner (1 GPU) + 2 agent pods of 1 GPU: 3 GPUs, one node of 4
    out = placed(GPU_SETS, profile_from_dict(AUTOSCALED))
    assert [(g.pool, g.now, g.needed, g.most) for g in out.growth] == [("gpu-pool", 0, 1, 3)]
    assert out.waiting_for() == "waiting for the autoscaler: gpu-pool 0 -> 1"
    # 8 agent pods of 1 GPU + the learner: 9 GPUs, 3 nodes; with one there, two more to come
    many = ["agents.count=8", "resources.agent.gpu=1", "resources.learner.gpu=1"]
    assert placed(many, profile_from_dict(AUTOSCALED)).waiting_for() == (
        "waiting for the autoscaler: gpu-pool 0 -> 3"
    )
    grown = {"pools": [AUTOSCALED["pools"][0], {**AUTOSCALED["pools"][1], "count": 1}]}
    assert placed(many, profile_from_dict(grown)).waiting_for() == (
        "waiting for the autoscaler: gpu-pool 1 -> 3"
    )
    # what the nodes there hold waits for nothing, nor does a pool that is not autoscaled
    assert placed(["agents.count=2"], profile_from_dict(AUTOSCALED)).growth == ()
    assert placed(["agents.count=2"], profile_from_dict(AUTOSCALED)).waiting_for() is None


def test_declared_pools_merge_with_the_live_ones() -> None:
    live = pools_from_nodes(
        [
            {
                "name": f"cpu-{i}",
                "labels": {"cloud.google.com/gke-nodepool": "cpu-pool"},
                "taints": [],
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            }
            for i in range(2)
        ]
    )  # the GPU pool is at zero: no node says it exists
    declared = profile_from_dict({"pools": [AUTOSCALED["pools"][1]]}).pools
    merged = merge_pools(live, declared)
    assert [(p.name, p.count, p.capacity_count) for p in merged] == [
        ("cpu-pool", 2, 2),
        ("gpu-pool", 0, 3),
    ]
    # once the autoscaler added a node, the live count shows, the declared maximum still counts
    grown = merge_pools([*live, declared[0].model_copy(update={"count": 1, "max_count": None})],
                        declared)  # fmt: skip
    assert [(p.name, p.count, p.capacity_count) for p in grown][1] == ("gpu-pool", 1, 3)


def test_a_bad_maximum_is_refused() -> None:
    with pytest.raises(SpecError, match="maxCount"):
        profile_from_dict({"pools": [{"name": "p", "maxCount": -1}]})
