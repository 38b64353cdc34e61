"""Local agent processes: an unset `agents.batch` packs agents so processes stay within the cores.

8 agents as 8 processes on 2 cores made the PPO learner wait for experience that aged past the
policy-lag bound (issue 13's scale-out figure); as 2 processes of 4 they matched 2 agents.
"""

from __future__ import annotations

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.local.backend import pack_agents, with_agent_batch


@pytest.mark.parametrize(
    ("count", "cores", "batch"),
    [
        (8, 2, 4),  # the scale-out figure: 2 processes of 4
        (2, 2, 1),  # `make run`: one agent a process, as before
        (1, 16, 1),
        (6, 4, 2),  # 3 processes: the most that divide 6 within 4 cores
        (7, 2, 7),  # a prime beyond the cores: one process
        (12, 1, 12),
        (10_000, 16, 625),
        (3, 0, 3),  # no usable core reported: one process
    ],
)
def test_pack_agents_keeps_processes_within_cores(count: int, cores: int, batch: int) -> None:
    assert pack_agents(count, cores) == batch
    assert count % batch == 0 and count // batch <= max(1, cores)


def test_an_unset_batch_is_packed_and_a_set_one_is_kept() -> None:
    unset = resolve_experiment("exp", flags={"agents.count": 8})
    assert unset.spec.agents.batch is None
    assert unset.spec.agents.groups == 8  # on Kubernetes: one agent a pod
    packed = with_agent_batch(unset, cores=2)
    assert packed.spec.agents.batch == 4
    agents = [p for p in packed.topology.processes if p.role == "agents"]
    assert [p.agent_ids for p in agents] == [(0, 1, 2, 3), (4, 5, 6, 7)]

    explicit = resolve_experiment("exp", flags={"agents.count": 8, "agents.batch": 1})
    assert with_agent_batch(explicit, cores=2).spec.agents.batch == 1
