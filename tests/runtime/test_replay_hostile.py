"""A replay shard that strangers cannot crash, jam or empty (real sockets on 127.0.0.1).

The shard runs in this process (its loop driven by the test); the test plays the agents and,
on the sampling side, the load balancer: it binds the backend address the shard connects to.
"""

from __future__ import annotations

import numpy as np
import pytest
import zmq

from surreal_kube.comm import seal, wire
from surreal_kube.comm.experience import ExperienceSender
from surreal_kube.comm.sampling import READY, REPLY
from surreal_kube.comm.sockets import make_socket
from surreal_kube.envs import env_spaces
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.layout import item_layout
from surreal_kube.runtime.replay import ReplayShard

SPEC = {
    "env": {"id": "gym:CartPole-v1"},
    # the rate limiter off: these tests count items, not the balance of inserts and samples
    "replay": {"capacity": 64, "startSampling": 8, "samplesPerInsert": 0},
    "algorithm": {"batchSize": 8, "horizon": 5, "stride": 5, "maxPolicyLag": 0},
    "agents": {"flushIteration": 4},
}


@pytest.fixture
def shard(local_run):
    """(shard, a PULL-side sender of real items, the ROUTER playing the broker)."""
    run = local_run(SPEC)
    ctx = RoleContext.from_env(run.env("replay-shard-0"), role="replay-shard")
    # The broker before the shard, which waits up to 5 s for it. The hop is inside the pod, so
    # the broker's socket is plain: declared so as the shard's role does (with keys installed).
    ctx.addr("replay-sampler-backend")
    broker = make_socket(zmq.ROUTER, bind=run.addresses["replay-sampler-backend"].bind)
    role = ReplayShard(ctx)
    sender = ExperienceSender([run.addr("replay-collector-0")], timeout=5.0, source="agents-0")
    try:
        yield role, sender, broker, run
    finally:
        sender.close()
        role.close()
        broker.close(0)


def _real(role: ReplayShard, count: int, version: int = 0) -> dict[str, np.ndarray]:
    """`count` items as this experiment's agents send them (layout from the spec and spaces)."""
    spec = role.ctx.spec
    arrays = item_layout(spec, *env_spaces(spec.env)).example(count, 1)
    arrays["param_version"][:] = version
    return arrays


def _until(role: ReplayShard, done, turns: int = 400) -> None:
    for _ in range(turns):
        role.step(20)
        if done():
            return
    raise AssertionError("the shard never got there")


def _push(addr: str, frames: list) -> zmq.Socket:
    sock = make_socket(zmq.PUSH, connect=addr, sealed=True)
    sock.send_multipart(seal.seal(frames), copy=False)  # an insider's: sealed, if keys
    return sock


def test_an_odd_first_message_does_not_fix_the_layout(shard):
    """Before: the first message allocated the ring; every real batch after it failed."""
    role, sender, _, run = shard
    collector = run.addr("replay-collector-0")
    odd = {"obs": np.zeros((4, 3), np.float32), "param_version": np.zeros(4, np.int64)}
    old_schema = {k: v for k, v in _real(role, 4).items() if k != "param_version"}
    strangers = [
        _push(collector, wire.encode(wire.EXPERIENCE, {"n": 4}, odd)),
        _push(collector, wire.encode(wire.EXPERIENCE, {"n": 4}, old_schema)),
    ]
    try:
        _until(role, lambda: role.layout_errors == 2)
        sender.send_stacked(_real(role, 4), 4)
        _until(role, lambda: len(role.store) == 4)
        assert role.receiver.items == 12 and role.layout_errors == 2
    finally:
        for sock in strangers:
            sock.close(0)


