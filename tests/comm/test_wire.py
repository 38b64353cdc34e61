"""The wire format: round trips without copies, and strict, crash-free rejection of bad input."""

from __future__ import annotations

import math
import pickle

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from surreal_kube.comm import wire
from surreal_kube.comm.sockets import bind_any_port, make_socket

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
]


@given(
    arrays=st.dictionaries(
        st.text(min_size=1, max_size=12),
        st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 5), max_size=3)),
        max_size=5,
    ),
    meta=st.dictionaries(
        st.text(max_size=8), st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=8), st.none())
    ),
)
@settings(max_examples=80, deadline=None)
def test_round_trip_preserves_dtype_shape_values_and_meta(arrays, meta):
    rng = np.random.default_rng(0)
    sent = {
        name: (rng.standard_normal(int(np.prod(shape))) * 50).astype(dtype).reshape(shape)
        for name, (dtype, shape) in arrays.items()
    }
    msg = wire.decode(wire.encode("exp", meta, sent))
    assert msg.kind == "exp"
    assert msg.meta == meta
    assert list(msg.arrays) == list(sent)
    for name, array in sent.items():
        got = msg.arrays[name]
        assert got.dtype == array.dtype and got.shape == array.shape
        np.testing.assert_array_equal(got, array)


def test_receive_is_zero_copy_and_send_keeps_array_buffer():
    """Received arrays are views over the ZeroMQ frames; the sender hands its buffer over as is."""
    pull, addr = bind_any_port(zmq.PULL)
    push = make_socket(zmq.PUSH, connect=addr)
    try:
        obs = np.arange(256 * 27, dtype=np.float32).reshape(256, 27)
        frames = wire.encode("exp", {"n": 256}, {"obs": obs})
        assert frames[1] is obs  # not copied into bytes
        push.send_multipart(frames, copy=False)
        received = pull.recv_multipart(copy=False)
        msg = wire.decode(received)
        got = msg.arrays["obs"]
        assert np.shares_memory(got, np.frombuffer(received[1].buffer, dtype=np.uint8))
        np.testing.assert_array_equal(got, obs)
    finally:
        push.close(0)
        pull.close(0)


def test_non_contiguous_array_is_sent_correctly():
    base = np.arange(40, dtype=np.int32).reshape(8, 5)
    msg = wire.decode(wire.encode("exp", {}, {"t": base.T}))
    np.testing.assert_array_equal(msg.arrays["t"], base.T)


@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.array([object(), 1], dtype=object)])
def test_encode_refuses_dtypes_that_cannot_travel(bad):
    with pytest.raises(wire.WireError) as err:
        wire.encode("exp", {}, {"x": bad})
    assert err.value.reason == "bad-dtype"


def _header(**fields) -> bytes:
    base = {"v": wire.PROTOCOL_VERSION, "k": "exp", "m": {}, "a": []}
    base.update(fields)
    return msgpack.packb(base)


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([], "truncated"),
        ([b"\xc1"], "bad-header"),  # 0xc1 is never valid msgpack
        ([msgpack.packb([1, 2])], "bad-header"),
        ([_header(v=99)], "bad-version"),
        ([_header(v=True)], "bad-version"),
        ([_header(k=5)], "bad-header"),
        ([_header(m=[1])], "bad-header"),
        ([_header(a=[["x", "<f4", [2]]])], "truncated"),
        ([_header(), b"1234"], "extra-frames"),
        ([_header(a=[["x", "<f4", [2]]]), b"1234"], "bad-size"),
        ([_header(a=[["x", "|O", [1]]]), b"12345678"], "bad-dtype"),
        ([_header(a=[["x", "V8", [1]]]), b"12345678"], "bad-dtype"),
        ([_header(a=[["x", "<f4", [-1]]]), b""], "bad-shape"),
        ([_header(a=[["x", "<f4", [2**62, 2**62]]]), b""], "bad-shape"),
        ([_header(a=[["x", "<f4", "2"]]), b"1234"], "bad-shape"),
        ([_header(a=[["x", "<f4", [1]], ["x", "<f4", [1]]]), b"1234", b"1234"], "bad-header"),
        ([_header(a=[["x", "<f4"]]), b"1234"], "bad-header"),
        ([_header(a=[[1, "<f4", [1]]]), b"1234"], "bad-header"),
        ([msgpack.packb({"v": 1, "k": "x", "m": msgpack.ExtType(1, b"x"), "a": []})], "bad-header"),
        ([pickle.dumps({"v": 1})], "bad-header"),
        ([b"\x00" * (wire.MAX_HEADER_BYTES + 1)], "oversized"),
    ],
)
def test_hostile_messages_are_rejected_with_a_reason(frames, reason):
    with pytest.raises(wire.WireError) as err:
        wire.decode(frames)
    assert err.value.reason == reason


