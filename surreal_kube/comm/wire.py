"""The wire format: a msgpack header plus one raw ZeroMQ frame per numpy array.

Why not pickle: a socket is an attack surface and a version boundary. A receiver must be able to
reject what it does not understand, so a message is plain data only:

    frame 0   msgpack {"v": PROTOCOL_VERSION, "k": kind, "m": meta, "a": [[name, dtype, shape]...]}
    frame 1+  the bytes of each array, in the order of "a", C-contiguous

Arrays are sent without copies (pyzmq keeps a reference until the I/O thread is done with the
buffer) and received without copies (`np.frombuffer` over the frame's memory). Only plain numeric
dtypes travel (bool, signed/unsigned ints, floats, complex); object, string, void and structured
dtypes are refused at both ends.

`decode` never trusts the header: version, types, names, dtypes, shapes and sizes are checked
against the frames before any array is built, and every failure is a `WireError` with a short
reason that receivers count in a `Rejects` tally instead of crashing.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from surreal_kube.errors import SurrealKubeError

PROTOCOL_VERSION = 1

MAX_HEADER_BYTES = 1 << 20
"""Headers carry names and small metadata only; anything larger is hostile or a bug."""
MAX_ARRAYS = 4096
MAX_NDIM = 32
DEFAULT_MAX_BYTES = 1 << 31
"""Default cap on the total payload of one message (2 GiB); receivers may lower it."""
MAX_ELEMENTS = DEFAULT_MAX_BYTES
"""Bound on every dimension and on the product of the non-zero ones. A shape like
`[0, 2**62, 2**62]` holds no bytes, so the size check passes, yet numpy refuses to build it
(`ValueError`, which took down every receiver): the bound is on the shape, zeros or not."""

ArrayDict = dict[str, np.ndarray]
"""As `surreal_kube.rl.interfaces.ArrayDict`, restated so that comm depends on nothing above."""

# Message kinds used across the package. A kind is a short string so that new ones can be added
# without a registry; receivers refuse kinds they do not expect.
EXPERIENCE = "exp"
SAMPLE = "sample"
BATCH = "batch"
PARAMS = "params"
FETCH = "fetch"
UNCHANGED = "unchanged"
NO_PARAMS = "none"
SCALARS = "scalars"
LOG = "log"
PRIORITIES = "priorities"

_ALLOWED_DTYPES: dict[str, np.dtype] = {}
for _t in (
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
):
    for _order in ("<", ">"):
        _dt = np.dtype(_t).newbyteorder(_order) if np.dtype(_t).itemsize > 1 else np.dtype(_t)
        _ALLOWED_DTYPES[_dt.str] = _dt


class CommError(SurrealKubeError):
    """A communication failure of the comm layer (socket, timeout, protocol)."""


class WireError(CommError):
    """A message that does not follow the wire format; `reason` is a short, countable tag."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass
