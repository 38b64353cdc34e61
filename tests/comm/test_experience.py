"""Experience sending: stacking, never hanging on a dead replay, reporting drops, recovering."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import zmq

from surreal_kube.comm import seal, wire
from surreal_kube.comm.experience import ExperienceReceiver, ExperienceSender, stack_items
from surreal_kube.comm.sockets import make_socket
from tests.comm.ports import free_addr


def _open(frames: list[zmq.Frame]) -> list[object]:
    """What a collector reads: the message opened (as it is when no keys are installed)."""
    return seal.Opener(fresh=False).open(frames)


def _item(i: int, horizon: int = 25) -> dict[str, np.ndarray]:
    return {"obs": np.full((horizon, 3), i, np.float32), "done": np.zeros(horizon, bool)}


def test_stack_items_groups_by_layout_in_order():
    groups = stack_items([_item(0), _item(1), _item(2, horizon=7), _item(3)])
    assert [(g["obs"].shape, n) for g, n in groups] == [((3, 25, 3), 3), ((1, 7, 3), 1)]
    np.testing.assert_array_equal(groups[0][0]["obs"][:, 0, 0], [0, 1, 3])


def test_a_lone_item_is_sent_as_views_of_its_arrays():
    """An on-policy agent sends one item at a time: a leading axis on views of its arrays (a
    0-d one included), not a copy of each (a third of the send's CPU)."""
    item = {**_item(5), "param_version": np.array(2, np.int64)}
    [(arrays, count)] = stack_items([item])
    assert count == 1
    assert arrays["obs"].shape == (1, 25, 3) and np.shares_memory(arrays["obs"], item["obs"])
    assert arrays["param_version"].shape == (1,) and int(arrays["param_version"][0]) == 2
    decoded = wire.decode([bytes(memoryview(f)) for f in wire.encode(wire.EXPERIENCE, {}, arrays)])
    np.testing.assert_array_equal(decoded.arrays["obs"][0], item["obs"])


def test_sender_flushes_every_flush_iteration_items_as_one_message():
    addr = free_addr()
    receiver = make_socket(zmq.PULL, bind=addr, sealed=True)
    sender = ExperienceSender(addr, flush_iteration=4, timeout=2.0)
    try:
        for i in range(3):
            sender.send(_item(i))
        assert sender.sent_messages == 0  # buffered
        sender.send(_item(3))
        assert sender.sent_messages == 1 and sender.sent_items == 4
        assert receiver.poll(2000)
        msg = wire.decode(_open(receiver.recv_multipart(copy=False)), expect=(wire.EXPERIENCE,))
        assert msg.meta["n"] == 4
        assert msg.arrays["obs"].shape == (4, 25, 3)
        np.testing.assert_array_equal(msg.arrays["obs"][:, 0, 0], [0, 1, 2, 3])
    finally:
        sender.close()
        receiver.close(0)


def test_sender_to_dead_replay_times_out_reports_drop_and_recovers(caplog):
    addr = free_addr()  # nobody listens here
    sender = ExperienceSender(addr, flush_iteration=1, timeout=0.3)
    receiver = None
    try:
        with caplog.at_level(logging.WARNING, logger="surreal_kube.comm.experience"):
            sender.send(_item(0))  # returns: it waited its timeout, never forever
        assert sender.dropped_items == 1 and sender.sent_items == 0 and not sender.healthy
        assert any(
            "did not take experience within 0.3s; dropping 1 items" in r.getMessage()
            for r in caplog.records
        )

        # While replay stays down, further sends are dropped without waiting (not healthy: sends
        # do not block) and without a warning each.
        warnings = len(caplog.records)
        with caplog.at_level(logging.WARNING, logger="surreal_kube.comm.experience"):
            for i in range(50):
                sender.send(_item(i))
        assert sender.dropped_items == 51 and sender.dropped_messages == 51
        assert not sender.healthy and len(caplog.records) == warnings

        # Replay comes up at that address: sending resumes on its own.
        pull = receiver = make_socket(zmq.PULL, bind=addr, sealed=True)
        deadline = time.monotonic() + 10
        with caplog.at_level(logging.INFO, logger="surreal_kube.comm.experience"):
            while sender.sent_items == 0 and time.monotonic() < deadline:
                sender.send(_item(99))
                time.sleep(0.05)
        assert sender.sent_items >= 1 and sender.healthy
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        assert pull.poll(2000)
        msg = wire.decode(_open(pull.recv_multipart(copy=False)))
        assert msg.arrays["obs"][0, 0, 0] == 99
    finally:
        sender.close()
        if receiver is not None:
            receiver.close(0)


def test_receiver_counts_messages_that_do_not_stack():
    addr = free_addr()
    receiver = ExperienceReceiver(addr)
    assert receiver.addr == addr
    push = make_socket(zmq.PUSH, connect=addr, sealed=True)  # an agent's side
    try:
        bad = [
            wire.encode(wire.EXPERIENCE, {"n": 3}, {"obs": np.zeros((2, 4), np.float32)}),
            wire.encode(wire.EXPERIENCE, {"n": "3"}, {"obs": np.zeros((3, 4), np.float32)}),
            wire.encode(wire.EXPERIENCE, {"n": 1}, {}),
            wire.encode(wire.PARAMS, {"n": 1}, {"obs": np.zeros((1, 4), np.float32)}),
            [b"junk"],
        ]
        for frames in bad:  # sealed as a member's are, when keys are installed
            push.send_multipart(seal.seal(frames), copy=False)
        push.send_multipart(
            seal.seal(wire.encode(wire.EXPERIENCE, {"n": 2}, {"obs": np.ones((2, 4), np.float32)}))
        )
        got = None
        deadline = time.monotonic() + 5
        while got is None and time.monotonic() < deadline:
            got = receiver.recv(timeout_ms=100)
        assert got is not None and got[1] == 2
        assert receiver.rejects.total == 5 and receiver.items == 2
    finally:
        push.close(0)
        receiver.close()


def test_sender_spreads_over_every_shard_and_skips_one_that_is_down():
    """The agent's PUSH socket is the load balancer: round-robin over the shards it reaches."""
    up, down = free_addr(), free_addr()
    receivers = [ExperienceReceiver(up), ExperienceReceiver(free_addr())]
    sender = ExperienceSender([r.addr for r in receivers] + [down], timeout=2.0)
    try:
        # both live shards connected (a fixed sleep was not always enough on a loaded machine:
        # PUSH only balances over the peers it has, so a late one got nothing)
        deadline = time.monotonic() + 10
        while sender.connected_peers < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sender.connected_peers == 2
        for i in range(40):
            sender.send(_item(i))
        assert sender.sent_items == 40 and sender.dropped_items == 0  # the dead shard costs nothing
        # round-robin over the connected shards whose queue has room: about half each (a shard
        # whose small queue is full for a moment is skipped, so not exactly 20 and 20)
        counts = [0, 0]
        deadline = time.monotonic() + 10
        while sum(counts) < 40 and time.monotonic() < deadline:
            for k, r in enumerate(receivers):
                batch = r.recv(timeout_ms=50)
                counts[k] += batch[1] if batch else 0
        assert sum(counts) == 40 and min(counts) >= 10, counts
    finally:
        sender.close()
        for r in receivers:
            r.close()


def _versioned(i: int, version: int) -> dict[str, np.ndarray]:
    return {**_item(i), "param_version": np.array(version, np.int64)}


def test_schema_2_items_carry_their_parameter_version_and_the_senders_steps():
    addr = free_addr()
    receiver = ExperienceReceiver(addr)
    sender = ExperienceSender(addr, flush_iteration=2, source="agents-3")
    push = make_socket(zmq.PUSH, connect=addr, sealed=True)
    try:
        sender.env_steps = 1234
        sender.send([_versioned(0, 7), _versioned(1, 8)])
        got = None
        deadline = time.monotonic() + 5
        while got is None and time.monotonic() < deadline:
            got = receiver.recv(timeout_ms=100)
        assert got is not None
        assert got[0]["param_version"].tolist() == [7, 8]
        assert receiver.steps_by_source == {"agents-3": 1234} and receiver.env_steps == 1234
        # schema 2 without a valid version column is refused, not stored
        for arrays in (
            {"obs": np.zeros((2, 3), np.float32)},
            {"obs": np.zeros((2, 3), np.float32), "param_version": np.zeros(2, np.float32)},
        ):
            push.send_multipart(seal.seal(wire.encode(wire.EXPERIENCE, {"n": 2, "x": 2}, arrays)))
        deadline = time.monotonic() + 5
        while receiver.rejects.total < 2 and time.monotonic() < deadline:
            assert receiver.recv(timeout_ms=100) is None
        assert receiver.rejects.total == 2 and receiver.items == 2
    finally:
        push.close(0)
        sender.close()
        receiver.close()


def test_sender_waits_for_a_replay_that_is_up_but_holds_inserts_back():
    """A connected shard that stops reading (its rate limiter) makes agents wait, not drop."""
    addr = free_addr()
    pull = make_socket(zmq.PULL, bind=addr, rcvhwm=1, sealed=True)
    calls: list[float] = []
    stop_after = 1.0

    def hook(waited: float) -> bool:
        calls.append(waited)
        return waited < stop_after

    sender = ExperienceSender(addr, flush_iteration=1, timeout=0.3, hwm=1, wait_hook=hook)
    try:
        time.sleep(0.3)  # connected
        big = {"obs": np.zeros((25, 4000), np.float32), "param_version": np.array(0, np.int64)}
        for _ in range(2000):  # the queues and socket buffers fill, then sends wait in the hook
            sender.send(big)
            if sender.dropped_items:
                break
        assert calls, "the sender never waited"
        # it waited well past its drop timeout (0.3 s), as long as the hook said so, then dropped
        assert calls[-1] >= stop_after, calls
        assert sender.waited_seconds >= stop_after, sender.waited_seconds
        assert sender.dropped_items == 1 and sender.healthy and not sender.waiting
        sent = sender.sent_items
        # replay reads again: the next send goes through without waiting
        while pull.poll(100):
            pull.recv_multipart()
        before = len(calls)
        sender.send(_versioned(99, 0))
        assert sender.sent_items == sent + 1 and len(calls) == before
    finally:
        sender.close()
        pull.close(0)


def test_waits_shorter_than_a_wait_slice_are_counted_too():
    """A replay that takes one message every 0.1 s (a learner's pace) blocks each send for less
    than a wait slice (0.2 s): the sender still waited, most of the time, and must say so (CI saw
    an agent held back at every learner iteration report 0 s of waiting)."""
    addr = free_addr()
    # The buffer must be set before bind: libzmq copies a socket's options into its listener at
    # bind, so a RCVBUF set after it is ignored and the kernel's autotuned buffer (megabytes on
    # some machines) holds most of the 25 messages: CI counted 0.46 s of waiting that way.
    pull = make_socket(zmq.PULL, rcvhwm=1, sealed=True)
    pull.setsockopt(zmq.RCVBUF, 4 << 10)
    pull.bind(addr)
    done = threading.Event()

    def slow_replay() -> None:
        while not done.is_set():
            if pull.poll(50):
                pull.recv_multipart()
                time.sleep(0.1)

    sender = ExperienceSender(
        addr, flush_iteration=1, timeout=5.0, hwm=1, buffer_bytes=4 << 10, wait_hook=lambda w: True
    )
    reader = threading.Thread(target=slow_replay, daemon=True)
    try:
        time.sleep(0.3)  # connected
        reader.start()
        item = {"obs": np.zeros((25, 400), np.float32), "param_version": np.array(0, np.int64)}
        for _ in range(25):
            sender.send(item)
        assert sender.sent_items == 25 and sender.dropped_items == 0
        # The reader sleeps 0.1 s after each of the 25 messages; with a few messages in the
        # pipes, 20 or more sends each waited for one of those sleeps, however slow the machine
        # (a slower one only sleeps longer): at least 1 s of waiting to report. Counting only
        # waits of a whole slice reported 0.35 s here.
        assert sender.waited_seconds >= 1.0, sender.waited_seconds
        assert not sender.waiting
    finally:
        done.set()
        reader.join(5)
        sender.close()
        pull.close(0)
