r"""Experience: agents send stacked batches of replay items; replay shards receive them.

    agent --PUSH--> replay-collector-0 (shard 0)
               \--> replay-collector-1 (shard 1) ...

An agent's PUSH socket connects to every shard's collector and is the load balancer: ZeroMQ
hands each message to the next connected shard whose queue has room, so experience takes one hop,
as in a bare PUSH/PULL pipe (a forwarding process in between halves the throughput on its own).

Items (sub-trajectories or transitions, each an `ArrayDict`) are buffered by the sender and sent
`flush_iteration` at a time as ONE message whose arrays are the items stacked along a new leading
axis: four frames for 256 transitions instead of a thousand, and the shard stores them with one
copy per key.

Experience schema 2 (meta `"x": 2`): every item carries `param_version`, the learner iteration
of the parameters that acted (int64, one per item), and the message carries `"steps"`, the
sending process's cumulative env steps. Shards bound the policy lag with the first and count the
experiment's global env steps with the second (the one x axis of every curve). A schema-2
message without a valid `param_version` is rejected; messages without `"x"` (schema 1) are taken
as they are.

A sender never blocks forever (a defect of the original system). Its socket has a bounded queue
(the high-water mark) and does not queue for absent peers (`IMMEDIATE`). Two reasons a send can
wait, told apart by the socket's connection events:
- replay is up but does not take more (its rate limiter holds inserts back until the learner has
  sampled enough, see `replay.samplesPerInsert`): with a `wait_hook` the sender keeps waiting,
  calling the hook every `WAIT_SLICE_SECONDS` (the agent marks itself `waiting` and checks for
  a stop), and `waited_seconds` counts the time: agents wait rather than flood;
- no shard is connected (replay down): after `timeout` seconds the batch is dropped, counted, and
  logged, and the sender stops waiting (sends become non-blocking) until a send goes through
  again, so an agent whose replay is down keeps stepping at full speed and resumes sending as
  soon as replay is back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from surreal_kube.comm import seal, wire
from surreal_kube.comm.sockets import bound_address, make_socket

log = logging.getLogger(__name__)

DEFAULT_SEND_TIMEOUT_SECONDS = 2.0
SCHEMA = 2
"""Experience schema: 2 = items carry `param_version`, messages carry the sender's env steps."""
PARAM_VERSION = "param_version"
WAIT_SLICE_SECONDS = 0.2
BLOCKED_SECONDS = 0.05
"""A send that took longer than this waited for replay to take it; its time counts in
`waited_seconds` even when it was shorter than a slice (a limiter that holds inserts back until
the learner's next batch holds a send for most of a learner iteration, often under 0.2 s). A send
into a queue with room takes microseconds; a busy machine's scheduling stalls stay below this."""
MAX_SOURCES = 65_536
"""Distinct senders a receiver keeps env-step counts for (more would be hostile)."""
SOCKET_BUFFER_BYTES = 16 << 10
"""Kernel buffer of each experience connection, each way. Everything queued between an agent and
a shard (ZeroMQ's queues of `hwm` messages at both ends plus the kernel's buffers, which grow to
megabytes on their own) is experience acted with parameters that age while it waits: when a
shard's rate limiter holds inserts back, this backlog is what the learner gets next, and on-policy
it goes stale. Bounded, the backlog is a few batches even of small items: with 64 KiB, two
agents stepping CartPole queued hundreds of sub-trajectories and ran through a whole budget
before a loaded learner finished its first iteration, and never waited (`bench/comm.py` measures
with the rate limiter off)."""
ON_POLICY_PIPE_MIN_BYTES = 4 << 10
"""The kernel's smallest useful buffer, the floor of an on-policy pipe's."""


