"""Placing the processes of one host on its GPUs, as CUDA_VISIBLE_DEVICES per process.

The learner does most of the GPU work and is latency-bound on it, so it gets a GPU of its own
whenever there are more GPUs than learners; agents (and evaluators) do small inference batches and
are spread round-robin over the remaining GPUs, sharing when there are more agents than GPUs. With
no more GPUs than learners, everything shares round-robin. Other roles (replay, ps, ...) get an
empty CUDA_VISIBLE_DEVICES so they can never grab GPU memory by accident. No GPU: nothing is set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from surreal_kube.experiment.topology import Process

Kind = Literal["learner", "agent", "other"]

KIND_OF_ROLE: Mapping[str, Kind] = {"learner": "learner", "agents": "agent", "eval": "agent"}
"""The topology's roles that use a GPU: the learner, and the acting roles (agents, evals)."""


def process_kind(process: Process) -> Kind:
    """A process's kind, from the role the topology gave it (never from its name)."""
    return KIND_OF_ROLE.get(process.role, "other")


def assign_gpus(
    gpus: int | Sequence[int | str],
    processes: Sequence[Process] | Mapping[str, Kind],
) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for each process of a host.

    Args:
        gpus: the number of GPUs visible to the host (ids 0..n-1) or their ids (e.g. the host's
            own CUDA_VISIBLE_DEVICES split on commas).
        processes: the topology's processes (kind from the role, see `process_kind`), in the
            order GPUs go round, or name -> kind.

    Returns:
        name -> value for CUDA_VISIBLE_DEVICES ("" hides all GPUs); empty when there is no GPU.
    """
    ids = [str(i) for i in range(gpus)] if isinstance(gpus, int) else [str(g) for g in gpus]
    if not ids:
        return {}
    kinds = (
        dict(processes)
        if isinstance(processes, Mapping)
        else {p.name: process_kind(p) for p in processes}
    )
    learners = [n for n, k in kinds.items() if k == "learner"]
    agents = [n for n, k in kinds.items() if k == "agent"]
    out = {n: "" for n, k in kinds.items() if k == "other"}
    if learners and agents and len(ids) > len(learners):
        learner_ids, agent_ids = ids[: len(learners)], ids[len(learners) :]
    else:
        learner_ids = agent_ids = ids
    for i, name in enumerate(learners):
        out[name] = learner_ids[i % len(learner_ids)]
    for i, name in enumerate(agents):
        out[name] = agent_ids[i % len(agent_ids)]
    return out
