"""A stranger's items that a replay shard drops do not count towards the global env steps."""

from __future__ import annotations

import numpy as np
import zmq

from surreal_kube.comm import seal, wire
from surreal_kube.comm.sockets import make_socket
from tests.runtime.test_replay_hostile import (  # noqa: F401 - shard: the fixture
    _credit_identity,
    _real,
    _replies,
    _request,
    _until,
    shard,
)


def test_dropped_items_count_no_env_steps(shard):  # noqa: F811 - the fixture
    """Before: the collector counted a message's env steps before the shard checked its items:
    one odd-shaped message claiming 10**15 steps for `agents-0` set the global env steps every
    reply carries (the learner's, its checkpoints', and on Kubernetes the run's end)."""
    role, sender, _, run = shard
    real = _real(role, 4)
    odd = {**real, "obs/low_dim": np.zeros((4, 5, 2), np.float32)}
    stranger = make_socket(zmq.PUSH, connect=run.addr("replay-collector-0"), sealed=True)
    try:
        meta = {"n": 4, "x": 2, "src": "agents-0", "steps": 10**15}
        stranger.send_multipart(seal.seal(wire.encode(wire.EXPERIENCE, meta, odd)))
        _until(role, lambda: role.layout_errors == 1)
        assert role.receiver.env_steps == 0 and role.stats()["steps"] == 0
        sender.env_steps = 40
        sender.send_stacked(real, 4)
        _until(role, lambda: len(role.store) == 4)
        assert role.stats()["steps"] == 40
    finally:
        stranger.close(0)


def test_a_request_the_shard_cannot_serve_yet_holds_back_none_behind_it(shard):  # noqa: F811
    """Before: requests were served in order only, so one for more items than the shard held
    (clamped to its capacity, which a rate-limited FIFO shard never reaches) held every
    request behind it, the learner's included, until it expired (up to a minute): a stranger
    sending one a minute starved the learner for good."""
    role, sender, broker, _ = shard
    sender.send_stacked(_real(role, 8), 8)
    _until(role, lambda: len(role.store) == 8)
    shard_id = _credit_identity(role, broker)
    _request(broker, shard_id, b"evil", batch_size=10**6, id=1, ttl=60.0)
    _request(broker, shard_id, b"learner", batch_size=8, id=2, ttl=60.0)
    [reply] = _replies(role, broker, 1)
    assert reply.meta["id"] == 2
    assert [req[0] for req in role.pending] == [b"evil"]  # it waits for its items, or expires
