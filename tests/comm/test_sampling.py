"""The sampling path: credits route requests to ready shards; lost requests are re-issued."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.sampling import Prefetcher, SamplerBroker, SampleServer
from surreal_kube.comm.sockets import make_socket
from tests.comm.ports import free_addr


class BrokerThread:
    def __init__(self) -> None:
        self.front, self.back = free_addr(), free_addr()
        self.broker = SamplerBroker(self.front, self.back)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.broker.poll(20)
        self.broker.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    b = BrokerThread()
    yield b
    b.stop()


def _wait_request(server: SampleServer, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.sock.poll(50):
            req = server.recv_request()
            if req is not None:
                return req
    return None


def _batch(shard: int, n: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((n, 27), shard, np.float32), "done": np.zeros(n, bool)}


def test_requests_only_reach_shards_that_gave_credit(broker):
    ready = SampleServer(broker.back, wait_connected=5.0)
    idle = SampleServer(broker.back, wait_connected=5.0)
    prefetcher = Prefetcher(broker.front, batch_size=32, depth=2).start()
    try:
        assert ready.connected and idle.connected
        ready.give_credit(1)
        req = _wait_request(ready)
        assert req is not None
        client, size, meta = req
        assert size == 32 and isinstance(meta["id"], int)
        ready.reply(client, {"id": meta["id"], "shard": 0}, _batch(0, size))
        msg = prefetcher.get(timeout=5)
        assert msg is not None and msg.meta["shard"] == 0
        assert msg.arrays["obs"].shape == (32, 27) and msg.arrays["obs"].dtype == np.float32
        # The idle shard never announced itself, so it never saw a request.
        assert idle.sock.poll(300) == 0
        assert broker.broker.pending >= 1  # the second prefetch request waits for a credit
    finally:
        prefetcher.close()
        ready.close()
        idle.close()


def test_request_lost_with_a_dead_shard_is_reissued_to_a_live_one(broker):
    doomed = SampleServer(broker.back, wait_connected=5.0)
    prefetcher = Prefetcher(broker.front, batch_size=8, depth=1, request_ttl=0.5).start()
    survivor = None
    try:
        doomed.give_credit(1)
        assert _wait_request(doomed) is not None
        doomed.close()  # dies holding the request
        survivor = SampleServer(broker.back, wait_connected=5.0)
        survivor.give_credit(1)
        req = _wait_request(survivor, timeout=10)
        assert req is not None, "the request was never re-issued"
        client, size, meta = req
        survivor.reply(client, {"id": meta["id"], "shard": 1}, _batch(1, size))
        msg = prefetcher.get(timeout=5)
        assert msg is not None and msg.meta["shard"] == 1
        assert prefetcher.reissued >= 1
    finally:
        prefetcher.close()
        if survivor is not None:
            survivor.close()


def test_broker_counts_and_drops_malformed_requests(broker):
    dealer = make_socket(zmq.DEALER, connect=broker.front)
    shard = SampleServer(broker.back, wait_connected=5.0)
    try:
        dealer.send(b"\xc1garbage")
        dealer.send_multipart(wire.encode(wire.BATCH, {}))  # wrong kind
        dealer.send_multipart([*wire.encode(wire.SAMPLE, {"batch_size": 4}), b"extra"])
        deadline = time.monotonic() + 5
        while broker.broker.rejects.total < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.broker.rejects.total == 3
        shard.give_credit(1)
        assert shard.sock.poll(300) == 0  # nothing malformed was forwarded
    finally:
        dealer.close(0)
        shard.close()


def test_shard_rejects_bad_batch_sizes(broker):
    shard = SampleServer(broker.back, wait_connected=5.0)
    dealer = make_socket(zmq.DEALER, connect=broker.front)
    try:
        shard.give_credit(2)
        dealer.send_multipart(wire.encode(wire.SAMPLE, {"batch_size": -5, "id": 1}))
        dealer.send_multipart(wire.encode(wire.SAMPLE, {"batch_size": 4, "id": 2}))
        req = _wait_request(shard)
        assert req is not None and req[1] == 4
        assert shard.rejects.total == 1
    finally:
        dealer.close(0)
        shard.close()


def test_priorities_reach_the_shard_that_served_the_batch(broker):
    shards = [SampleServer(broker.back, index=i, wait_connected=5.0) for i in range(2)]
    prefetcher = Prefetcher(broker.front, batch_size=4, depth=1).start()
    dealer = make_socket(zmq.DEALER, connect=broker.front)
    try:
        for s in shards:
            s.give_credit(1)
        req = None
        deadline = time.monotonic() + 5
        while req is None and time.monotonic() < deadline:
            for i, s in enumerate(shards):
                if s.sock.poll(20) and (got := s.recv_request()) is not None:
                    req, server, index = got, s, i
        assert req is not None
        client, size, meta = req
        batch = {"obs": np.zeros((size, 3), np.float32), "indices": np.arange(size, dtype=np.int64)}
        server.reply(client, {"id": meta["id"], "shard": index}, batch)
        msg = prefetcher.get(timeout=5)
        assert msg is not None
        prefetcher.update_priorities(msg.meta["shard"], msg.arrays["indices"], np.full(size, 2.5))
        # Hostile: priorities for a shard nobody announced, and a non-integer shard.
        dealer.send_multipart(
            wire.encode(wire.PRIORITIES, {"shard": 99}, {"indices": np.arange(2)})
        )
        dealer.send_multipart(
            wire.encode(wire.PRIORITIES, {"shard": [1]}, {"indices": np.arange(2)})
        )
        deadline = time.monotonic() + 5
        while not server.priority_updates and time.monotonic() < deadline:
            if server.sock.poll(50):
                server.recv_request()
        assert len(server.priority_updates) == 1
        indices, priorities = server.priority_updates.popleft()
        np.testing.assert_array_equal(indices, np.arange(size))
        np.testing.assert_array_equal(priorities, np.full(size, 2.5))
        other = shards[1 - index]
        other.recv_request()
        assert not other.priority_updates
        deadline = time.monotonic() + 5
        while broker.broker.rejects.total < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.broker.rejects.total == 2
    finally:
        dealer.close(0)
        prefetcher.close()
        for s in shards:
            s.close()


def test_an_on_policy_prefetcher_asks_for_a_batch_only_when_the_learner_wants_one(broker):
    """A batch asked for ahead holds what agents made before the learner's last update: with
    agents that outran the learner, PPO's items lagged 2.3 iterations. On demand, the request
    leaves when the learner is done with its batch, and names the learner's version then."""
    shard = SampleServer(broker.back, wait_connected=5.0)
    prefetcher = Prefetcher(broker.front, batch_size=8, depth=4, on_policy=True).start()
    try:
        shard.give_credit(8)
        time.sleep(0.5)
        assert _wait_request(shard, timeout=0.2) is None, "asked before the learner wanted one"
        for version in range(3):
            prefetcher.version = version
            assert prefetcher.get(timeout=0.05) is None  # the learner waits: the request leaves
            req = _wait_request(shard)
            assert req is not None, "no request while the learner waits"
            client, size, meta = req
            assert meta["version"] == version
            shard.reply(client, {"id": meta["id"], "shard": 0}, _batch(0, size))
            assert prefetcher.get(timeout=5) is not None
            # the learner learns: nothing is asked for meanwhile
            assert _wait_request(shard, timeout=0.5) is None, "asked for a batch ahead"
    finally:
        prefetcher.close()
        shard.close()


def test_a_wake_up_read_after_its_batch_was_taken_asks_for_nothing(broker):
    """CI, under load: `get()` found the queue empty and woke the thread, the batch arrived
    before the thread read the wake-up, the learner took it, and the late wake-up, finding the
    queue empty again, sent a request ahead. The wake-up below is that late one, written after
    the batch was handed out."""
    shard = SampleServer(broker.back, wait_connected=5.0)
    prefetcher = Prefetcher(broker.front, batch_size=8, on_policy=True).start()
    try:
        shard.give_credit(8)
        prefetcher.version = 0
        assert prefetcher.get(timeout=0.05) is None
        req = _wait_request(shard)
        assert req is not None, "no request while the learner waits"
        client, size, meta = req
        shard.reply(client, {"id": meta["id"], "shard": 0}, _batch(0, size))
        assert prefetcher.get(timeout=5) is not None
        os.write(prefetcher._wake_w, b"w")
        assert _wait_request(shard, timeout=0.5) is None, "a late wake-up asked for a batch ahead"
    finally:
        prefetcher.close()
        shard.close()
