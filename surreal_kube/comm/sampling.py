"""Sampling: the learner's prefetcher asks, the replay load balancer routes, a ready shard answers.

    learner Prefetcher (DEALER) --replay-sampler--> SamplerBroker (ROUTER | ROUTER)
        <--replay-sampler-backend-- SampleServer (DEALER) in each shard

Shards announce readiness with credits (`READY`), one per request they are willing to take, and
only once their start condition holds (e.g. at least 10,000 items), so the broker never hands a
request to a shard that cannot answer it: the least-recently-ready shard gets the next request.
Nobody busy-waits: everyone blocks in `poll`.

Requests carry an id and a time-to-live. A request whose shard died, or that waited in the broker
past its time-to-live, is forgotten by the broker and re-issued by the prefetcher; a late reply is
still taken (it is data), so nothing is ever stuck.

Prioritized replay: a batch names the shard it came from (`meta["shard"]`); the learner sends
the new priorities of its items back (`priorities` message with that shard index), and the broker
routes them to that shard, which it knows from the index the shard puts in its credits.

Policy lag: a request carries the learner's iteration (`"version"`) and, for on-policy learning,
the largest lag it accepts (`"max_lag"`); a shard drops what is older before it serves, and
each reply carries the shard's counters (`"stats"`: items inserted, sampled, overwritten, dropped
as stale, env steps seen, restarts) so the learner can report them.

Backend frames (shard -> broker): `[b"READY", b"<shard index>"]` or `[b"REPLY", client, *message]`;
broker -> shard: `[client, *message]`. The broker never decodes array frames.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.sockets import connect_and_wait, make_socket

log = logging.getLogger(__name__)

READY = b"READY"
REPLY = b"REPLY"
DEFAULT_REQUEST_TTL = 10.0
MAX_PENDING = 4096
MAX_CREDITS_PER_SHARD = 8
"""Shards re-announce credits when idle (the broker may have restarted); extra ones are ignored."""


@dataclass
class _Request:
    client: bytes
    frames: list[zmq.Frame]
    deadline: float


class SamplerBroker:
    """The replay load balancer's sampling side: routes learner requests to ready shards."""

    def __init__(
        self,
        frontend_bind: str,
        backend_bind: str,
        *,
        request_bytes: int = 1 << 26,
        batch_bytes: int = 1 << 31,
    ) -> None:
        """`request_bytes`: the largest frame from the learner side (requests, priorities);
        `batch_bytes`: from the shards (batches). Larger frames disconnect their sender."""
        self.front = make_socket(
            zmq.ROUTER,
            bind=frontend_bind,
            sndhwm=1024,
            rcvhwm=1024,
            max_msg_bytes=max(request_bytes, wire.MAX_HEADER_BYTES),
        )
        try:
            self.back = make_socket(
                zmq.ROUTER,
                bind=backend_bind,
                sndhwm=1024,
                rcvhwm=1024,
                max_msg_bytes=max(batch_bytes, wire.MAX_HEADER_BYTES),
            )
        except zmq.ZMQError:
            self.front.close(0)
            raise
        self.back.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._poller = zmq.Poller()
        self._poller.register(self.front, zmq.POLLIN)
        self._poller.register(self.back, zmq.POLLIN)
        self._credits: deque[bytes] = deque()
        self._credit_count: Counter[bytes] = Counter()
        self._pending: deque[_Request] = deque()
        self.rejects = wire.Rejects(log)
        self.requests = 0
        self.replies = 0
        self.expired = 0
        self.priority_updates = 0
        self.env_steps = 0
        """Largest global env steps a shard reported in a reply (the x axis of our metrics)."""
        self.shards_seen: set[bytes] = set()
        self._shard_by_index: dict[int, bytes] = {}

    @property
    def pending(self) -> int:
        """Requests waiting for a ready shard."""
        return len(self._pending)

    @property
    def credits(self) -> int:
        """Requests shards are ready to take."""
        return len(self._credits)

    def poll(self, timeout_ms: int = 100) -> None:
        """Move whatever arrived; call in a loop."""
        events = dict(self._poller.poll(timeout_ms))
        if self.back in events:
            self._drain_backend()
        if self.front in events:
            self._drain_frontend()
        self._dispatch()

    def _drain_backend(self) -> None:
        while True:
            try:
                frames = self.back.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            shard = frames[0].bytes
            tag = frames[1].bytes if len(frames) > 1 else b""
            if tag == READY and len(frames) in (2, 3):
                self.shards_seen.add(shard)
                if len(frames) == 3 and frames[2].bytes.isdigit() and len(frames[2].bytes) < 6:
                    self._shard_by_index[int(frames[2].bytes)] = shard
                if self._credit_count[shard] < MAX_CREDITS_PER_SHARD:
                    self._credit_count[shard] += 1
                    self._credits.append(shard)
            elif tag == REPLY and len(frames) >= 4:
                self.replies += 1
                self._note_steps(frames[3])
                self.front.send_multipart(frames[2:], copy=False)
            else:
                self.rejects.add(wire.WireError("bad-envelope", "unknown backend frame"), "sampler")

    def _note_steps(self, header: zmq.Frame) -> None:
        try:
            stats = wire.decode_header(header)["m"].get("stats")
        except wire.WireError:
            return  # the learner's prefetcher counts malformed replies
        steps = stats.get("steps") if isinstance(stats, dict) else None
        if isinstance(steps, int) and not isinstance(steps, bool) and steps > self.env_steps:
            self.env_steps = steps

    def _drain_frontend(self) -> None:
        while True:
            try:
                frames = self.front.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) < 2:
                self.rejects.add(wire.WireError("truncated", "no message"), "sampler")
                continue
            try:
                header = wire.decode_header(frames[1])
            except wire.WireError as exc:
                self.rejects.add(exc, "sampler")
                continue
            if header["k"] == wire.PRIORITIES:
                self._route_priorities(frames, header["m"])
                continue
            if header["k"] != wire.SAMPLE or len(frames) != 2:
                self.rejects.add(wire.WireError("bad-kind", "expected a sample request"), "sampler")
                continue
            ttl = header["m"].get("ttl", DEFAULT_REQUEST_TTL)
            ttl = float(ttl) if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) else 0.0
            ttl = min(max(ttl, 0.0), 3600.0)
            self.requests += 1
            if len(self._pending) >= MAX_PENDING:
                self._pending.popleft()
                self.expired += 1
            self._pending.append(_Request(frames[0].bytes, frames[1:], time.monotonic() + ttl))

    def _route_priorities(self, frames: list[zmq.Frame], meta: dict[str, Any]) -> None:
        index = meta.get("shard")
        shard = self._shard_by_index.get(index) if isinstance(index, int) else None
        if shard is None or len(frames) != 4:
            self.rejects.add(
                wire.WireError("bad-meta", "priorities for an unknown shard"), "sampler"
            )
            return
        try:
            self.back.send_multipart([shard, *frames], zmq.NOBLOCK, copy=False)
            self.priority_updates += 1
        except (zmq.Again, zmq.ZMQError):
            self.rejects.add(wire.WireError("unroutable", "shard gone"), "sampler")

    def _dispatch(self) -> None:
        now = time.monotonic()
        while self._pending and self._pending[0].deadline < now:
            self._pending.popleft()
            self.expired += 1
        while self._credits and self._pending:
            shard = self._credits.popleft()
            self._credit_count[shard] -= 1
            if self._credit_count[shard] <= 0:
                del self._credit_count[shard]
            req = self._pending.popleft()
            if req.deadline < now:
                self.expired += 1
                self._credits.appendleft(shard)
                self._credit_count[shard] += 1
                continue
            try:
                self.back.send_multipart([shard, req.client, *req.frames], zmq.NOBLOCK, copy=False)
            except (zmq.Again, zmq.ZMQError):
                # The shard is gone (EHOSTUNREACH) or jammed: forget its credit, retry the request.
                self._pending.appendleft(req)

    def close(self) -> None:
        """Close both sockets."""
        self.front.close(0)
        self.back.close(0)


