"""Sealed messages (`comm.seal`): what a seal proves, and what the sealed paths refuse."""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from surreal_kube.comm import curve, seal, wire
from surreal_kube.comm.experience import ExperienceReceiver, ExperienceSender
from surreal_kube.comm.sockets import bound_address, make_socket


@pytest.fixture
def keys() -> Iterator[curve.CurveKeys]:
    before = curve.installed()
    mine = curve.generate()
    curve.install(mine)
    try:
        yield mine
    finally:
        curve.install(before)


def _message(n: int = 3) -> list[bytes]:
    return wire.encode(wire.EXPERIENCE, {"n": n}, {"x": np.arange(n * 4, dtype=np.float32)})


def _plain(frames: list[object]) -> list[bytes]:
    return [bytes(memoryview(f)) for f in frames]  # type: ignore[arg-type]


def test_without_keys_messages_travel_as_they_are() -> None:
    before = curve.installed()
    curve.install(None)
    try:
        frames = _message()
        assert seal.seal(frames) == frames
        assert seal.Opener(fresh=True).open(frames) == frames
    finally:
        curve.install(before)


def test_a_sealed_message_opens_to_its_frames_and_hides_them(keys: curve.CurveKeys) -> None:
    frames = _plain(_message())
    sealed = seal.seal(frames)
    assert len(sealed) == 2  # the seal's header, and one ciphertext of every frame
    assert len(sealed[1]) == sum(map(len, frames)) + seal.TAG_BYTES
    assert not any(f in sealed[1] for f in frames)  # encrypted
    opened = seal.Opener(fresh=True).open(sealed)
    assert _plain(opened) == frames
    assert all(not memoryview(f).readonly for f in opened)  # writable, as received frames are
    again = seal.seal(frames)
    assert again[1] != sealed[1]  # a new number: never the same nonce twice


def test_another_experiments_key_and_no_key_are_refused(keys: curve.CurveKeys) -> None:
    opener = seal.Opener(fresh=True)
    frames = _message()
    with pytest.raises(wire.WireError, match="unsealed"):
        opener.open(frames)  # a peer without any key: plain frames
    curve.install(curve.generate())
    foreign = seal.seal(frames)
    curve.install(keys)
    with pytest.raises(wire.WireError, match="unsealed"):
        opener.open(foreign)


@pytest.mark.parametrize("change", ["flip", "cut", "add", "lengths", "count", "number"])
def test_a_changed_cut_or_extended_message_breaks_the_seal(
    keys: curve.CurveKeys, change: str
) -> None:
    header, blob = (bytes(f) for f in seal.seal(_plain(_message())))
    sealed = [header, blob]
    if change == "flip":
        sealed[1] = blob[:-40] + bytes([blob[-40] ^ 1]) + blob[-39:]
    elif change == "cut":
        sealed = [header]
    elif change == "add":
        sealed = [header, blob, blob]
    elif change == "lengths":  # frames cut elsewhere: 4 bytes moved from one frame to the next
        n = seal.HEADER_BYTES
        first, second = struct.unpack_from(">QQ", header, n)
        sealed[0] = header[:n] + struct.pack(">QQ", first - 4, second + 4)
    elif change == "count":  # a frame more announced, with its length
        sealed[0] = header[:28] + struct.pack(">I", 3) + header[32:] + struct.pack(">Q", 0)
    else:  # the message number (a replay's disguise)
        sealed[0] = header[:20] + struct.pack(">Q", 99) + header[28:]
    with pytest.raises(wire.WireError, match="unsealed"):
        seal.Opener(fresh=False).open(sealed)


def test_a_fresh_receiver_refuses_a_message_played_again(keys: curve.CurveKeys) -> None:
    sealed = seal.seal(_message())
    fresh, lenient = seal.Opener(fresh=True), seal.Opener(fresh=False)
    fresh.open(sealed)
    with pytest.raises(wire.WireError, match="replayed"):
        fresh.open(sealed)
    lenient.open(sealed)
    lenient.open(sealed)  # a client handed the same sealed parameters twice