def test_a_huge_message_is_refused_unread_and_real_items_flow(shard):
    """Before: a collector took any message whole (up to 1 GiB) and a huge first item sized the
    ring (capacity x its size: a MemoryError with a real capacity). Now ZeroMQ disconnects the
    sender of a frame above what this spec's agents send (MAXMSGSIZE) and the ring is sized
    from the spaces."""
    role, sender, _, run = shard
    huge = {"obs/low_dim": np.zeros((1, 5, 1_000_000), np.float32)}  # 20 MB
    huge.update({k: v[:1] for k, v in _real(role, 1).items() if k != "obs/low_dim"})
    stranger = make_socket(zmq.PUSH, sealed=True)
    monitor = stranger.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    stranger.connect(run.addr("replay-collector-0"))
    stranger.send_multipart(seal.seal(wire.encode(wire.EXPERIENCE, {"n": 1}, huge)), copy=False)
    try:
        _until(role, lambda: monitor.poll(0) != 0)  # the shard's side hung up on it
        sender.send_stacked(_real(role, 4), 4)
        _until(role, lambda: len(role.store) == 4)
        assert role.store._data["obs/low_dim"].shape == (64, 5, 4)
        assert role.receiver.items == 4
    finally:
        stranger.disable_monitor()
        monitor.close(0)
        stranger.close(0)


def _credit_identity(role: ReplayShard, broker: zmq.Socket) -> bytes:
    """Run the shard until it gives a credit; the identity the broker routes to."""
    for _ in range(400):
        role.step(20)
        if broker.poll(0):
            frames = broker.recv_multipart()
            if frames[1] == READY:
                return frames[0]
    raise AssertionError("no credit from the shard")


def _request(broker: zmq.Socket, shard_id: bytes, client: bytes, **meta) -> None:
    broker.send_multipart([shard_id, client, *wire.encode(wire.SAMPLE, meta)])


def _replies(role: ReplayShard, broker: zmq.Socket, want: int) -> list[wire.Message]:
    got: list[wire.Message] = []
    for _ in range(400):
        role.step(20)
        while broker.poll(0):
            frames = broker.recv_multipart(copy=False)
            if frames[1].bytes == REPLY:
                got.append(wire.decode(frames[3:]))
        if len(got) >= want:
            return got
    raise AssertionError(f"{len(got)} replies of {want}")


def _fill(role: ReplayShard, sender: ExperienceSender, messages: int, version: int) -> None:
    for _ in range(messages):
        held = len(role.store)
        sender.send_stacked(_real(role, 4, version), 4)
        _until(role, lambda held=held: len(role.store) == held + 4)


def test_requests_are_clamped_and_cannot_empty_or_jam_a_shard(shard):
    """Before: a batch above capacity waited at the head of the queue forever (no reply, and
    none to any request behind it), and a version from the far future with max_lag 0 dropped
    every item as stale."""
    role, sender, broker, _ = shard
    _fill(role, sender, 16, version=3)  # the whole capacity
    shard_id = _credit_identity(role, broker)
    _request(broker, shard_id, b"evil", batch_size=10**6, id=1, ttl=30.0)
    [jam] = _replies(role, broker, 1)
    assert jam.meta["id"] == 1 and jam.meta["n"] == 64  # clamped to the capacity
    _fill(role, sender, 3, version=3)
    _request(broker, shard_id, b"evil", batch_size=8, id=2, ttl=30.0, version=2**62, max_lag=0)
    [served] = _replies(role, broker, 1)
    assert served.meta["id"] == 2 and served.arrays["param_version"].tolist() == [3] * 8
    assert role.stale_dropped == 0 and len(role.store) == 4  # the newest items are not stale
    _fill(role, sender, 2, version=5)  # the learner moved on, the agents with it
    _request(broker, shard_id, b"learner", batch_size=8, id=3, ttl=30.0, version=5, max_lag=0)
    [fresh] = _replies(role, broker, 1)
    assert role.stale_dropped == 4  # what is really stale still goes
    assert fresh.arrays["param_version"].tolist() == [5] * 8


def test_a_request_past_its_time_to_live_expires_at_the_shard(shard):
    """Before: a request the shard could not serve waited at the head of its queue for good,
    and every request behind it with it."""
    role, sender, broker, _ = shard
    sender.send_stacked(_real(role, 8), 8)
    _until(role, lambda: len(role.store) == 8)
    shard_id = _credit_identity(role, broker)
    _request(broker, shard_id, b"old", batch_size=16, id=1, ttl=0.05)  # more than it holds
    _request(broker, shard_id, b"learner", batch_size=8, id=2, ttl=30.0)
    [reply] = _replies(role, broker, 1)
    assert reply.meta["id"] == 2  # not held back by the one it cannot serve (yet)
    _until(role, lambda: role.expired_requests == 1 and not role.pending)
