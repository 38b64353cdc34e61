"""Parameters: the learner publishes, parameter-server shards cache, agents fetch by hash.

    learner  --PUB parameter-publish-->  ps-shard-i (SUB, keeps the newest)
    agent    --REQ ps-serve--> ps proxy (ROUTER/DEALER) --> ps-shard-i (REP)

A publication carries the iteration, a content hash and a timestamp. A fetch carries the hash the
client already holds; a shard answers `unchanged` (a few bytes) when it has nothing newer, so
agents can fetch often without moving megabytes. Shards forward the publication's frames as they
arrived, without decoding or copying the arrays.

With the experiment's keys installed, publications, fetches and answers are sealed
(`comm.seal`): the learner seals a publication once, the shards open it to read its info and
answer fetches with it as it came, and each agent opens it: one encryption per publication,
whatever the number of shards and agents. A client seals its request, the shard opens it
(refusing strangers' and replayed requests).

The client follows the "lazy pirate" pattern: a REQ socket that times out is in a state where it
cannot send again, so it is closed and rebuilt; `on_fetch_parameter_failed` tells the owner (which
logs it and reports it to tensorplex) and `on_fetch_parameter_success` tells it when fetches work.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import zmq

from surreal_kube.comm import seal, wire
from surreal_kube.comm.proxy import Forwarder
from surreal_kube.comm.sockets import bound_address, make_socket

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 2.0
SUBSCRIPTION_BYTES = 1024
"""The largest frame a publisher takes back: a subscription is one byte and a topic."""
FETCH_BYTES = 64 << 10
"""The largest fetch request a shard takes: a header naming the hash a client holds."""
RESEND_SECONDS = 0.5
"""A subscription makes the publisher send the newest parameters at once, but at most once per
this many seconds: each subscribe resent them to every subscriber, so a storm of subscriptions
(a stranger's, or thousands of restarting shards) multiplied the learner's outgoing bytes."""
CLOSE_LINGER_MS = 1000
"""How long a closing publisher may spend delivering its last publication."""


def content_hash(params: Mapping[str, np.ndarray]) -> str:
    """A short digest of names, dtypes, shapes and bytes: equal parameters hash equal."""
    h = hashlib.blake2b(digest_size=12)
    for name in sorted(params):
        array = np.ascontiguousarray(params[name])
        h.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        h.update(array.data.cast("B") if array.ndim else array.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class ParameterInfo:
    """What travels with a parameter set."""

    iteration: int
    hash: str
    time: float
    """Publish time (seconds since the epoch, learner clock)."""
    env_steps: int = -1
    """Global env steps of the experiment when these parameters were published (-1: unknown):
    the x axis agents and evals report against."""


def _info(meta: Mapping[str, Any]) -> ParameterInfo:
    iteration, digest, stamp = meta.get("iteration"), meta.get("hash"), meta.get("time")
    if (
        not isinstance(iteration, int)
        or not isinstance(digest, str)
        or not isinstance(stamp, (int, float))
    ):
        raise wire.WireError("bad-meta", "parameter meta needs iteration, hash and time")
    steps = meta.get("env_steps", -1)
    if not isinstance(steps, int) or isinstance(steps, bool):
        steps = -1
    return ParameterInfo(iteration, digest, float(stamp), steps)


class ParameterPublisher:
    """The learner's side: publish the newest parameters, to every shard as soon as it subscribes.

    PUB drops messages for subscribers that are not connected yet, so a parameter-server shard that
    starts (or restarts) after a publication would wait for the next one; a learner stuck waiting
    for experience would then starve everyone. The socket is therefore an XPUB with XPUB_VERBOSE:
    every shard's subscription reaches this side, which answers it at once with the newest
    publication (at start-up the first parameters otherwise reached the agents late, dropped while
    the shard was still connecting; `bench/comm.py` times a publication). A re-send every
    `republish_seconds` stays as the safety net. `publish` copies the arrays (the learner keeps
    training in place) and returns at once; the thread owns the socket and wakes on a pipe that
    `publish` writes to.
    """

    def __init__(self, bind: str, *, republish_seconds: float = 2.0, hwm: int = 4) -> None:
        self._bind = bind
        self._hwm = hwm
        self._republish = republish_seconds
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._pipe_closed = False
        self._latest: list[Any] | None = None
        self._fresh = False
        self._stop = False
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.published = 0
        """Publications sent (resends included)."""
        self.subscriptions = 0
        """Subscriptions received: each asks for a resend, coalesced (see RESEND_SECONDS)."""
        self.info: ParameterInfo | None = None
        self.addr = bind
        """The bound address (a wildcard port resolved)."""
        self._closing = False
        self._died = ""
        self._thread = threading.Thread(target=self._run, name="param-publisher", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def publish(
        self,
        params: Mapping[str, np.ndarray],
        iteration: int,
        *,
        copy: bool = True,
        env_steps: int = -1,
    ) -> ParameterInfo:
        """Publish a parameter set; returns its info (the hash agents will report back).

        Raises CommError if the publishing thread died: a learner that went on learning for
        nobody kept its heartbeat, and agents acted on old parameters for good.
        """
        self.check()
        arrays = {k: np.array(v, copy=True) if copy else np.asarray(v) for k, v in params.items()}
        info = ParameterInfo(int(iteration), content_hash(arrays), time.time(), int(env_steps))
        meta = {
            "iteration": info.iteration,
            "hash": info.hash,
            "time": info.time,
            "env_steps": info.env_steps,
        }
        frames = seal.seal(wire.encode(wire.PARAMS, meta, arrays))
        with self._lock:
            self._latest = frames
            self._fresh = True
            self.info = info
            self._wake()
        return info

    def check(self) -> None:
        """Raise CommError if the publishing thread died.

        `publish` checks too, but a learner waiting for batches publishes nothing: it must ask
        every turn, or it outlives its publisher (no republish, no parameters for a restarted
        parameter-server shard) with its heartbeat going.
        """
        if not self._thread.is_alive() and not self._closing:
            raise wire.CommError(f"the parameter publisher's thread died: {self._died}")

    def _run(self) -> None:
        try:
            # what comes back on an XPUB is (un)subscriptions: a byte and a topic
            sock = make_socket(
                zmq.XPUB,
                bind=self._bind,
                sndhwm=self._hwm,
                max_msg_bytes=SUBSCRIPTION_BYTES,
                sealed=True,
            )
            sock.setsockopt(zmq.XPUB_VERBOSE, 1)
            self.addr = bound_address(sock)
        except BaseException as exc:
            self._error = exc
            self._close_pipe()
            self._ready.set()
            return
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        self._ready.set()
        last_sent = time.monotonic()
        resent = -RESEND_SECONDS  # when a subscription last made us send
        wanted = False  # a subscription waits for its (coalesced) send
        try:
            while True:
                now = time.monotonic()
                wait = self._republish - (now - last_sent)
                if wanted:
                    wait = min(wait, RESEND_SECONDS - (now - resent))
                events = dict(poller.poll(int(max(0.0, wait) * 1000)))
                if sock in events:
                    while sock.poll(0):
                        if sock.recv()[:1] == b"\x01":  # \x00: an unsubscribe
                            wanted = True
                            self.subscriptions += 1
                if self._wake_r in events:
                    os.read(self._wake_r, 4096)
                with self._lock:
                    stopping = self._stop
                    fresh = self._fresh
                    frames = self._latest
                    self._fresh = False
                now = time.monotonic()
                due = now - last_sent >= self._republish
                resend = wanted and now - resent >= RESEND_SECONDS
                if frames is not None and (fresh or resend or due):
                    sock.send_multipart(frames, copy=False)
                    self.published += 1
                    last_sent = time.monotonic()
                    if wanted:
                        wanted, resent = False, last_sent  # what it wanted went out with it
                elif due:
                    last_sent = now
                if stopping:
                    return
        except BaseException as exc:
            self._died = f"{type(exc).__name__}: {exc}"
            log.error("the parameter publisher's thread died: %s", self._died, exc_info=True)
        finally:
            # a publication made just before close still reaches connected shards
            sock.close(CLOSE_LINGER_MS)
            self._close_pipe()

    def _wake(self) -> None:
        """Wake the thread. Called with the lock held, and the pipe is closed under the lock,
        so a late `publish` never writes to a descriptor that was closed (and maybe reused)."""
        if self._pipe_closed:
            return
        with contextlib.suppress(BlockingIOError):  # a full pipe: the thread is awake anyway
            os.write(self._wake_w, b"!")

    def _close_pipe(self) -> None:
        with self._lock:
            self._stop = True
            if not self._pipe_closed:
                self._pipe_closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)

    def close(self) -> None:
        """Send a publication still pending, then stop the thread and close the socket."""
        self._closing = True
        with self._lock:
            if self._stop:
                return
            self._stop = True
            self._wake()
        self._thread.join(2.0)


class ParameterShard:
    """One parameter-server shard: subscribes to the learner, answers fetches on the backend.

    Call `poll(timeout)` in a loop; it handles whatever arrived (new parameters first, so an answer
    is never older than what the shard has received).
    """

    def __init__(
        self, publish_addr: str, backend_addr: str, *, max_bytes: int = wire.DEFAULT_MAX_BYTES
    ):
        # no back-off towards the learner: it binds last (seconds of torch imports), and a
        # shard backed off to 1 s got its first parameters 0.9 s after they were published,
        # holding up every agent (at most 64 shards: their retries cost nothing)
        self.sub = make_socket(
            zmq.SUB,
            connect=publish_addr,
            rcvhwm=4,
            reconnect_max_ms=100,
            max_msg_bytes=max_bytes + wire.MAX_HEADER_BYTES,
            sealed=True,
        )
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.rep = make_socket(
            zmq.REP, connect=backend_addr, max_msg_bytes=FETCH_BYTES + seal.TAG_BYTES
        )
        self._opener = seal.Opener(fresh=True)
        self._publications = seal.Opener(fresh=False)  # a republish comes as it was sealed
        self._max_bytes = max_bytes
        self._poller = zmq.Poller()
        self._poller.register(self.sub, zmq.POLLIN)
        self._poller.register(self.rep, zmq.POLLIN)
        self.frames: list[Any] | None = None
        """The newest publication, as it came (sealed by the learner, if keys): fetches are
        answered with it."""
        self.info: ParameterInfo | None = None
        self.rejects = wire.Rejects(log)
        self.updates = 0
        self.fetches = 0
        self.unchanged = 0

    def poll(self, timeout_ms: int = 100) -> int:
        """Handle pending publications and requests; returns how many requests were answered."""
        events = dict(self._poller.poll(timeout_ms))
        if self.sub in events:
            self._drain_publications()
        answered = 0
        while self.rep.poll(0, zmq.POLLIN):
            self._answer(self.rep.recv_multipart(copy=False))
            answered += 1
        return answered

    def _drain_publications(self) -> None:
        while True:
            try:
                frames = self.sub.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            opened = seal.try_open(self._publications, frames, self.rejects, "publish")
            if opened is None:
                continue
            msg = wire.try_decode(
                opened,
                self.rejects,
                expect=(wire.PARAMS,),
                max_bytes=self._max_bytes,
                where="publish",
            )
            if msg is None:
                continue
            try:
                info = _info(msg.meta)
            except wire.WireError as exc:
                self.rejects.add(exc, "publish")
                continue
            if self.info is None or info.hash != self.info.hash:
                self.updates += 1
            self.frames, self.info = list(frames), info  # sealed by the learner, if keys

    def _answer(self, frames: list[zmq.Frame]) -> None:
        self.fetches += 1
        opened = seal.try_open(self._opener, frames, self.rejects, "fetch")
        msg = (
            None
            if opened is None
            else wire.try_decode(
                opened, self.rejects, expect=(wire.FETCH,), max_bytes=0, where="fetch"
            )
        )
        if msg is None:
            # REP must answer something; an empty reply is a malformed message to the client,
            # and a stranger's request (unsealed) learns no more than that
            self.rep.send_multipart(wire.encode(wire.NO_PARAMS, {"error": "malformed request"}))
            return
        held = msg.meta.get("hash")
        if self.frames is None or self.info is None:
            self.rep.send_multipart(seal.seal(wire.encode(wire.NO_PARAMS)))
        elif held == self.info.hash:
            self.unchanged += 1
            meta = {
                "iteration": self.info.iteration,
                "hash": self.info.hash,
                "time": self.info.time,
            }
            self.rep.send_multipart(seal.seal(wire.encode(wire.UNCHANGED, meta)))
        else:
            self.rep.send_multipart(self.frames, copy=False)

    def close(self) -> None:
        """Close both sockets."""
        self.sub.close(0)
        self.rep.close(0)


def parameter_proxy(serve: str, backend: str, *, max_bytes: int | None = None) -> Forwarder:
    """The parameter server's front, started: agents' fetches on `serve` spread over the shards
    that connect to `backend`. Its front carries sealed messages, opened by the shards
    (`comm.seal`); `max_bytes`: the largest parameter payload a shard answers with."""
    return Forwarder(
        zmq.ROUTER,
        serve,
        zmq.DEALER,
        backend,
        name="ps-proxy",
        frontend_max_bytes=FETCH_BYTES,
        backend_max_bytes=(
            None if max_bytes is None else max_bytes + wire.MAX_HEADER_BYTES + seal.TAG_BYTES
        ),
        frontend_sealed=True,
    ).start()


FetchOutcome = Literal["new", "unchanged", "empty", "failed", "refused"]


class ParameterClient:
    """Fetches parameters by hash from the parameter server, rebuilding its socket on timeout."""

    def __init__(
        self,
        addr: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        on_fetch_parameter_success: Callable[[], None] | None = None,
        on_fetch_parameter_failed: Callable[[], None] | None = None,
        max_bytes: int = wire.DEFAULT_MAX_BYTES,
    ) -> None:
        self.addr = addr
        self.timeout = timeout
        self.on_fetch_parameter_success = on_fetch_parameter_success
        self.on_fetch_parameter_failed = on_fetch_parameter_failed
        self._max_bytes = max_bytes
        self.info: ParameterInfo | None = None
        self.last_outcome: FetchOutcome | None = None
        self.rejects = wire.Rejects(log)
        self._opener = seal.Opener(fresh=False)  # a re-fetch may be handed the same seal again
        self.fetches = 0
        self.updates = 0
        self.failures = 0
        self.rebuilds = 0
        self._sock = self._new_socket()

    def _new_socket(self) -> zmq.Socket[bytes]:
        return make_socket(
            zmq.REQ,
            connect=self.addr,
            sndtimeo_ms=int(self.timeout * 1000),
            max_msg_bytes=self._max_bytes + wire.MAX_HEADER_BYTES,
            sealed=True,
        )

    @property
    def hash(self) -> str | None:
        """Hash of the parameters this client holds (None before the first)."""
        return self.info.hash if self.info else None

    def fetch(self) -> dict[str, np.ndarray] | None:
        """New parameters if the server has a newer set than ours, else None.

        Never blocks longer than about `timeout`; `last_outcome` says what happened.
        """
        self.fetches += 1
        try:
            self._sock.send_multipart(seal.seal(wire.encode(wire.FETCH, {"hash": self.hash})))
            ready = self._sock.poll(int(self.timeout * 1000), zmq.POLLIN)
        except zmq.ZMQError:
            ready = 0
        if not ready:
            self._failed()
            return None
        frames = self._sock.recv_multipart(copy=False)
        opened = seal.try_open(self._opener, frames, self.rejects, "fetch reply")
        if opened is None:
            self._refused()
            return None
        msg = wire.try_decode(
            opened,
            self.rejects,
            expect=(wire.PARAMS, wire.UNCHANGED, wire.NO_PARAMS),
            max_bytes=self._max_bytes,
            where="fetch reply",
        )
        if msg is None:
            self._refused()
            return None
        if self.on_fetch_parameter_success is not None:
            self.on_fetch_parameter_success()
        if msg.kind == wire.NO_PARAMS:
            self.last_outcome = "empty"
            return None
        if msg.kind == wire.UNCHANGED:
            self.last_outcome = "unchanged"
            return None
        try:
            info = _info(msg.meta)
            # Without keys: corrupted on the way, or forged by a peer that joined the parameter
            # server. With them the seal that opened proves more (a tag under the experiment's
            # key over every byte, made by the learner that hashed them): hashing the megabytes
            # again, a millisecond per megabyte and agent, would prove nothing more.
            if not seal.active() and content_hash(msg.arrays) != info.hash:
                raise wire.WireError("bad-hash", "parameters do not match their content hash")
        except wire.WireError as exc:
            self.rejects.add(exc, "fetch reply")
            self._refused()
            return None
        self.info = info
        self.updates += 1
        self.last_outcome = "new"
        return msg.arrays

    def fetch_into(self, load: Callable[[dict[str, np.ndarray]], None]) -> bool:
        """`fetch`, handing new parameters to `load` (an actor's `load_parameters`); True if
        it took them.

        The content hash is no signature: a peer that joined the parameter server can serve
        a set whose hash matches but whose names or shapes are not the model's, and `load`
        raised and ended every agent and evaluator that fetched it. Any error of `load` is a
        counted drop (logged with its reason), and the client keeps the parameters it held.
        """
        before = self.info
        params = self.fetch()
        if params is None:
            return False
        try:
            load(params)
        except Exception as exc:
            self.info = before
            self.updates -= 1
            self.count_refused(exc)
            return False
        return True

    def count_refused(self, exc: Exception) -> None:
        """Count a set whose hash matched but that the model could not load (why: `exc`)."""
        self.rejects.add(
            wire.WireError("bad-params", f"{type(exc).__name__}: {str(exc)[:200]}"),
            "fetch reply",
        )
        self._refused()

    def _failed(self) -> None:
        """No answer in time: the REQ socket cannot send again, so it is rebuilt, and the owner
        hears that the parameter server is unreachable."""
        self.failures += 1
        self.last_outcome = "failed"
        self._sock.close(0)
        self._sock = self._new_socket()
        self.rebuilds += 1
        if self.on_fetch_parameter_failed is not None:
            self.on_fetch_parameter_failed()

    def _refused(self) -> None:
        """An answer that was refused (counted and logged by `rejects`): a failed fetch, but the
        server is reachable. Telling the owner it was not made an agent served forged
        parameters log "did not answer within 2.0s" and "reachable again" at every fetch."""
        self.failures += 1
        self.last_outcome = "refused"

    def close(self) -> None:
        """Close the socket."""
        self._sock.close(0)


class FetchSchedule:
    """When an agent fetches: at each episode start, or every `interval` steps (DESIGN.md §6)."""

    def __init__(self, mode: Literal["episode", "step"], interval: int) -> None:
        if mode not in ("episode", "step"):
            raise ValueError(f"fetch mode must be 'episode' or 'step', got {mode!r}")
        self.mode = mode
        self.interval = max(1, int(interval))
        self._steps = 0
        self._first = True

    def due(self, *, episode_start: bool) -> bool:
        """Call once per step (before acting); True when a fetch should happen now."""
        if self._first:
            self._first = False
            self._steps = 0
            return True
        if self.mode == "episode":
            return episode_start
        self._steps += 1
        if self._steps >= self.interval:
            self._steps = 0
            return True
        return False
