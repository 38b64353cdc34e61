"""Parameters over real sockets: learner PUB -> ps shards behind a proxy -> agent clients."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from surreal_kube.comm import curve, seal, wire
from surreal_kube.comm.parameters import (
    FetchSchedule,
    ParameterClient,
    ParameterPublisher,
    ParameterShard,
    content_hash,
    parameter_proxy,
)
from tests.comm.ports import free_addr, free_port


class ShardThread:
    """A parameter-server shard polling in a thread of the test process."""

    def __init__(self, publish_addr: str, backend_addr: str) -> None:
        self._stop = threading.Event()
        self.shard: ParameterShard | None = None
        self._args = (publish_addr, backend_addr)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.shard = ParameterShard(*self._args)
        try:
            while not self._stop.is_set():
                self.shard.poll(20)
        finally:
            self.shard.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class ParameterServer:
    """Proxy + shards, restartable on the same ports."""

    def __init__(self, publish_addr: str, shards: int = 2) -> None:
        self.publish_addr = publish_addr
        self.serve_addr = f"tcp://127.0.0.1:{free_port()}"
        self.backend_addr = f"tcp://127.0.0.1:{free_port()}"
        self.n = shards
        self.start()

    def start(self) -> None:
        self.proxy = parameter_proxy(self.serve_addr, self.backend_addr)
        self.shards = [ShardThread(self.publish_addr, self.backend_addr) for _ in range(self.n)]

    def stop(self) -> None:
        for s in self.shards:
            s.stop()
        self.proxy.stop()


@pytest.fixture
def publisher() -> Iterator[ParameterPublisher]:
    pub = ParameterPublisher("tcp://127.0.0.1:*", republish_seconds=0.2)
    yield pub
    pub.close()


@pytest.fixture
def server(publisher: ParameterPublisher) -> Iterator[ParameterServer]:
    ps = ParameterServer(publisher.addr)
    yield ps
    ps.stop()


def _params(seed: int, mb: float = 0.25) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(mb * (1 << 20) / 4)
    return {"pi/w": rng.standard_normal(n).astype(np.float32), "z/mean": np.arange(27.0)}


def _fetch_until(
    client: ParameterClient, want: str, deadline: float = 10.0
) -> dict[str, np.ndarray]:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        got = client.fetch()
        if got is not None and client.hash == want:
            return got
        time.sleep(0.02)
    raise AssertionError(f"client never got parameters {want}; last outcome {client.last_outcome}")


def test_content_hash_tracks_content_names_and_dtypes():
    a = _params(0)
    assert content_hash(a) == content_hash({k: v.copy() for k, v in a.items()})
    assert content_hash(a) != content_hash(_params(1))
    assert content_hash({"x": np.zeros(3, np.float32)}) != content_hash(
        {"x": np.zeros(3, np.float64)}
    )
    assert content_hash({"x": np.zeros(3)}) != content_hash({"y": np.zeros(3)})


def test_parameters_reach_eight_clients_and_unchanged_is_not_resent(publisher, server):
    clients = [ParameterClient(server.serve_addr, timeout=2.0) for _ in range(8)]
    try:
        # Before anything is published, the answer is a cheap "empty", not a failure.
        assert clients[0].fetch() is None and clients[0].last_outcome == "empty"

        params = _params(1)
        info = publisher.publish(params, iteration=7)
        for client in clients:
            got = _fetch_until(client, info.hash)
            assert client.info is not None and client.info.iteration == 7
            for name, value in params.items():
                np.testing.assert_array_equal(got[name], value)

        # Asking again with the same hash gets "unchanged" and no arrays, from every client.
        unchanged_before = sum(s.shard.unchanged for s in server.shards)
        for client in clients:
            assert client.fetch() is None
            assert client.last_outcome == "unchanged"
        assert sum(s.shard.unchanged for s in server.shards) - unchanged_before == 8
        # Both shards served (the proxy balances over them).
        assert all(s.shard.fetches > 0 for s in server.shards)

        new = _params(2)
        info2 = publisher.publish(new, iteration=8)
        for client in clients:
            got = _fetch_until(client, info2.hash)
            np.testing.assert_array_equal(got["pi/w"], new["pi/w"])
            assert client.updates == 2
    finally:
        for client in clients:
            client.close()


def test_publisher_republishes_for_late_shards(publisher):
    """A shard that subscribes after the publication still gets the parameters."""
    info = publisher.publish(_params(3), iteration=1)
    time.sleep(0.3)
    ps = ParameterServer(publisher.addr, shards=1)
    client = ParameterClient(ps.serve_addr)
    try:
        _fetch_until(client, info.hash)
    finally:
        client.close()
        ps.stop()


def test_a_shard_that_subscribes_later_is_answered_at_once_not_at_the_next_republish():
    """Before the XPUB, a shard connecting after the publication waited for the periodic
    re-send (2 s at start-up: the first parameters reached the agents that much later); with a
    re-send period of an hour this fetch would never be answered."""
    pub = ParameterPublisher("tcp://127.0.0.1:*", republish_seconds=3600)
    try:
        info = pub.publish(_params(5), iteration=1)
        time.sleep(0.3)  # published before any shard exists
        ps = ParameterServer(pub.addr, shards=2)
        client = ParameterClient(ps.serve_addr)
        try:
            _fetch_until(client, info.hash)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not all(
                s.shard.info is not None and s.shard.info.hash == info.hash for s in ps.shards
            ):
                time.sleep(0.02)
            assert [s.shard.info.hash for s in ps.shards] == [info.hash] * 2  # each was answered
        finally:
            client.close()
            ps.stop()
    finally:
        pub.close()
    pub.publish(_params(6), iteration=2)  # after close: no effect, no write to a closed pipe


def test_client_survives_parameter_server_restart(publisher, server):
    failures: list[int] = []
    successes: list[int] = []
    client = ParameterClient(
        server.serve_addr,
        timeout=0.3,
        on_fetch_parameter_failed=lambda: failures.append(1),
        on_fetch_parameter_success=lambda: successes.append(1),
    )
    try:
        info = publisher.publish(_params(4), iteration=1)
        _fetch_until(client, info.hash)
        server.stop()

        assert client.fetch() is None  # returns on its timeout, never hangs
        assert client.last_outcome == "failed" and client.rebuilds == 1 and failures

        server.start()
        info2 = publisher.publish(_params(5), iteration=2)
        _fetch_until(client, info2.hash)
        assert client.info is not None and client.info.iteration == 2
        assert len(successes) >= 2
    finally:
        client.close()


def test_shard_counts_malformed_publications_and_requests():
    """Garbage on the publish socket or the serve socket is counted, and serving goes on."""
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub_addr = free_addr()
    pub.bind(pub_addr)
    ps = ParameterServer(pub_addr, shards=1)
    raw = ctx.socket(zmq.REQ)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(ps.serve_addr)
    client = ParameterClient(ps.serve_addr)
    try:
        raw.send(b"not a message")
        assert raw.poll(3000)
        reply = wire.decode(raw.recv_multipart())
        assert reply.kind == wire.NO_PARAMS and "error" in reply.meta

        good = {"w": np.ones(4, np.float32)}
        digest = content_hash(good)
        meta = {"iteration": 3, "hash": digest, "time": time.time()}
        deadline = time.monotonic() + 10
        while client.hash != digest and time.monotonic() < deadline:
            # sealed as the learner's are, if keys: the shard opens them, then finds them wrong
            pub.send_multipart(seal.seal([b"\x93garbage"]))
            pub.send_multipart(seal.seal(wire.encode(wire.PARAMS, {"iteration": "x"}, good)))
            pub.send_multipart(seal.seal(wire.encode(wire.PARAMS, meta, good)), copy=False)
            time.sleep(0.05)
            client.fetch()
        assert client.hash == digest
        shard = ps.shards[0].shard
        assert shard is not None and shard.rejects.total >= 3
        assert shard.rejects.counts["bad-meta"] >= 1
    finally:
        client.close()
        raw.close(0)
        ps.stop()
        pub.close(0)


def test_fetch_schedule_modes():
    every3 = FetchSchedule("step", 3)
    assert [every3.due(episode_start=False) for _ in range(7)] == [
        True,
        False,
        False,
        True,
        False,
        False,
        True,
    ]
    episodic = FetchSchedule("episode", 100)
    assert episodic.due(episode_start=False) is True  # the first step always fetches
    assert episodic.due(episode_start=False) is False
    assert episodic.due(episode_start=True) is True
    with pytest.raises(ValueError):
        FetchSchedule("sometimes", 1)  # type: ignore[arg-type]


def test_a_shard_does_not_back_off_from_the_learner_that_binds_last():
    """The learner binds its publisher seconds after the shards start (torch's imports); backed
    off to 1 s, a shard got the first parameters 0.9 s after they were published (create --local
    to the first update: 6.5 s)."""
    shard = ParameterShard("tcp://127.0.0.1:9", "tcp://127.0.0.1:9")
    try:
        assert shard.sub.getsockopt(zmq.RECONNECT_IVL_MAX) == 100
        assert shard.rep.getsockopt(zmq.RECONNECT_IVL_MAX) == 1000  # the rest backs off
    finally:
        shard.close()


@pytest.fixture
def no_keys() -> Iterator[None]:
    """A run without the experiment's keys (locally): nothing is sealed (`comm.seal`)."""
    before = curve.installed()
    curve.install(None)
    yield
    curve.install(before)


def test_a_client_drops_parameters_that_do_not_match_their_hash(no_keys: None) -> None:
    """Without keys (with them, a stranger's set does not open: tests/comm/test_seal.py), a
    peer that joined the parameter server (a REP socket on its backend) served forged or
    corrupted parameters, and agents loaded them: now they are dropped and counted. A refused
    answer is not an unreachable server: the agent logged "did not answer within 2.0s" and
    "reachable again" at every forged fetch (40 a second on CartPole)."""
    from surreal_kube.comm.parameters import content_hash
    from surreal_kube.comm.sockets import bind_any_port

    real = {"w": np.arange(4, dtype=np.float32)}
    forged = {"w": np.full(4, 1e9, np.float32)}
    replies = [forged, real]  # both claim the real parameters' hash
    rep, addr = bind_any_port(zmq.REP, sealed=True)  # sealed with the experiment's keys, if any

    def serve() -> None:
        for arrays in replies:
            rep.recv_multipart()
            meta = {"iteration": 7, "hash": content_hash(real), "time": 0.0}
            rep.send_multipart(seal.seal(wire.encode(wire.PARAMS, meta, arrays)), copy=False)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    unreachable: list[int] = []
    client = ParameterClient(
        addr, timeout=10.0, on_fetch_parameter_failed=lambda: unreachable.append(1)
    )
    try:
        assert client.fetch() is None and client.info is None
        assert client.rejects.counts["bad-hash"] == 1 and client.last_outcome == "refused"
        assert client.failures == 1 and client.rebuilds == 0 and not unreachable
        got = client.fetch()
        assert got is not None and client.info is not None and client.info.iteration == 7
        np.testing.assert_array_equal(got["w"], real["w"])
    finally:
        server.join(10)
        client.close()
        rep.close(0)
