"""The parameter server's forwarder survives a stranger's frame above its bound (CURVE on)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from surreal_kube.comm.proxy import Forwarder
from surreal_kube.comm.sockets import make_socket

curve = pytest.importorskip("surreal_kube.comm.curve")


@pytest.fixture
def keys() -> Iterator[object]:
    previous = curve.installed()  # tests.comm.curve_on's, when it runs the suite with CURVE
    keys = previous or curve.generate()
    curve.install(keys)
    try:
        yield keys
    finally:
        curve.install(previous)


def test_an_oversized_frame_on_the_backend_does_not_stop_forwarding(keys) -> None:
    """Before: libzmq's proxy returned EAGAIN when a socket polled readable held nothing (with
    pyzmq's ZAP authenticator, a peer's oversized frame did it), the forwarder's thread ended,
    and the `ps` role exited 1 (seen at the start of local experiments with keys). comm.curve's
    own ZAP handler removed that trigger; this stays as the regression test of both."""
    fwd = Forwarder(
        zmq.ROUTER,
        "tcp://127.0.0.1:*",
        zmq.DEALER,
        "tcp://127.0.0.1:*",
        name="ps-proxy-test",
        frontend_max_bytes=64 << 10,
        backend_max_bytes=1 << 20,
    ).start()
    shard = make_socket(zmq.REP, connect=fwd.backend_addr)
    client = make_socket(zmq.REQ, connect=fwd.frontend_addr)
    stranger = make_socket(zmq.DEALER)  # holds the key: an insider, not a passer-by
    monitor = stranger.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        stranger.connect(fwd.backend_addr)
        stranger.send_multipart([b"client", b"", b"x" * (2 << 20)])
        assert monitor.poll(10_000), "the forwarder's side never hung up on the stranger"
        client.send(b"fetch")
        assert shard.poll(10_000), "the forwarder stopped forwarding"
        assert shard.recv() == b"fetch"
        shard.send(b"params")
        assert client.poll(10_000) and client.recv() == b"params"
        assert fwd.alive
    finally:
        stranger.disable_monitor()
        monitor.close(0)
        for sock in (stranger, client, shard):
            sock.close(0)
        fwd.stop()
