"""The replay service as real processes: load balancer + 2 shards, 4 senders, a prefetching learner."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from surreal_kube.comm.experience import ExperienceSender
from surreal_kube.comm.sampling import Prefetcher
from surreal_kube.envs import env_spaces
from surreal_kube.runtime.layout import item_layout

pytestmark = pytest.mark.slow


def _transitions(run, sender: int, start: int, n: int) -> list[dict[str, np.ndarray]]:
    """Items of the run's layout (the shards take nothing else); `param_version` carries an id
    unique over senders, `rewards` the id modulo 7, so every row can be checked."""
    spec = run.exp.spec
    stacked = item_layout(spec, *env_spaces(spec.env)).example(n)
    ids = np.arange(start, start + n) + sender * 1_000_000
    stacked["param_version"][:] = ids
    stacked["rewards"][:] = (ids % 7)[:, None]
    return [{k: v[i] for k, v in stacked.items()} for i in range(n)]


def test_two_shards_take_four_senders_and_serve_balanced_batches(local_run):
    run = local_run(
        {
            "env": {"id": "gym:CartPole-v1"},
            # the rate limiter off: the senders send everything before the learner samples,
            # and sub-trajectories no longer fit the socket buffers as 44-byte items did
            "replay": {
                "shards": 2,
                "capacity": 5000,
                "startSampling": 100,
                "samplesPerInsert": 0,
            },
            # what the senders and the prefetcher below do: the shards' limits follow from it
            "algorithm": {"name": "ppo", "batchSize": 100},
            "agents": {"flushIteration": 10},
        }
    )
    for name in ("replay", "replay-shard-0", "replay-shard-1"):
        run.start(name)
    for name in ("replay-shard-0", "replay-shard-1"):
        run.wait_log(name, "replay shard")
    run.wait_log("replay", "replay load balancer")

    collectors = [run.addr("replay-collector-0"), run.addr("replay-collector-1")]
    senders = [ExperienceSender(collectors, flush_iteration=10, timeout=5.0) for _ in range(4)]
    time.sleep(0.5)  # both connections up, as for agents that started before their first send
    prefetcher = Prefetcher(run.addr("replay-sampler"), batch_size=100, depth=4).start()
    try:
        for round_ in range(50):
            for s, sender in enumerate(senders):
                sender.send(_transitions(run, s, round_ * 10, 10))
        assert all(s.sent_items == 500 and s.dropped_items == 0 for s in senders)

        shards: Counter[int] = Counter()
        ids: list[int] = []
        for _ in range(18):
            msg = prefetcher.get(timeout=20)
            assert msg is not None, "no batch from replay"
            batch = msg.arrays
            assert batch["rewards"].shape == (100, 25) and batch["rewards"].dtype == np.float32
            # Every row is the item that was sent, intact.
            ids_ = batch["param_version"]
            np.testing.assert_array_equal(batch["rewards"][:, 0], (ids_ % 7).astype(np.float32))
            shards[msg.meta["shard"]] += 1
            ids.extend(ids_.tolist())
        assert len(set(ids)) == len(ids) == 1800  # FIFO: nothing served twice
        assert {i // 1_000_000 for i in ids} == {0, 1, 2, 3}
        assert set(shards) == {0, 1} and min(shards.values()) >= 7, shards
    finally:
        prefetcher.close()
        for sender in senders:
            sender.close()

    for name in ("replay", "replay-shard-0", "replay-shard-1"):
        code, _ = run.terminate(name)
        assert code == 0, (name, code)