class SampleServer:
    """A replay shard's sampling side: give credits when ready, take requests, send batches.

    Priority updates for this shard arrive on the same socket; `recv_request` sets them aside in
    `priority_updates` as (indices, priorities) pairs for the shard to apply.
    """

    def __init__(
        self,
        addr: str,
        *,
        index: int | None = None,
        wait_connected: float = 0.0,
        max_bytes: int = 1 << 26,
    ) -> None:
        self.index = index
        self.priority_updates: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=1024)
        self._max_bytes = max_bytes
        """The largest request or priority update taken (frames above it: disconnected)."""
        self.sock = make_socket(
            zmq.DEALER,
            sndhwm=1024,
            rcvhwm=1024,
            max_msg_bytes=max(max_bytes, wire.MAX_HEADER_BYTES),
            address=addr,  # connected below
        )
        if wait_connected > 0:
            self.connected = connect_and_wait(self.sock, addr, wait_connected)
        else:
            self.sock.connect(addr)
            self.connected = True
        self.rejects = wire.Rejects(log)
        self.served = 0

    def give_credit(self, n: int = 1) -> None:
        """Tell the broker this shard can take `n` more requests."""
        credit = [READY] if self.index is None else [READY, str(self.index).encode()]
        for _ in range(n):
            self.sock.send_multipart(credit)

    def recv_request(self) -> tuple[bytes, int, dict[str, Any]] | None:
        """A pending request without waiting: (client, batch size, meta), or None."""
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            if len(frames) < 2:
                self.rejects.add(wire.WireError("bad-envelope", "request frames"), "sampler")
                continue
            msg = wire.try_decode(
                frames[1:],
                self.rejects,
                expect=(wire.SAMPLE, wire.PRIORITIES),
                max_bytes=self._max_bytes,
            )
            if msg is None:
                continue
            if msg.kind == wire.PRIORITIES:
                self._take_priorities(msg)
                continue
            return self._request(frames[0].bytes, msg)

    def _take_priorities(self, msg: wire.Message) -> None:
        idx, prio = msg.arrays.get("indices"), msg.arrays.get("priorities")
        if idx is None or prio is None or idx.shape != prio.shape or idx.ndim != 1:
            self.rejects.add(wire.WireError("bad-meta", "priorities need indices"), "sampler")
            return
        self.priority_updates.append((idx, prio))

    def _request(
        self, client: bytes, msg: wire.Message
    ) -> tuple[bytes, int, dict[str, Any]] | None:
        if msg.arrays:
            self.rejects.add(wire.WireError("bad-meta", "a request carries no arrays"), "sampler")
            return None
        size = msg.meta.get("batch_size")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= 1 << 24:
            self.rejects.add(wire.WireError("bad-meta", "batch_size"), "sampler")
            return None
        return client, size, msg.meta

    def reply(self, client: bytes, meta: dict[str, Any], arrays: wire.ArrayDict) -> None:
        """Send a batch to the client that asked (through the broker)."""
        self.sock.send_multipart(
            [REPLY, client, *wire.encode(wire.BATCH, meta, arrays)], copy=False
        )
        self.served += 1

    def close(self) -> None:
        """Close the socket."""
        self.sock.close(0)


