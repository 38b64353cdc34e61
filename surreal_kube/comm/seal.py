"""Sealed messages: the bulk paths' answer to "peers that prove who they are", at a fraction of
CURVE's price.

The paths whose bytes grow with the fleet, experience (every agent's stream into the replay
shards) and parameters (the learner's publication to the parameter-server shards, one megabyte
per agent per publication fetched from them), move on plain sockets, each message sealed with
AES-256-GCM under a key derived from the experiment's secret key (the CURVE keypair's secret
half: no new key to distribute). The rest (sampling, metrics, logs) keeps CURVE (`comm.curve`):
their rates are small, or their heavy hops inside one pod and plain.

Why not CURVE there: libzmq encrypts each frame with XSalsa20-Poly1305 per connection, twice
copied; the parameter server encrypted the same megabyte once per agent, and each shard
decrypted every agent's stream: flat out, experience ran at 0.67 and the 1 MB broadcast at 0.62
of plain TCP (`bench/comm.py`, issue 25's goal 0.9). AES-GCM runs on the CPU's AES and carry-less
multiply units (measured here: 9-12 GB/s a core, against CURVE's ~0.8 GB/s). A parameter set is
sealed once, by the learner: shards and the proxy hand the same bytes to every agent. A message
is one ciphertext, whatever its frames: one cipher call and one tag, where a call per frame cost
twice the time on messages of a few frames.

What a seal proves and what it refuses:
- Who. A peer without the experiment's secret key cannot make a seal that opens: its message is
  a counted drop (`wire.Rejects`, reason `unsealed`), before it is decoded. It can still connect
  (the socket is plain): the NetworkPolicy keeps everyone but the experiment's pods away, and a
  connection that only sends refused messages costs the receiver one tag check per message.
- Integrity. The frames' lengths are in the seal's header, which is the ciphertext's associated
  data: a byte changed, a frame cut elsewhere, dropped or added breaks the seal. So a parameter
  client with keys takes the learner's seal for the content hash it would otherwise compute
  again (`comm.parameters`: a millisecond per megabyte and agent).
- Freshness. A sender draws a random 128-bit id when it starts (and again after a fork) and
  numbers its messages; a receiver that asks for it (`fresh=True`: experience, fetch requests)
  takes each number of a sender once, so a captured message cannot be played again. Numbers may
  arrive out of order (threads of one process share its id and reach a receiver on sockets of
  their own): a window of the last `REPLAY_WINDOW` numbers below the highest seen remembers which
  came, as IPsec does; older ones are refused. Replies a client asked for, and publications,
  are opened without it: the same sealed parameters come again (a republish, a re-fetch), and
  only the server a client dialled or the learner a shard subscribed to can send them.
- Secrecy: AES-GCM encrypts, as CURVE did: a keyless subscriber to the learner's publication
  gets ciphertext (and at most one resend each `RESEND_SECONDS`, `comm.parameters`).

Keys. The experiment key is blake2b of the secret key (keyed, personalised); each sender's key is
blake2b of its id under it, so nonces (the message number) are never reused
under one key, whatever the number of senders and restarts.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import zmq.utils.z85
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from surreal_kube.comm import curve, wire
from surreal_kube.comm.wire import Rejects, WireError

MAGIC = b"SKS2"
_HEADER = struct.Struct(">4s16sQI")
"""magic, sender id, message number, frame count; then each frame's length (`_LENGTH`)."""
_LENGTH = struct.Struct(">Q")
HEADER_BYTES = _HEADER.size
MAX_FRAMES = wire.MAX_ARRAYS + 1
"""A message's frames: the wire header and one per array."""
TAG_BYTES = 16
"""What sealing adds to a message's bytes (the GCM tag); MAXMSGSIZE of a sealed socket adds it."""
REPLAY_WINDOW = 1024
"""How far below a sender's highest number a message may still arrive (once) at a fresh receiver."""
MAX_SENDERS = 65_536
"""Senders a receiver keeps keys and message numbers for (the oldest are forgotten beyond)."""
_PERSON = b"surreal-seal-v1"


def _experiment_key(keys: curve.CurveKeys) -> bytes:
    secret = zmq.utils.z85.decode(keys.secret)
    return hashlib.blake2b(b"experiment", key=secret, digest_size=32, person=_PERSON).digest()


def _sender_key(master: bytes, sender: bytes) -> AESGCM:
    return AESGCM(hashlib.blake2b(sender, key=master, digest_size=32, person=_PERSON).digest())


class _Sealer:
    """This process's sending identity: an id, its key and a message counter."""

    def __init__(self, keys: curve.CurveKeys) -> None:
        self.keys = keys
        self.pid = os.getpid()
        self.sender = os.urandom(16)
        self.aead = _sender_key(_experiment_key(keys), self.sender)
        self._numbers = itertools.count(1)

    def seal(self, frames: Sequence[Any]) -> list[Any]:
        number = next(self._numbers)  # atomic under the GIL: threads never share a number
        # frames are bytes, C-contiguous arrays (`wire.encode`) or zmq.Frames: all bytes-like
        parts = [getattr(f, "buffer", f) for f in frames]
        lengths = [p.nbytes if hasattr(p, "nbytes") else len(p) for p in parts]
        header = struct.pack(
            f">4s16sQI{len(parts)}Q", MAGIC, self.sender, number, len(parts), *lengths
        )
        # one ciphertext for the message: one cipher call and one tag, where a call per frame
        # cost twice the time on messages of a few frames (bench/comm.py's experience rows)
        # (the cipher takes a flat buffer: a lone array frame is joined too)
        blob = parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)
        return [header, self.aead.encrypt(_nonce(number), blob, header)]


