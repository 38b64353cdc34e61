"""Peers that prove who they are: ZeroMQ CURVE with one keypair per experiment.

Without it, any process that can reach an endpoint (every pod of the cluster; locally, every user
of the machine, had the endpoints been TCP ports) can end a run, serve forged parameters or inject
experience with one message. A local run's endpoints are Unix sockets in a folder only its user
can enter (`launch/local/sockets.py`): it writes no key file, and its sockets are plain.
With it, every socket of a role is a CURVE socket: the side that binds is a CURVE server, the
side that connects a CURVE client, and a peer that cannot prove it holds the experiment's secret
key is refused during the handshake, before any message of it reaches our code.

The keys. One keypair per experiment, shared by all of its processes: every server uses it as
its own, every client presents it and expects it from the server. Per-process keypairs would
add nothing against the threat we face (a peer from *outside* the experiment): the processes of
one experiment trust each other anyway, and each would need the others' public keys, i.e. one
more file to distribute per pod. A stolen secret key is a stolen experiment either way.

The allowlist. CURVE alone authenticates the *server* to the client; a CURVE server accepts any
client that knows the server's public key, with a keypair of its own. So each server socket
also consults a ZAP handler (one per ZeroMQ context, `_ZapHandler`) that accepts exactly the
experiment's public key as a client key: a stranger must hold the secret key itself, not
merely know the public one. The handler runs once per connection handshake, never per message,
so it costs nothing on the data path.

Where keys come from: a file (JSON `{"public": z85, "secret": z85}`, `launch/keys.py`), mounted
read-only from a Secret on Kubernetes (or written 0600 into an experiment folder by the runtime
tests' harness and the benchmarks, which talk TCP as pods do). Never from an environment variable or
a URL (both leak into process listings, `kubectl describe` and logs), and never logged: `CurveKeys`
hides its secret in its repr. A process that installed no keys (`install(None)`, the default) makes
plain sockets, as before: tests and tools that talk to no experiment need no keys.

Hops inside one pod stay plain. An endpoint whose every peer shares its binder's pod (a shard
behind its service's proxy: `ps-backend`, `replay-sampler-backend`; `experiment.topology` names
them per process) binds on the pod's loopback, which only the pod's own containers reach: a
stranger is refused by the network namespace, before any handshake, so CURVE there would only
encrypt frames between processes that share everything else. The role declares such addresses
(`pod_private`) and their sockets are plain. They carry the heaviest frames (every fetch's
parameters, every sampled batch, once more): measured in `bench/comm.py`'s CURVE rows.

MAXMSGSIZE: libzmq checks it against the encrypted frame, 33 bytes longer than the plain one
(`FRAME_OVERHEAD`), so `max_msg_bytes` adds them: a role accepts encrypted exactly what it
accepted in plain text.

The bulk paths are sealed instead. CURVE encrypts every frame per connection (XSalsa20-Poly1305
in libzmq, with two copies): the experience path ran at 0.67 and the 1 MB broadcast to 8 agents
at 0.62 of plain TCP (`bench/comm.py`), the parameter server encrypting one megabyte per agent.
The sockets of those paths (`make_socket(sealed=True)`: the collectors and their senders, the
learner's publication and the shards' subscriptions, the parameter server's service and its
clients) are plain, and every message on them is sealed with the same experiment's key
(`comm.seal`); the installed keys switch both on together.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
import zmq.utils.z85

KEY_FILE = "curve.key"
"""The key file's name in an experiment folder (locally) or in the Secret's mount (Kubernetes)."""
KEYS_PATH_VAR = "SURREAL_CURVE_KEYS"
"""Environment variable with the key file's *path* (never the key): set in Kubernetes pods."""
ZAP_DOMAIN = b"surreal"
FRAME_OVERHEAD = 33
"""Bytes a CURVE MESSAGE command adds to a frame (name 8, nonce 8, MAC 16, flags 1: libzmq 4.3)."""

_log = logging.getLogger(__name__)


class CurveKeyError(ValueError):
    """A key file that is missing, malformed, readable by others, or whose halves do not match."""


@dataclass(frozen=True)
class CurveKeys:
    """An experiment's keypair, Z85-encoded (40 bytes each, as libzmq takes them)."""

    public: bytes
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        for name, key in (("public", self.public), ("secret", self.secret)):
            if not isinstance(key, bytes) or len(key) != 40:
                raise CurveKeyError(f"the {name} key must be 40 Z85 bytes")
        try:
            derived = zmq.curve_public(self.secret)
        except (ValueError, zmq.ZMQError) as exc:
            raise CurveKeyError("the secret key is not valid Z85") from exc
        if derived != self.public:
            raise CurveKeyError("the public key does not belong to the secret key")


def generate() -> CurveKeys:
    """A fresh keypair (libzmq's CSPRNG)."""
    public, secret = zmq.curve_keypair()
    return CurveKeys(public, secret)


def dumps(keys: CurveKeys) -> str:
    """The key file's content."""
    return json.dumps({"public": keys.public.decode(), "secret": keys.secret.decode()}) + "\n"


