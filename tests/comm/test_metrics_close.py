"""What a role sends to tensorplex and loggerplex just before it closes still arrives.

CI saw a test's last two points never written: the client closed its socket with no linger
while they were still queued behind a busy I/O thread. Here the sink is not even listening when
the client closes, the harshest form of "not sent yet": it binds afterwards, within the linger.
"""

from __future__ import annotations

import logging
import time

import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.metrics import LogForwarder, MetricsClient
from surreal_kube.comm.sockets import make_socket
from tests.comm.ports import free_addr


def received(addr: str, want: int) -> list[dict]:
    time.sleep(0.2)  # the client has closed for a while (well within its linger)
    sink = make_socket(zmq.PULL, bind=addr, rcvtimeo_ms=3000)
    try:
        got = []
        while len(got) < want:
            try:
                frames = sink.recv_multipart()
            except zmq.Again:
                break
            got.append(wire.decode(frames).meta)
        return got
    finally:
        sink.close(0)


def test_points_sent_just_before_close_reach_tensorplex() -> None:
    addr = free_addr()
    client = MetricsClient(addr, "learner")
    for step in range(3):
        assert client.add_scalars({"losses/policy": float(step)}, step)
    client.close()
    assert [m["step"] for m in received(addr, 3)] == [0, 1, 2]


def test_a_last_log_line_reaches_loggerplex() -> None:
    addr = free_addr()
    handler = LogForwarder(addr, "learner")
    handler.emit(logging.makeLogRecord({"msg": "learner done", "levelname": "INFO"}))
    handler.close()
    assert [m["msg"] for m in received(addr, 1)] == ["learner done"]
