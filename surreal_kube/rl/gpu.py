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

Kind = Literal["learner", "agent", "other"]


def process_kind(name: str) -> Kind:
    """Classify a process by its name: learner*, agent* / eval* (acting), anything else."""
    if name.startswith("learner"):
        return "learner"
    if name.startswith(("agent", "eval")):
        return "agent"
    return "other"


def assign_gpus(
    gpus: int | Sequence[int | str],
    processes: Sequence[str] | Mapping[str, Kind],
) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for each process of a host.

    Args:
        gpus: the number of GPUs visible to the host (ids 0..n-1) or their ids (e.g. the host's
            own CUDA_VISIBLE_DEVICES split on commas).
        processes: process names (kind from the name, see `process_kind`) or name -> kind.

    Returns:
        name -> value for CUDA_VISIBLE_DEVICES ("" hides all GPUs); empty when there is no GPU.
    """
    ids = [str(i) for i in range(gpus)] if isinstance(gpus, int) else [str(g) for g in gpus]
    if not ids:
        return {}
    kinds = (
        dict(processes)
        if isinstance(processes, Mapping)
        else {name: process_kind(name) for name in processes}
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