def load_key_file(path: str | Path, *, private: bool = True) -> CurveKeys:
    """The keys in `path`. With `private` (the local backend's files), a file that other users
    may read is refused: its secret is no longer the experiment's alone. (A Kubernetes Secret
    mount is 0440/0444 by kubelet convention inside a pod nobody else enters: not checked.)"""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        doc = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise CurveKeyError(f"key file {p} does not exist") from exc
    except (OSError, ValueError) as exc:
        raise CurveKeyError(f"key file {p} cannot be read as JSON: {type(exc).__name__}") from exc
    if private and mode & 0o077:
        raise CurveKeyError(f"key file {p} is open to other users (chmod 600 it)")
    if not isinstance(doc, dict) or not all(
        isinstance(doc.get(k), str) for k in ("public", "secret")
    ):
        raise CurveKeyError(f"key file {p} must hold 'public' and 'secret' strings")
    try:
        return CurveKeys(doc["public"].encode("ascii"), doc["secret"].encode("ascii"))
    except (UnicodeEncodeError, CurveKeyError) as exc:
        raise CurveKeyError(f"key file {p}: {exc}") from None


_installed: CurveKeys | None = None
_pod_private: set[str] = set()
_lock = threading.Lock()
LOOPBACK = ("tcp://127.0.0.1:", "tcp://[::1]:", "ipc://", "inproc://")
_authenticators: dict[tuple[int, int], tuple[Any, _ZapHandler]] = {}
"""(pid, id(context)) -> (context, its ZAP handler): one per context, started with the first
server socket; keyed by pid too because a forked child inherits the dict but not the thread."""


def install(keys: CurveKeys | None) -> None:
    """Make every socket `comm.sockets.make_socket` creates from now on in this process a CURVE
    socket with `keys` (None: plain sockets). A role calls it once at start, before any socket
    and before it declares its pod-private addresses: it forgets those declared before."""
    global _installed
    with _lock:
        _installed = keys  # the ZAP handlers read it at each handshake
        _pod_private.clear()


def installed() -> CurveKeys | None:
    """The keys sockets are made with (None: plain sockets)."""
    return _installed


def pod_private(address: str) -> None:
    """Declare `address` one that only this pod's processes reach: sockets bound or connected to
    it stay plain. Only loopback addresses qualify (anything else is reachable from outside
    the pod, and staying plain there would open the experiment): others raise ValueError."""
    if not address.startswith(LOOPBACK):
        raise ValueError(
            f"{address!r} is not a loopback address; only an endpoint on the pod's loopback "
            f"({', '.join(LOOPBACK)}...) may skip CURVE"
        )
    with _lock:
        _pod_private.add(address)


def secures(address: str | None) -> bool:
    """Whether a socket bound or connected to `address` is a CURVE socket: keys installed, and
    not an address declared `pod_private`."""
    return _installed is not None and address not in _pod_private


ZAP_ADDR = "inproc://zeromq.zap.01"
"""Where libzmq asks a context's ZAP handler (RFC 27)."""


class _ZapHandler:
    """A context's ZAP handler: admits a CURVE client whose key is the installed public key.

    Ours rather than `zmq.auth.thread.ThreadAuthenticator`, which answers with a user id (the
    client's key): libzmq then queues a credential message ahead of the first real one, and on
    a receiver with a high-water mark of 1 or 2 (experience receivers use 1) that message holds
    the only slot: `poll` says readable, `recv` finds nothing, and the peer's messages never
    come (measured with libzmq 4.3.5). This one answers with an empty user id, and never logs.
    """

    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self._ctx = ctx
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="surreal-zap", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            sock = self._ctx.socket(zmq.REP)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(ZAP_ADDR)
        except BaseException as exc:  # reported to the constructor
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                frames = sock.recv_multipart()
                sock.send_multipart(_zap_reply(frames))
        except zmq.ContextTerminated:
            pass
        finally:
            sock.close(0)


def _zap_reply(frames: list[bytes]) -> list[bytes]:
    """RFC 27: [version, request id, domain, address, identity, mechanism, credentials...] ->
    [version, request id, status, text, user id, metadata]."""
    if len(frames) < 6 or frames[0] != b"1.0":
        return [b"1.0", frames[1] if len(frames) > 1 else b"", b"500", b"bad request", b"", b""]
    request_id, mechanism, credentials = frames[1], frames[5], frames[6:]
    keys = _installed
    ok = (
        keys is not None
        and mechanism == b"CURVE"
        and len(credentials) == 1
        and credentials[0] == zmq.utils.z85.decode(keys.public)
    )
    if ok:
        return [b"1.0", request_id, b"200", b"OK", b"", b""]
    return [b"1.0", request_id, b"400", b"not a key of this experiment", b"", b""]


def _ensure_authenticator(ctx: zmq.Context[Any]) -> None:
    key = (os.getpid(), id(ctx))
    with _lock:
        found = _authenticators.get(key)
        if found is not None and found[0] is ctx:
            return
        _authenticators[key] = (ctx, _ZapHandler(ctx))


def configure(
    sock: zmq.Socket[Any], *, server: bool, ctx: zmq.Context[Any], address: str | None = None
) -> None:
    """Make `sock` (not yet bound or connected to `address`) a CURVE server or client with the
    installed keys; nothing when none are installed or the address is pod-private."""
    keys = _installed
    if keys is None or not secures(address):
        return
    if server:
        _ensure_authenticator(ctx)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
    else:
        sock.setsockopt(zmq.CURVE_SERVERKEY, keys.public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)


def max_msg_bytes(limit: int, address: str | None = None) -> int:
    """`limit` as ZeroMQ must be told it for a socket on `address`: on a CURVE socket, plus the
    encryption overhead."""
    return limit + FRAME_OVERHEAD if secures(address) else limit


def install_from(path: str | Path | None, *, private: bool = True) -> CurveKeys | None:
    """Load the key file at `path` and install it (None: install nothing, plain sockets)."""
    keys = None if path is None else load_key_file(path, private=private)
    install(keys)
    if keys is None:
        _log.info("no CURVE key file: this process's sockets accept any peer")
    return keys
