"""Peers that lost a service together do not knock again in lockstep: real libzmq sockets
retrying a closed port on 127.0.0.1, their retry intervals read from ZeroMQ's own monitor.

libzmq 4.3.5 adds no jitter of its own: before the fix every socket retried at exactly 100, 200,
400, 800, 1000 ms, so a fleet of agents whose replay restarted reconnected all at once.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

from surreal_kube.comm.sockets import RECONNECT_JITTER_MS, make_socket


def test_reconnect_intervals_differ_from_socket_to_socket() -> None:
    listener = make_socket(zmq.PULL, bind="tcp://127.0.0.1:*")
    port = int(listener.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(":", 1)[1])
    listener.close(0)  # a port that was just ours and is closed now: every connect is refused
    pairs = []
    for _ in range(8):
        sock = make_socket(zmq.PUSH)
        pairs.append((sock, sock.get_monitor_socket(zmq.EVENT_CONNECT_RETRIED)))
        sock.connect(f"tcp://127.0.0.1:{port}")
    first: list[int] = []
    try:
        for _sock, monitor in pairs:
            assert monitor.poll(10_000), "no reconnect attempt within 10 s"
            first.append(int(recv_monitor_message(monitor)["value"]))
    finally:
        for sock, monitor in pairs:
            sock.disable_monitor()
            monitor.close(0)
            sock.close(0)
    assert all(100 - RECONNECT_JITTER_MS <= ms <= 100 + RECONNECT_JITTER_MS for ms in first), first
    assert len(set(first)) > 1, first  # not all in lockstep