def test_oversized_payload_and_unexpected_kind_are_rejected():
    frames = wire.encode("exp", {}, {"x": np.zeros(1000, np.float32)})
    with pytest.raises(wire.WireError, match="oversized"):
        wire.decode(frames, max_bytes=100)
    with pytest.raises(wire.WireError, match="bad-kind"):
        wire.decode(frames, expect=("params",))


def test_pickle_payload_never_executes(tmp_path):
    """A pickle bomb in any frame is data, never code."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    bomb = pickle.dumps(Evil())
    rejects = wire.Rejects()
    assert wire.try_decode([bomb], rejects) is None
    msg = wire.try_decode([_header(a=[["x", "|u1", [len(bomb)]]]), bomb], rejects)
    assert msg is not None and msg.arrays["x"].tobytes() == bomb
    assert not marker.exists()
    assert rejects.total == 1


@given(st.lists(st.binary(max_size=64), min_size=0, max_size=5))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_random_frames_never_crash_the_decoder(frames):
    rejects = wire.Rejects()
    msg = wire.try_decode(frames, rejects)
    assert (msg is None) == (rejects.total == 1)


@given(
    data=st.data(),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
)
@settings(max_examples=300, deadline=None)
def test_fuzz_mutated_valid_messages_decode_consistently_or_are_counted(data, flips):
    """Byte flips and truncations of a real message either decode to consistent arrays or are
    rejected and counted; nothing else (no exception, no mis-sized array)."""
    frames = [
        bytearray(f if isinstance(f, bytes) else np.asarray(f).tobytes())
        for f in wire.encode(
            "exp", {"n": 3}, {"obs": np.ones((3, 4), np.float32), "done": np.zeros(3, bool)}
        )
    ]
    for pos, value in flips:
        idx = data.draw(st.integers(0, len(frames) - 1))
        if frames[idx]:
            frames[idx][pos % len(frames[idx])] = value
    if data.draw(st.booleans()):
        idx = data.draw(st.integers(0, len(frames) - 1))
        frames[idx] = frames[idx][: data.draw(st.integers(0, len(frames[idx])))]
    rejects = wire.Rejects()
    msg = wire.try_decode([bytes(f) for f in frames], rejects)
    if msg is None:
        assert rejects.total == 1 and sum(rejects.counts.values()) == 1
    else:
        for array in msg.arrays.values():
            assert array.nbytes == int(np.prod(array.shape)) * array.dtype.itemsize


def test_receiver_socket_survives_hostile_frames():
    """Over a real socket: garbage is counted, and the next valid message still gets through."""
    pull, addr = bind_any_port(zmq.PULL)
    push = make_socket(zmq.PUSH, connect=addr)
    rejects = wire.Rejects()
    try:
        hostile = [[b"\xff\xff"], [_header(v=0)], [_header(a=[["x", "<f8", [3]]]), b"short"]]
        for frames in hostile:
            push.send_multipart(frames)
        push.send_multipart(wire.encode("exp", {"n": 1}, {"x": np.array([7.0])}), copy=False)
        got = []
        for _ in range(4):
            assert pull.poll(2000)
            msg = wire.try_decode(pull.recv_multipart(copy=False), rejects)
            if msg is not None:
                got.append(msg)
        assert rejects.total == 3
        assert len(got) == 1 and got[0].arrays["x"][0] == 7.0
    finally:
        push.close(0)
        pull.close(0)


def test_header_without_meta_or_arrays_is_an_empty_message():
    """Found by the fuzzer: a header lacking "m" must not crash the decoder."""
    msg = wire.decode([msgpack.packb({"v": wire.PROTOCOL_VERSION, "k": "exp"})])
    assert msg.meta == {} and msg.arrays == {}


@pytest.mark.parametrize(
    "shape",
    [
        [0, 2**62, 2**62],  # zero elements, but numpy refuses the shape: ValueError before
        [2**62, 0],
        [0, 2**40],
        [0] + [2**20] * 8,
        [2**33],
    ],
)
def test_a_zero_sized_dimension_beside_huge_ones_is_a_wire_error(shape):
    """The size check passed (0 bytes, empty frame) and numpy raised ValueError: receivers died."""
    frames = [_header(a=[["x", "<f4", shape]]), b""]
    with pytest.raises(wire.WireError) as err:
        wire.decode(frames)
    assert err.value.reason == "bad-shape"
    rejects = wire.Rejects()
    assert wire.try_decode(frames, rejects) is None
    assert rejects.counts["bad-shape"] == 1


def test_a_zero_sized_array_of_sane_shape_still_travels():
    msg = wire.decode(wire.encode("exp", {}, {"x": np.zeros((0, 3, 4), np.float32)}))
    assert msg.arrays["x"].shape == (0, 3, 4)


_INTS = st.integers(-(2**63), 2**63 - 1)  # what msgpack can carry
_DIMS = st.one_of(
    st.integers(0, 4),
    st.integers(0, 2**64 - 1),
    st.sampled_from([0, 1, 2**31, 2**32, 2**62, 2**63, 2**64 - 1]),
)
_SPECS = st.lists(
    st.tuples(
        st.one_of(st.text(max_size=4), _INTS, st.none()),
        st.one_of(
            st.sampled_from(["<f4", "|u1", "<i8", "|b1", "<c16", "|O", "S3", "<M8"]),
            st.text(max_size=4),
        ),
        st.one_of(st.lists(_DIMS, max_size=wire.MAX_NDIM + 2), _INTS, st.text(max_size=3)),
    ).map(list),
    max_size=4,
)


def _fitting_payload(spec: list, data: st.DataObject | None) -> bytes:
    """Bytes of the size the spec asks for, where that can be known and is small."""
    _, dtype, shape = spec
    size = -1
    if isinstance(shape, list) and dtype in ("<f4", "|u1", "<i8", "|b1", "<c16"):
        size = math.prod(shape) * np.dtype(dtype).itemsize
    if 0 <= size <= 256 and (data is None or data.draw(st.booleans())):
        return bytes(size)
    return b"" if data is None else data.draw(st.binary(max_size=48))


@given(
    data=st.data(),
    specs=_SPECS,
    kind=st.one_of(st.just("exp"), st.text(max_size=3), _INTS),
    meta=st.one_of(st.none(), st.dictionaries(st.text(max_size=3), _INTS, max_size=3), _INTS),
    version=st.sampled_from([wire.PROTOCOL_VERSION, wire.PROTOCOL_VERSION, 0, None]),
)
@example(  # the crash of the review, kept as a fixed case
    data=None, specs=[["x", "<f4", [0, 2**62, 2**62]]], kind="exp", meta={}, version=1
)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decode_of_any_header_and_frames_returns_or_raises_wire_error(
    data, specs, kind, meta, version
):
    """Random headers (shapes with huge and zero dimensions, odd dtypes and names) and frames,
    mostly one per array and often of the size asked for: `decode` returns a consistent message
    or raises WireError, nothing else."""
    header = msgpack.packb({"v": version, "k": kind, "m": meta, "a": specs})
    payloads = [_fitting_payload(spec, data) for spec in specs]
    if data is not None and data.draw(st.integers(0, 4)) == 0:
        payloads.append(data.draw(st.binary(max_size=8)))
    try:
        msg = wire.decode([header, *payloads])
    except wire.WireError:
        return
    for array in msg.arrays.values():
        assert array.nbytes == math.prod(array.shape) * array.dtype.itemsize