def test_a_senders_messages_out_of_order_are_each_taken_once(
    keys: curve.CurveKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads of one process share its sender id and reach a receiver on sockets of their own
    (8 agent threads fetching, an agent's sender beside its parameter client): a message numbered
    below one already taken arrives later, and is still the sender's, once. Before, a receiver
    took numbers in increasing order only, and refused such a member's message as replayed."""
    monkeypatch.setattr(seal, "REPLAY_WINDOW", 8)
    sealed = [seal.seal(_message()) for _ in range(12)]
    opener = seal.Opener(fresh=True)
    for i in (3, 1, 2, 10):
        opener.open(sealed[i])
    for i in (1, 3, 10):
        with pytest.raises(wire.WireError, match="replayed"):
            opener.open(sealed[i])
    opener.open(sealed[5])  # within the window below 10, not yet taken
    with pytest.raises(wire.WireError, match="replayed"):
        opener.open(sealed[0])  # 10 below the highest: older than the window remembers


def test_a_forked_process_seals_as_a_sender_of_its_own(
    keys: curve.CurveKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = seal.seal(_message())[0]
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as in a child after fork
    child = seal.seal(_message())[0]
    sender = slice(4, 20)
    assert parent[sender] != child[sender]  # else both would number from where they forked


def test_strangers_take_no_place_among_a_receivers_senders(
    keys: curve.CurveKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table of senders is bounded, and only a seal that opened takes a place in it: a
    stranger's flood of made-up sender ids cannot push the members' numbers out (and with
    them, the refusal of their replayed messages)."""
    monkeypatch.setattr(seal, "MAX_SENDERS", 2)
    opener = seal.Opener(fresh=True)
    member = seal.seal(_message())
    opener.open(member)
    for _ in range(10):
        fake = [seal._HEADER.pack(seal.MAGIC, os.urandom(16), 1, 1) + bytes(8), os.urandom(16)]
        with pytest.raises(wire.WireError, match="unsealed"):
            opener.open(fake)
    with pytest.raises(wire.WireError, match="replayed"):
        opener.open(member)


def _recv(receiver: ExperienceReceiver) -> tuple[wire.ArrayDict, int] | None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = receiver.recv(timeout_ms=100)
        if got is not None:
            return got
    return None


def test_a_collector_counts_strangers_and_replays_and_takes_its_members(
    keys: curve.CurveKeys,
) -> None:
    """The experience path with the experiment's keys: the socket is plain (a peer may
    connect), a keyless peer's well-formed experience is a counted drop, so is a member's
    message played again, and a member's experience arrives."""
    receiver = ExperienceReceiver("tcp://127.0.0.1:*", hwm=8)
    stranger = make_socket(zmq.PUSH, connect=receiver.addr, sealed=True)
    sender = ExperienceSender(receiver.addr, source="agent-0")
    try:
        items = {"x": np.ones((2, 3), np.float32)}
        stranger.send_multipart(wire.encode(wire.EXPERIENCE, {"n": 2}, items))
        # sealed by this process, as the sender's messages are: one sender, numbered in order
        captured = seal.seal(wire.encode(wire.EXPERIENCE, {"n": 2}, items))
        stranger.send_multipart(captured)
        stranger.send_multipart(captured)  # played again
        first = _recv(receiver)
        assert first is not None and first[1] == 2
        deadline = time.monotonic() + 10
        while receiver.rejects.total < 2 and time.monotonic() < deadline:
            assert receiver.recv(timeout_ms=100) is None  # the copy is refused, not taken
        assert receiver.rejects.counts == {"unsealed": 1, "replayed": 1}
        assert sender.send_stacked({"x": np.full((4, 3), 7, np.float32)}, 4)
        second = _recv(receiver)
        assert second is not None and second[1] == 4 and np.all(second[0]["x"] == 7)
    finally:
        stranger.close(0)
        sender.close()
        receiver.close()


def test_a_sealed_socket_takes_the_largest_frame_its_owner_accepts(keys: curve.CurveKeys) -> None:
    """MAXMSGSIZE counts the tag: a receiver that takes N bytes in plain text takes N sealed."""
    limit = wire.MAX_HEADER_BYTES + 4096
    receiver = ExperienceReceiver("tcp://127.0.0.1:*", max_bytes=limit)
    sender = ExperienceSender(receiver.addr)
    try:
        assert sender.send_stacked({"x": np.zeros((1, limit), np.uint8)}, 1)
        got = _recv(receiver)
        assert got is not None and got[1] == 1 and got[0]["x"].nbytes == limit
    finally:
        sender.close()
        receiver.close()


def _serve_once(server: zmq.Socket[bytes], frames: list[object]) -> threading.Thread:
    """Answer the next request on `server` with `frames`, in a thread."""

    def serve() -> None:
        server.recv_multipart()
        server.send_multipart(frames)

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


def test_with_keys_a_client_takes_the_seal_for_the_hash_and_refuses_a_strangers_set(
    keys: curve.CurveKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With keys, the seal that opened is the proof (a tag under the experiment's key over every
    byte, made by the learner that hashed them): the client no longer hashes the megabytes
    again, a millisecond per megabyte and agent that held the 1 MB broadcast to 0.85 of plain
    TCP. A set not sealed, or sealed with another experiment's key, is refused whatever hash it
    carries."""
    from surreal_kube.comm import parameters

    params = {"w": np.arange(4, dtype=np.float32)}
    meta = {"iteration": 7, "hash": parameters.content_hash(params), "time": 0.0}
    message = wire.encode(wire.PARAMS, meta, params)
    curve.install(curve.generate())
    foreign = seal.seal(message)
    curve.install(keys)

    def no_hashing(_: object) -> str:
        raise AssertionError("the client hashed a sealed set again")

    monkeypatch.setattr(parameters, "content_hash", no_hashing)
    server = make_socket(zmq.REP, bind="tcp://127.0.0.1:*", sealed=True)
    client = parameters.ParameterClient(bound_address(server), timeout=10.0)
    try:
        for reply in (message, foreign):
            thread = _serve_once(server, reply)
            assert client.fetch() is None and client.last_outcome == "refused"
            thread.join(10)
        thread = _serve_once(server, seal.seal(message))
        got = client.fetch()
        thread.join(10)
        assert got is not None and client.info is not None and client.info.iteration == 7
        assert client.rejects.counts == {"unsealed": 2}
    finally:
        client.close()
        server.close(0)


def test_a_message_of_one_array_frame_seals(keys: curve.CurveKeys) -> None:
    """The cipher refuses a multi-dimensional array as its input: a lone frame is joined."""
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    opened = seal.Opener(fresh=True).open(seal.seal([array]))
    assert bytes(opened[0]) == array.tobytes()
