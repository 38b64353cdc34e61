"""The matrix of experiments the renderer is checked with (pure tests and the cluster tests)."""

from __future__ import annotations

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.experiment.spec import COMPONENTS, Experiment
from surreal_kube.experiment.topology import ENDPOINTS, Endpoint, collector, endpoint

IMAGES = {
    "cpu": "registry.test/surreal-kube/runtime-cpu:0123456789abcdef",
    "gpu": "registry.test/surreal-kube/runtime-cuda:fedcba9876543210",
}

MATRIX: dict[str, list[str]] = {
    "one-agent": ["agents.count=1", "evals.count=0"],
    "eight-agents-batch4-gpu": [
        "agents.count=8",
        "agents.batch=4",
        "agents.device=cuda",
        "resources.agent.gpu=1",
        "resources.learner.gpu=1",
    ],
    "thousand-agents": ["agents.count=1000", "evals.count=4"],
    "ddpg-three-replay-shards": ["algorithm.name=ddpg", "replay.shards=3", "ps.shards=2"],
    "shard-pods": ["replay.shards=4", "replay.layout=pods", "ps.shards=2", "ps.layout=pods"],
}
"""name -> --set overrides. 'eight-agents-batch4-gpu': two agent pods of four agents, one GPU each
(2 GPUs for the agents), plus a GPU learner."""

TINY = [f"resources.{c}.cpu=10m" for c in COMPONENTS] + [
    f"resources.{c}.memory=16Mi" for c in COMPONENTS
]
"""Overrides that shrink every pod, so that 1000 agents fit the test cluster's simulated nodes."""


def experiment(case: str, name: str = "exp-matrix", extra: list[str] | None = None) -> Experiment:
    """The resolved experiment of one matrix case."""
    return resolve_experiment(name, sets=[*MATRIX[case], *(extra or [])])


def endpoint_of_variable(var: str) -> Endpoint:
    """The endpoint whose address a `SURREAL_<ENDPOINT>_ADDR` variable holds."""
    names = [*ENDPOINTS, *(collector(i) for i in range(64))]
    return next(endpoint(n) for n in names if endpoint(n).addr_var == var)