def on_policy_pipe(message_bytes: int) -> dict[str, int]:
    """The shallowest pipe for on-policy experience, at both ends (sender and receiver).

    With the defaults (4 + 8 messages of ZeroMQ queue and 32 KiB of kernel buffer each way, per
    agent), 8 PPO agents held hundreds of sub-trajectories in the pipes while replay's limiter
    held them back, and the learner got them iterations late, most past the policy-lag bound
    (`tests/runtime/test_learning_wiring.py` holds the lag to its bound). So one message is
    queued at each end, and the kernel holds two messages each way: depth counted in messages,
    not bytes. A fixed 4 KiB held a dozen CartPole items but a third of one Ant-v5 item (about
    12 KB), so the pipe's depth, and how often a send waits for the shard's process to be
    scheduled, depended on the environment (`bench/local.py` prints the agents' `send` share).
    `message_bytes`: the largest message of this experiment's agents (`runtime.layout`).
    """
    return {"hwm": 1, "buffer_bytes": max(ON_POLICY_PIPE_MIN_BYTES, 2 * int(message_bytes))}


def _signature(item: Mapping[str, np.ndarray]) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    return tuple((k, np.asarray(v).dtype.str, np.shape(v)) for k, v in item.items())


def stack_items(items: Sequence[Mapping[str, np.ndarray]]) -> list[tuple[wire.ArrayDict, int]]:
    """Stack items that share keys, dtypes and shapes: [(stacked arrays, count), ...].

    Items of differing layout (a shorter last sub-trajectory, say) form separate groups, in order
    of first appearance, rather than failing.
    """
    groups: dict[tuple[object, ...], list[Mapping[str, np.ndarray]]] = {}
    for item in items:
        groups.setdefault(_signature(item), []).append(item)
    out: list[tuple[wire.ArrayDict, int]] = []
    for group in groups.values():
        if len(group) == 1:  # an on-policy agent's usual send: views with a leading axis
            out.append(({k: np.asarray(v)[None] for k, v in group[0].items()}, 1))
            continue
        keys = group[0].keys()
        out.append(({k: np.stack([np.asarray(it[k]) for it in group]) for k in keys}, len(group)))
    return out