class Prefetcher:
    """The learner's side: keeps `depth` requests in flight and up to `depth` batches waiting.

    A background thread requests and receives; `get()` hands out decoded batches (arrays are
    views over the received frames). Sampling is latency-bound (a request crosses three processes
    and back), so requests stay in flight while batches wait in the queue: at most `2 * depth`
    batches ahead of the learner.

    `on_policy=True` (FIFO replay, PPO) asks for nothing ahead: one request goes out when `get()`
    finds no batch waiting, i.e. when the learner is done with the last one. A batch requested
    ahead is formed at the start of an iteration from what agents produced during the one
    before, and learned from an iteration later: with agents that outrun the learner (8 PPO
    agents on 2 cores) every item then lagged 2.3 iterations on average against 1.2 for 2
    agents. Asked for on demand, a batch holds what the agents sent during the iteration that
    just ended. The price is one round trip per iteration while the learner waits, a few
    milliseconds against an iteration of about 100.
    """

    def __init__(
        self,
        addr: str,
        batch_size: int,
        *,
        depth: int = 4,
        request_ttl: float = DEFAULT_REQUEST_TTL,
        max_bytes: int = 1 << 31,
        on_policy: bool = False,
    ) -> None:
        self.addr = addr
        self.batch_size = int(batch_size)
        self.depth = 1 if on_policy else max(1, int(depth))
        self.on_policy = on_policy
        self._wanted = False
        """On-policy: the learner waits in `get()` for a batch it has not been sent."""
        self._demand = threading.Lock()
        """Orders `get()` finding the queue empty against the thread queueing a batch, so a
        demand is either met by that batch or raised after it was handed out, never both: a
        wake-up read after its batch was taken asked for a second batch ahead (CI, under load)."""
        self._wake_r, self._wake_w = os.pipe()
        """`get()` wakes the thread from its poll through this pipe (on-policy)."""
        os.set_blocking(self._wake_w, False)
        self.request_ttl = request_ttl
        self._max_bytes = max_bytes
        self._queue: queue.Queue[wire.Message] = queue.Queue(maxsize=self.depth)
        self._stop = threading.Event()
        self._ids = itertools.count()
        self._in_flight: dict[int, float] = {}
        self._outbox: queue.SimpleQueue[list[Any]] = queue.SimpleQueue()
        self.rejects = wire.Rejects(log)
        self.received = 0
        self.reissued = 0
        self.bytes = 0
        self.version = -1
        """The learner's iteration, sent with each request (the learner sets it as it learns)."""
        self.max_lag: int | None = None
        """On-policy: shards drop items more than this many iterations older than `version`."""
        self._died: str | None = None
        """Why the background thread ended, if it did while not asked to stop."""
        self._thread = threading.Thread(target=self._run, name="prefetcher", daemon=True)

    def start(self) -> Prefetcher:
        """Start the background thread."""
        self._thread.start()
        return self

    @property
    def qsize(self) -> int:
        """Batches ready for the learner."""
        return self._queue.qsize()

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._in_flight)

    def update_priorities(self, shard: int, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Send new priorities of a batch's items back to the shard it came from."""
        arrays = {
            "indices": np.ascontiguousarray(indices, dtype=np.int64).reshape(-1),
            "priorities": np.ascontiguousarray(priorities, dtype=np.float64).reshape(-1),
        }
        self._outbox.put(wire.encode(wire.PRIORITIES, {"shard": int(shard)}, arrays))

    def get(self, timeout: float | None = None) -> wire.Message | None:
        """The next batch message, or None after `timeout` seconds (None: wait forever).

        Raises CommError once the background thread has died: a learner that waited for
        batches from a dead thread kept its heartbeat going and never learned again, and the
        liveness probe never restarted it. The role fails instead (exit 1).
        """
        self._check_alive()
        if self.on_policy:
            with self._demand:
                wake = self._queue.empty() and self._wake_w >= 0
                self._wanted = self._wanted or wake
            if wake:
                with contextlib.suppress(BlockingIOError):  # full of wake-ups already
                    os.write(self._wake_w, b"w")
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 0.5 if end is None else min(0.5, end - time.monotonic())
            try:
                return self._queue.get(timeout=max(left, 0.0))
            except queue.Empty:
                self._check_alive()
                if end is not None and time.monotonic() >= end:
                    return None

    def _check_alive(self) -> None:
        if self._died is not None:
            raise wire.CommError(f"the sample prefetcher's thread died: {self._died}")

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            if not self._stop.is_set():
                self._died = f"{type(exc).__name__}: {exc}"
                log.error("the sample prefetcher's thread died: %s", self._died, exc_info=True)

    def _loop(self) -> None:
        sock = make_socket(
            zmq.DEALER,
            connect=self.addr,
            sndhwm=1024,
            rcvhwm=1024,
            max_msg_bytes=max(self._max_bytes, wire.MAX_HEADER_BYTES),
        )
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                while not self._outbox.empty():
                    sock.send_multipart(self._outbox.get(), copy=False)
                self._request_more(sock)
                ready = dict(poller.poll(100))
                if self._wake_r in ready:
                    os.read(self._wake_r, 4096)  # the demand itself is `_wanted`
                if sock not in ready:
                    continue
                frames = sock.recv_multipart(copy=False)
                msg = wire.try_decode(
                    frames,
                    self.rejects,
                    expect=(wire.BATCH,),
                    max_bytes=self._max_bytes,
                    where="sample",
                )
                if msg is None:
                    continue
                rid = msg.meta.get("id")
                if isinstance(rid, int):
                    self._in_flight.pop(rid, None)
                self.received += 1
                self.bytes += msg.nbytes
                self._hand_over(msg)
        finally:
            sock.close(0)

    def _hand_over(self, msg: wire.Message) -> None:
        """Queue a batch for `get()`; on-policy it meets the demand that asked for it."""
        while not self.on_policy and not self._stop.is_set():
            try:
                self._queue.put(msg, timeout=0.1)
                return
            except queue.Full:
                continue
        while not self._stop.is_set():  # on-policy nothing is asked ahead: room is the rule
            with self._demand:
                try:
                    self._queue.put_nowait(msg)
                except queue.Full:
                    pass
                else:
                    self._wanted = False
                    return
            time.sleep(0.01)

    def _request_more(self, sock: zmq.Socket[bytes]) -> None:
        now = time.monotonic()
        for rid, deadline in list(self._in_flight.items()):
            if deadline < now:
                del self._in_flight[rid]
                self.reissued += 1
        if self.on_policy and not self._wanted:
            return
        ahead = self._queue.qsize() if self.on_policy else 0
        while len(self._in_flight) + ahead < self.depth:
            rid = next(self._ids)
            meta: dict[str, object] = {
                "batch_size": self.batch_size,
                "id": rid,
                "ttl": self.request_ttl,
                "version": int(self.version),
            }
            if self.max_lag is not None:
                meta["max_lag"] = int(self.max_lag)
            try:
                sock.send_multipart(wire.encode(wire.SAMPLE, meta), zmq.NOBLOCK)
            except zmq.Again:
                return
            self._in_flight[rid] = now + self.request_ttl

    def close(self) -> None:
        """Stop the thread and close its socket."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        if not self._thread.is_alive() and self._wake_r >= 0:  # a thread still polling keeps it
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1