def _nonce(number: int) -> bytes:
    return number.to_bytes(12, "big")


_sealer: _Sealer | None = None
_lock = threading.Lock()


def active() -> bool:
    """Whether messages on the sealed paths are sealed: the experiment's keys are installed."""
    return curve.installed() is not None


def _current_sealer() -> _Sealer | None:
    global _sealer
    keys = curve.installed()
    if keys is None:
        return None
    sealer = _sealer
    if sealer is None or sealer.keys is not keys or sealer.pid != os.getpid():
        with _lock:
            sealer = _sealer
            if sealer is None or sealer.keys is not keys or sealer.pid != os.getpid():
                sealer = _sealer = _Sealer(keys)  # a fork draws its own id
    return sealer


def seal(frames: Sequence[Any]) -> list[Any]:
    """`frames` sealed by this process (as they are when no keys are installed)."""
    sealer = _current_sealer()
    return list(frames) if sealer is None else sealer.seal(frames)


def _bytes_like(frame: Any) -> memoryview:
    """A frame's bytes as the cipher takes them: flat, unsigned bytes (arrays are C-contiguous,
    `wire.encode` sees to it)."""
    buf = getattr(frame, "buffer", None)  # zmq.Frame
    view = memoryview(frame if buf is None else buf)
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


class Opener:
    """A receiver's side: opens sealed messages, refusing strangers' and replayed ones.

    One per receiving socket. `fresh`: take each number of a sender at most once (a receiver
    of messages that strangers could capture and play again)."""

    def __init__(self, *, fresh: bool) -> None:
        self.fresh = fresh
        self._keys: curve.CurveKeys | None = None
        self._master = b""
        self._senders: OrderedDict[bytes, tuple[AESGCM, int, int]] = OrderedDict()
        """sender id -> (its key, the highest number taken, a bit per number of the window
        below it: bit i set when number highest - i was taken)."""

    def open(self, frames: Sequence[Any]) -> list[Any]:
        """The plain frames of a sealed message (`frames` as they are when no keys are
        installed); WireError("unsealed" or "replayed") for anything else."""
        keys = curve.installed()
        if keys is None:
            return list(frames)
        if keys is not self._keys:
            self._keys, self._master = keys, _experiment_key(keys)
            self._senders.clear()
        if len(frames) != 2:
            raise WireError("unsealed", "not a seal header and one sealed frame")
        first = _bytes_like(frames[0])
        if not HEADER_BYTES <= first.nbytes <= HEADER_BYTES + MAX_FRAMES * _LENGTH.size:
            raise WireError("unsealed", "no seal header (a peer without the experiment's key?)")
        header = first.tobytes()
        magic, sender, number, count = _HEADER.unpack_from(header)
        if magic != MAGIC or first.nbytes != HEADER_BYTES + count * _LENGTH.size:
            raise WireError("unsealed", "a seal header that does not match its frames")
        known = self._senders.get(sender)
        aead = known[0] if known is not None else _sender_key(self._master, sender)
        highest, seen = (0, 0) if known is None else known[1:]
        if self.fresh and number <= highest:
            behind = highest - number
            if behind >= REPLAY_WINDOW or seen >> behind & 1:
                raise WireError("replayed", f"message {number} of a sender: taken, or too old")
        lengths = struct.unpack_from(f">{count}Q", header, HEADER_BYTES)
        blob = _bytes_like(frames[1])
        if sum(lengths) + TAG_BYTES != blob.nbytes:
            raise WireError("unsealed", "frame lengths that do not add up to the sealed frame")
        # writable, as received frames are; numpy's allocator, not zero-filled like a bytearray
        plain = np.empty(blob.nbytes - TAG_BYTES, np.uint8).data
        try:
            aead.decrypt_into(_nonce(number), blob, header, plain)
        except InvalidTag:
            raise WireError(
                "unsealed", "a seal that does not open with the experiment's key"
            ) from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise WireError("unsealed", f"{type(exc).__name__}") from exc
        opened, offset = [], 0
        for n in lengths:
            opened.append(plain[offset : offset + n])
            offset += n
        # only a sender whose seal opened takes a place: strangers cannot evict members
        if number > highest:
            seen = (seen << (number - highest) | 1) & ((1 << REPLAY_WINDOW) - 1)
            highest = number
        else:
            seen |= 1 << (highest - number)
        self._senders[sender] = (aead, highest, seen)
        self._senders.move_to_end(sender)
        while len(self._senders) > MAX_SENDERS:
            self._senders.popitem(last=False)
        return opened


def try_open(
    opener: Opener, frames: Sequence[Any], rejects: Rejects, where: str
) -> list[Any] | None:
    """`opener.open`, but a refused message is counted in `rejects` and gives None."""
    try:
        return opener.open(frames)
    except WireError as exc:
        rejects.add(exc, where)
        return None