class ExperienceSender:
    """An agent's side of the experience path: buffer, stack, send, never hang."""

    def __init__(
        self,
        addr: str | Sequence[str],
        *,
        flush_iteration: int = 1,
        timeout: float = DEFAULT_SEND_TIMEOUT_SECONDS,
        hwm: int = 4,
        buffer_bytes: int = SOCKET_BUFFER_BYTES,
        source: str = "",
        wait_hook: Callable[[float], bool] | None = None,
    ) -> None:
        addrs = [addr] if isinstance(addr, str) else list(addr)
        if not addrs:
            raise ValueError("an experience sender needs at least one replay shard address")
        self.addr = ", ".join(addrs)
        self.flush_iteration = max(1, int(flush_iteration))
        self.timeout = timeout
        self.source = source
        self.wait_hook = wait_hook
        """Called with the seconds waited so far while replay is up but full; False: stop."""
        self.env_steps = 0
        """The sending process's cumulative env steps, sent with every message."""
        slice_ms = int(min(timeout, WAIT_SLICE_SECONDS) * 1000)
        self._sock = make_socket(
            zmq.PUSH, sndhwm=hwm, sndtimeo_ms=max(slice_ms, 1), immediate=True, sealed=True
        )
        self._sock.setsockopt(zmq.SNDBUF, buffer_bytes)
        self._monitor = self._sock.get_monitor_socket(
            zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED
        )
        self._peers: set[str] = set()
        for a in addrs:
            self._sock.connect(a)
        self._pending: list[Mapping[str, np.ndarray]] = []
        self._blocking = True
        self._dropped_since_ok = 0
        self.sent_items = 0
        self.sent_messages = 0
        self.sent_bytes = 0
        self.dropped_items = 0
        self.dropped_messages = 0
        self.waited_seconds = 0.0
        self.waiting = False
        """True while a send waits for replay to take more (rate limited), not for replay to
        come up."""

    def _count_wait(self, started: float, counted: float) -> float:
        """Add the time since `started` not yet counted to waited_seconds; the new total."""
        now = time.monotonic() - started
        self.waited_seconds += now - counted
        return now

    @property
    def connected_peers(self) -> int:
        """Shards this socket is connected to now (from the socket's connection events)."""
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return len(self._peers)
            endpoint = event.get("endpoint", b"")
            name = endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)
            if event["event"] == zmq.EVENT_CONNECTED:
                self._peers.add(name)
            else:
                self._peers.discard(name)

    @property
    def healthy(self) -> bool:
        """False while replay is unreachable (sends are being dropped)."""
        return self._blocking

    def send(self, items: Mapping[str, np.ndarray] | Iterable[Mapping[str, np.ndarray]]) -> None:
        """Queue one item or several; sends once `flush_iteration` items are waiting."""
        if isinstance(items, Mapping):
            self._pending.append(items)
        else:
            self._pending.extend(items)
        if len(self._pending) >= self.flush_iteration:
            self.flush()

    def flush(self) -> None:
        """Send whatever is buffered now."""
        pending, self._pending = self._pending, []
        for arrays, count in stack_items(pending):
            self.send_stacked(arrays, count)

    def send_stacked(self, arrays: Mapping[str, np.ndarray], count: int) -> bool:
        """Send `count` items already stacked along axis 0; False if they had to be dropped."""
        meta: dict[str, object] = {"n": int(count), "src": self.source}
        if PARAM_VERSION in arrays:
            meta.update(x=SCHEMA, steps=int(self.env_steps))
        frames = seal.seal(wire.encode(wire.EXPERIENCE, meta, arrays))
        started = time.monotonic()
        counted = 0.0  # seconds since `started` already in waited_seconds
        try:
            while True:
                try:
                    if self._blocking:
                        self._sock.send_multipart(frames, copy=False)
                    else:
                        self._sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
                    break
                except zmq.Again:
                    if self._blocking and self.wait_hook is not None and self.connected_peers:
                        # replay is there and holds inserts back: wait for it, as asked
                        self.waiting = True
                        counted = self._count_wait(started, counted)
                        if self.wait_hook(counted):
                            continue
                        self._drop(count, down=False)  # the owner stops waiting (stopping)
                        return False
                    elif self._blocking and time.monotonic() - started < self.timeout:
                        continue
                    self._drop(count)
                    return False
            # A send that blocked went through once replay took it: that was waiting too, even
            # when it was shorter than a wait slice (the 0.2 s a learner iteration may take).
            if self.waiting or time.monotonic() - started > BLOCKED_SECONDS:
                self._count_wait(started, counted)
        finally:
            self.waiting = False
        if not self._blocking:
            log.info(
                "replay at %s reachable again; dropped %d items while it was not",
                self.addr,
                self._dropped_since_ok,
            )
            self._blocking = True
        self._dropped_since_ok = 0
        self.sent_items += count
        self.sent_messages += 1
        self.sent_bytes += sum(np.asarray(a).nbytes for a in arrays.values())
        return True

    def _drop(self, count: int, down: bool = True) -> None:
        self.dropped_items += count
        self.dropped_messages += 1
        if not down:
            return
        self._dropped_since_ok += count
        if self._blocking:
            log.warning(
                "replay at %s did not take experience within %.1fs; dropping %d items "
                "(and sending without waiting until it answers again)",
                self.addr,
                self.timeout,
                count,
            )
            self._blocking = False

    def close(self) -> None:
        """Close the socket; buffered items that were not flushed are discarded."""
        self._sock.disable_monitor()
        self._monitor.close(0)
        self._sock.close(0)


