"""Sealed messages: the bulk paths' answer to "peers that prove who they are", at a tenth of
CURVE's price.

The two paths whose bytes grow with the fleet, experience (every agent's stream into the replay
shards) and parameter fetches (one megabyte per agent per publication), move on plain sockets,
each message sealed with AES-256-GCM under a key derived from the experiment's secret key (the
CURVE keypair's secret half: no new key to distribute). The rest (sampling, publication, metrics,
logs) keeps CURVE (`comm.curve`): their rates are small or their peers few.

Why not CURVE there: libzmq encrypts each frame with XSalsa20-Poly1305 per connection, twice
copied; the parameter server encrypted the same megabyte once per agent, and each shard
decrypted every agent's stream: flat out, experience ran at 0.67 and the 1 MB broadcast at 0.62
of plain TCP (`bench/comm.py`, issue 25's goal 0.9). AES-GCM runs on the CPU's AES and carry-less
multiply units (measured here: 9-12 GB/s a core, against CURVE's ~0.8 GB/s), and a parameter
set is sealed once per publication by each shard, then handed to every agent as the same bytes.

What a seal proves and what it refuses:
- Who. A peer without the experiment's secret key cannot make a seal that opens: its message is
  a counted drop (`wire.Rejects`, reason `unsealed`), before it is decoded. It can still connect
  (the socket is plain): the NetworkPolicy keeps everyone but the experiment's pods away, and a
  connection that only sends refused messages costs the receiver one tag check per message.
- Integrity and order. Each frame is sealed with the header as associated data and its index in
  the nonce: a frame changed, dropped, added or moved breaks the seal.
- Freshness. A sender draws a random 128-bit id when it starts (and again after a fork) and
  numbers its messages; a receiver that asks for it (`fresh=True`: experience, fetch requests)
  takes each number of a sender once, so a captured message cannot be played again. Numbers may
  arrive out of order (threads of one process share its id and reach a receiver on sockets of
  their own): a window of the last `REPLAY_WINDOW` numbers below the highest seen remembers which
  came, as IPsec does; older ones are refused. Replies a client asked for are opened without
  it: a client may be handed the same sealed parameters twice (its own re-fetch), and only the
  server it dialled can answer it.
- Secrecy: AES-GCM encrypts, as CURVE did.

Keys. The experiment key is blake2b of the secret key (keyed, personalised); each sender's key is
blake2b of its id under it, so nonces (the message number and frame index) are never reused
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

import zmq.utils.z85
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from surreal_kube.comm import curve
from surreal_kube.comm.wire import Rejects, WireError

MAGIC = b"SKS1"
_HEADER = struct.Struct(">4s16sQI")
"""magic, sender id, message number, frame count."""
HEADER_BYTES = _HEADER.size
TAG_BYTES = 16
"""What sealing adds to each frame (the GCM tag); MAXMSGSIZE of a sealed socket adds it."""
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
        header = _HEADER.pack(MAGIC, self.sender, number, len(frames))
        prefix = number.to_bytes(8, "big")
        return [
            header,
            *(
                self.aead.encrypt(prefix + i.to_bytes(4, "big"), _bytes_like(f), header)
                for i, f in enumerate(frames)
            ),
        ]


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
        if not frames:
            raise WireError("unsealed", "an empty message")
        first = _bytes_like(frames[0])
        if first.nbytes != HEADER_BYTES:
            raise WireError("unsealed", "no seal header (a peer without the experiment's key?)")
        header = first.tobytes()
        magic, sender, number, count = _HEADER.unpack(header)
        if magic != MAGIC or count != len(frames) - 1:
            raise WireError("unsealed", "a seal header that does not match its frames")
        known = self._senders.get(sender)
        aead = known[0] if known is not None else _sender_key(self._master, sender)
        highest, seen = (0, 0) if known is None else known[1:]
        if self.fresh and number <= highest:
            behind = highest - number
            if behind >= REPLAY_WINDOW or seen >> behind & 1:
                raise WireError("replayed", f"message {number} of a sender: taken, or too old")
        prefix = number.to_bytes(8, "big")
        try:
            plain = [
                aead.decrypt(prefix + i.to_bytes(4, "big"), _bytes_like(f), header)
                for i, f in enumerate(frames[1:])
            ]
        except InvalidTag:
            raise WireError(
                "unsealed", "a seal that does not open with the experiment's key"
            ) from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise WireError("unsealed", f"{type(exc).__name__}") from exc
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
        return plain


def try_open(
    opener: Opener, frames: Sequence[Any], rejects: Rejects, where: str
) -> list[Any] | None:
    """`opener.open`, but a refused message is counted in `rejects` and gives None."""
    try:
        return opener.open(frames)
    except WireError as exc:
        rejects.add(exc, where)
        return None
