"""The sinks' stop: what peers sent just before a SIGTERM is still written.

Seen in CI: a test sent five points, closed its client and stopped tensorplex at once; the
points were still on their way (the kernel, the I/O thread) when tensorplex took only what its
queue already held, and all five were lost. A learner that exits at the end of a run and is
followed by tensorplex's stop is the same race.
"""

from __future__ import annotations

import contextlib
import threading
import time

import zmq
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from surreal_kube.comm.metrics import MetricsClient
from surreal_kube.comm.sockets import bind_any_port, drain, make_socket, take_waiting
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.tensorplex import TensorplexRole


def _later(seconds: float, action) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_drain_takes_a_message_that_arrives_after_it_began():
    pull, addr = bind_any_port(zmq.PULL)
    push = make_socket(zmq.PUSH, connect=addr)
    try:
        push.send(b"first")
        got: list[bytes] = []
        late = _later(0.05, lambda: push.send(b"late"))
        taken = drain(pull, lambda frames: got.append(frames[0].bytes))
        late.join()
        assert got == [b"first", b"late"] and taken == 2
    finally:
        push.close(0)
        pull.close(0)


def test_take_waiting_takes_what_is_queued_at_most_its_bound():
    pull, addr = bind_any_port(zmq.PULL)
    push = make_socket(zmq.PUSH, connect=addr)
    try:
        for n in range(5):
            push.send(b"%d" % n)
        got: list[bytes] = []

        def keep(frames) -> None:
            got.append(frames[0].bytes)

        while len(got) < 5:  # the five may reach the queue one by one
            assert pull.poll(10_000, zmq.POLLIN)
            assert take_waiting(pull, keep, most=3) <= 3
        assert got == [b"0", b"1", b"2", b"3", b"4"]
        assert take_waiting(pull, keep) == 0  # nothing queued: returns at once
    finally:
        push.close(0)
        pull.close(0)


def test_drain_stops_at_its_limit_under_a_peer_that_keeps_sending():
    pull, addr = bind_any_port(zmq.PULL)
    push = make_socket(zmq.PUSH, connect=addr)
    stop = threading.Event()

    def flood() -> None:
        while not stop.is_set():
            with contextlib.suppress(zmq.Again):
                push.send(b"x", zmq.NOBLOCK)
            time.sleep(0.01)

    thread = threading.Thread(target=flood)
    thread.start()
    try:
        # returns although the peer never falls quiet for 0.2 s (the suite's timeout otherwise)
        taken = drain(pull, lambda frames: None, quiet_s=0.2, limit_s=0.5)
        assert taken > 0 and thread.is_alive()
    finally:
        stop.set()
        thread.join()
        push.close(0)
        pull.close(0)


def test_tensorplex_writes_points_sent_just_before_its_stop(local_run):
    run = local_run()
    role = TensorplexRole(RoleContext.from_env(run.env("tensorplex")))
    learner = MetricsClient(run.addr("tensorplex"), "learner")
    try:
        assert learner.add_scalars({"losses/policy": 0.0}, 0)
        assert role.sock.poll(10_000, zmq.POLLIN)  # connected: the first point is queued

        def send_rest() -> None:
            for step in range(1, 5):
                assert learner.add_scalars({"losses/policy": float(step)}, step)

        late = _later(0.05, send_rest)  # still on its way when the stop comes
        role.close()
        late.join()
    finally:
        learner.close()
    acc = EventAccumulator(str(run.dir / "tensorboard" / "learner"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("losses/policy")] == [0, 1, 2, 3, 4]