class ExperienceReceiver:
    """A replay shard's side: PULL stacked batches from the agents, checked and counted."""

    def __init__(
        self,
        bind: str,
        *,
        hwm: int = 8,
        buffer_bytes: int = SOCKET_BUFFER_BYTES,
        max_bytes: int = 1 << 30,
        accept: Callable[[wire.ArrayDict, int], bool] | None = None,
    ) -> None:
        """`accept(arrays, count)`: the owner's last word on a message (a shard checks the
        items against its layout, and counts what it refuses); a refused message is not
        returned and its sender's env steps are not counted."""
        self._accept = accept
        # a larger frame disconnects its sender before it is buffered (sockets.make_socket)
        self.sock = make_socket(
            zmq.PULL,
            rcvhwm=hwm,
            max_msg_bytes=max_bytes + wire.MAX_HEADER_BYTES,  # a sealed message is one frame
            sealed=True,
        )
        self.sock.setsockopt(zmq.RCVBUF, buffer_bytes)
        try:
            self.sock.bind(bind)
        except zmq.ZMQError:
            self.sock.close(0)
            raise
        self.addr = bound_address(self.sock)
        """The bound address (a wildcard port resolved)."""
        self._max_bytes = max_bytes
        self.rejects = wire.Rejects(log)
        self._opener = seal.Opener(fresh=True)  # a stranger's copy of a message is refused
        self.items = 0
        self.messages = 0
        self.bytes = 0
        self.steps_by_source: dict[str, int] = {}
        """Newest cumulative env steps each sender reported (schema 2)."""

    @property
    def env_steps(self) -> int:
        """Env steps of every sender seen, summed: the experiment's global env steps."""
        return sum(self.steps_by_source.values())

    def recv(self, timeout_ms: int = 0) -> tuple[wire.ArrayDict, int] | None:
        """One batch (stacked arrays, count) if one arrives within the timeout, else None."""
        if timeout_ms and not self.sock.poll(timeout_ms, zmq.POLLIN):
            return None
        try:
            frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        opened = seal.try_open(self._opener, frames, self.rejects, "collector")
        if opened is None:
            return None
        msg = wire.try_decode(
            opened,
            self.rejects,
            expect=(wire.EXPERIENCE,),
            max_bytes=self._max_bytes,
            where="collector",
        )
        if msg is None:
            return None
        count = msg.meta.get("n")
        if (
            not isinstance(count, int)
            or count < 1
            or not msg.arrays
            or any(a.ndim == 0 or a.shape[0] != count for a in msg.arrays.values())
        ):
            self.rejects.add(wire.WireError("bad-meta", "arrays do not stack n items"), "collector")
            return None
        schema2 = msg.meta.get("x") == SCHEMA
        if schema2 and not self._schema2(msg.arrays, count):
            return None
        self.items += count
        self.messages += 1
        self.bytes += msg.nbytes
        if self._accept is not None and not self._accept(msg.arrays, count):
            return None
        if schema2:
            # only once the items are taken: a stranger's odd-shaped items, dropped by the
            # shard, set the experiment's global env steps (10**15) all the same
            self._count_steps(msg.meta)
        return msg.arrays, count

    def _schema2(self, arrays: wire.ArrayDict, count: int) -> bool:
        version = arrays.get(PARAM_VERSION)
        if version is None or version.shape != (count,) or version.dtype != np.int64:
            self.rejects.add(
                wire.WireError("bad-meta", f"schema {SCHEMA} items need int64 {PARAM_VERSION}"),
                "collector",
            )
            return False
        return True

    def _count_steps(self, meta: dict[str, Any]) -> None:
        src, steps = meta.get("src"), meta.get("steps")
        if (
            isinstance(src, str)
            and len(src) <= 253
            and isinstance(steps, int)
            and not isinstance(steps, bool)
            and steps >= 0
            and (src in self.steps_by_source or len(self.steps_by_source) < MAX_SOURCES)
        ):
            self.steps_by_source[src] = max(steps, self.steps_by_source.get(src, 0))

    def close(self) -> None:
        """Close the socket."""
        self.sock.close(0)
