"""A pod's GPUs shared out among its containers with the learning core's assignment helper."""

from __future__ import annotations

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.experiment.topology import Group, Process
from surreal_kube.launch.kube.render.gpus import ContainerGPUs, container_gpus


def group_of(name: str, sets: list[str]) -> Group:
    return resolve_experiment("exp-g", sets=sets).topology.group(name)


def test_single_gpu_process_takes_the_whole_pod() -> None:
    agents = group_of("agents", ["agents.count=8", "agents.batch=4"])
    assert container_gpus(agents, 2) == {"agents-0": ContainerGPUs(2, None)}
    learner = group_of("learner", [])
    assert container_gpus(learner, 1) == {"learner": ContainerGPUs(1, None)}


def test_no_gpu_sets_nothing() -> None:
    replay = group_of("replay", ["replay.shards=2"])
    assert set(container_gpus(replay, 0).values()) == {ContainerGPUs(0, None)}


def test_shards_are_hidden_and_the_main_process_gets_the_gpus() -> None:
    replay = group_of("replay", ["replay.shards=2"])
    assert container_gpus(replay, 1) == {
        "replay": ContainerGPUs(1, None),
        "replay-shard-0": ContainerGPUs(0, ""),
        "replay-shard-1": ContainerGPUs(0, ""),
    }


def _pod(*names: str) -> Group:
    roles = {"agent": "agents"}  # the topology's role of an agent process: its kind for GPUs
    procs = tuple(
        Process(n, roles.get(r, r), "mixed", i, (), (), ())
        for i, n in enumerate(names)
        for r in [n.split("-")[0]]
    )
    return Group("mixed", "learner", 1, tuple(p.role for p in procs), procs)


def test_several_gpu_processes_get_their_own_devices() -> None:
    pod = _pod("learner", "agent-0", "agent-1", "replay")
    assert container_gpus(pod, 3) == {
        "learner": ContainerGPUs(1, "0"),
        "agent-0": ContainerGPUs(1, "0"),
        "agent-1": ContainerGPUs(1, "0"),
        "replay": ContainerGPUs(0, ""),
    }
    assert container_gpus(pod, 4)["learner"] == ContainerGPUs(2, "0,1")  # the idle GPU is spread


def test_sharing_a_device_between_containers_is_refused() -> None:
    with pytest.raises(
        SpecError,
        match="agent-0 and agent-1 would share GPU 1, which Kubernetes cannot give to two containers: ask for at least 3",
    ):
        container_gpus(_pod("learner", "agent-0", "agent-1"), 2)