class Message:
    """A decoded message: its kind, its metadata and its arrays (views over the received frames)."""

    kind: str
    meta: dict[str, Any] = field(default_factory=dict)
    arrays: ArrayDict = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Payload size of the arrays, for throughput metrics."""
        return sum(a.nbytes for a in self.arrays.values())


def _check_array(name: str, array: np.ndarray) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    if array.dtype.str not in _ALLOWED_DTYPES:
        raise WireError("bad-dtype", f"array {name!r} has dtype {array.dtype} that cannot travel")
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array


def encode(
    kind: str, meta: Mapping[str, Any] | None = None, arrays: Mapping[str, np.ndarray] | None = None
) -> list[Any]:
    """Frames for one message: the header, then each array's buffer (not copied).

    The returned list is meant for `socket.send_multipart(frames, copy=False)`; the arrays must not
    be modified until the send completes (pyzmq keeps them alive).
    """
    specs: list[list[Any]] = []
    buffers: list[Any] = []
    for name, value in (arrays or {}).items():
        array = _check_array(name, value)
        specs.append([name, array.dtype.str, list(array.shape)])
        # A 0-d or empty array has no usable buffer view in every numpy; send its bytes.
        buffers.append(array if array.ndim and array.size else array.tobytes())
    header = msgpack.packb(
        {"v": PROTOCOL_VERSION, "k": kind, "m": dict(meta or {}), "a": specs}, use_bin_type=True
    )
    return [header, *buffers]


def _buffer(frame: Any) -> memoryview:
    buf: memoryview | None = getattr(frame, "buffer", None)  # zmq.Frame
    if buf is not None:
        return buf
    return memoryview(frame)


def _no_ext(code: int, data: bytes) -> Any:
    raise WireError("bad-header", f"msgpack extension type {code} is not allowed")


def decode_header(frame: Any) -> dict[str, Any]:
    """Parse and check frame 0 only: cheap enough for proxies that route on the kind or meta."""
    try:
        raw = _buffer(frame)
    except TypeError as exc:
        raise WireError("bad-frame", str(exc)) from exc
    if raw.nbytes > MAX_HEADER_BYTES:
        raise WireError("oversized", f"header of {raw.nbytes} bytes")
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True, ext_hook=_no_ext)
    except WireError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise WireError("bad-header", f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(header, dict):
        raise WireError("bad-header", "header is not a map")
    version = header.get("v")
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise WireError("bad-version", f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
    if not isinstance(header.get("k"), str):
        raise WireError("bad-header", "kind is not a string")
    meta = header.get("m")
    if meta is None:
        meta = {}
    elif not isinstance(meta, dict):
        raise WireError("bad-header", "meta is not a map")
    header["m"] = meta
    specs = header.get("a", [])
    if not isinstance(specs, list):
        raise WireError("bad-header", "array list is not a list")
    if len(specs) > MAX_ARRAYS:
        raise WireError("oversized", f"{len(specs)} arrays")
    header["a"] = specs
    return header


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_NDIM:
        raise WireError("bad-shape", f"shape {str(value)[:80]}")
    elements = 1
    for dim in value:
        if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim <= MAX_ELEMENTS:
            raise WireError("bad-shape", f"shape {str(value)[:80]}")
        elements *= max(dim, 1)
        if elements > MAX_ELEMENTS:
            raise WireError("bad-shape", f"shape {str(value)[:80]} has too many elements")
    return tuple(value)


@dataclass(frozen=True)
class _Layout:
    """A checked header: kind, meta, and per array (name, dtype, shape, nbytes)."""

    kind: str
    meta: dict[str, Any]
    arrays: tuple[tuple[str, np.dtype, tuple[int, ...], int], ...]


def _layout(header: dict[str, Any]) -> _Layout:
    specs: list[tuple[str, np.dtype, tuple[int, ...], int]] = []
    names: set[str] = set()
    for spec in header["a"]:
        if not isinstance(spec, list) or len(spec) != 3:
            raise WireError("bad-header", "array spec is not [name, dtype, shape]")
        name, dtype_str, shape_raw = spec
        if not isinstance(name, str) or name in names:
            raise WireError("bad-header", "array name missing or repeated")
        names.add(name)
        dtype = _ALLOWED_DTYPES.get(dtype_str) if isinstance(dtype_str, str) else None
        if dtype is None:
            raise WireError("bad-dtype", f"dtype {str(dtype_str)[:40]!r}")
        shape = _shape(shape_raw)
        specs.append((name, dtype, shape, math.prod(shape) * dtype.itemsize))
    return _Layout(header["k"], header["m"], tuple(specs))


_CACHEABLE_HEADER = 2048
_CACHE_SIZE = 256
_cache: dict[bytes, _Layout] = {}


def _cached_layout(frame: Any) -> _Layout:
    """The checked layout of a header, memoised by its bytes.

    A stream from one sender repeats the same header (same kind, meta and shapes) message after
    message; parsing and checking it once saves most of the per-message decoding time. Only
    valid, small headers are kept, so hostile input cannot grow the cache or skip a check.
    """
    try:
        raw = _buffer(frame)
    except TypeError as exc:
        raise WireError("bad-frame", str(exc)) from exc
    key = raw.tobytes() if raw.nbytes <= _CACHEABLE_HEADER else None
    if key is not None:
        hit = _cache.get(key)
        if hit is not None:
            return hit
    layout = _layout(decode_header(raw))
    if key is not None:
        if len(_cache) >= _CACHE_SIZE:
            _cache.clear()
        _cache[key] = layout
    return layout


def decode(
    frames: Sequence[Any],
    *,
    expect: Iterable[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Message:
    """Rebuild a message from received frames without copying the array bytes.

    `expect`: the kinds this receiver accepts; anything else is a `WireError("bad-kind")`.
    `max_bytes`: the largest payload accepted. Arrays are writable views over the frames; `meta`
    is the receiver's own (shallow) copy. It returns or raises `WireError`, nothing else: an
    error the checks did not foresee is a `WireError("malformed")` too, so a receiver counts it
    instead of dying of it.
    """
    try:
        return _decode(frames, expect, max_bytes)
    except WireError:
        raise
    except Exception as exc:  # a check we missed must cost one message, not the receiver
        raise WireError("malformed", f"{type(exc).__name__}: {str(exc)[:200]}") from exc


def _decode(frames: Sequence[Any], expect: Iterable[str] | None, max_bytes: int) -> Message:
    if not frames:
        raise WireError("truncated", "no frames")
    layout = _cached_layout(frames[0])
    if expect is not None and layout.kind not in expect:
        raise WireError("bad-kind", f"unexpected message kind {layout.kind[:40]!r}")
    if len(layout.arrays) != len(frames) - 1:
        reason = "truncated" if len(layout.arrays) > len(frames) - 1 else "extra-frames"
        raise WireError(
            reason, f"header lists {len(layout.arrays)} arrays, got {len(frames) - 1} frames"
        )
    arrays: ArrayDict = {}
    total = 0
    for i, (name, dtype, shape, nbytes) in enumerate(layout.arrays, 1):
        try:
            buf = _buffer(frames[i])
        except TypeError as exc:
            raise WireError("bad-frame", str(exc)) from exc
        if buf.nbytes != nbytes:
            raise WireError(
                "bad-size",
                f"{name!r}: shape {shape} of {dtype} needs {nbytes} bytes, frame has {buf.nbytes}",
            )
        total += nbytes
        if total > max_bytes:
            raise WireError("oversized", f"payload above {max_bytes} bytes")
        arrays[name] = np.ndarray(shape, dtype, buf)
    return Message(layout.kind, dict(layout.meta), arrays)


class Rejects:
    """A tally of rejected messages by reason, logged at most once per `log_every` seconds.

    Receivers own one each and report `total` to tensorplex, so hostile or broken peers show up in
    metrics instead of in a crash.
    """

    def __init__(self, logger: logging.Logger | None = None, log_every: float = 10.0) -> None:
        self.counts: Counter[str] = Counter()
        self._logger = logger or logging.getLogger("surreal_kube.comm")
        self._log_every = log_every
        self._last_log = -math.inf

    @property
    def total(self) -> int:
        """Messages rejected so far."""
        return sum(self.counts.values())

    def add(self, error: WireError, where: str = "") -> None:
        """Count one rejected message (and maybe log it)."""
        self.counts[error.reason] += 1
        now = time.monotonic()
        if now - self._last_log >= self._log_every:
            self._last_log = now
            self._logger.warning(
                "dropped malformed message%s (%s); rejected so far: %s",
                f" on {where}" if where else "",
                error,
                dict(self.counts),
            )


def try_decode(
    frames: Sequence[Any],
    rejects: Rejects,
    *,
    expect: Iterable[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    where: str = "",
) -> Message | None:
    """`decode`, but a bad message is counted in `rejects` and gives None."""
    try:
        return decode(frames, expect=expect, max_bytes=max_bytes)
    except WireError as exc:
        rejects.add(exc, where)
        return None
