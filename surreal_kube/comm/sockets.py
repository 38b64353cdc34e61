"""Socket construction in one place, so every socket gets the same safety options.

Every socket here has `LINGER` set (closing never hangs on unsent data), bounded high-water marks
(a slow peer never grows memory without bound), for receivers `MAXMSGSIZE` (a peer that sends a
frame larger than what the role expects is disconnected by ZeroMQ before the frame is buffered:
a 1 GiB message would otherwise be held whole in a pod limited to 1.5 GiB) and, for senders,
`IMMEDIATE` (messages are not
queued for peers that are not connected, so a dead peer shows up as a send timeout rather than a
silently growing queue). Sockets are not thread-safe: each is used by the thread that made it.

Once a role installed its experiment's keys (`comm.curve.install`), every socket made here is a
CURVE socket: a server when it binds, a client when it connects, unless its address was declared
pod-private (see `comm.curve`) or it carries sealed messages (`sealed`, see `comm.seal`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import zmq

from surreal_kube.comm import curve, seal

DEFAULT_LINGER_MS = 0
RECONNECT_JITTER_MS = 25
DEFAULT_HWM = 64
DRAIN_QUIET_S = 0.3
DRAIN_LIMIT_S = 2.0


def context() -> zmq.Context[zmq.Socket[bytes]]:
    """The process-wide ZeroMQ context (one I/O thread is plenty for our message rates)."""
    return zmq.Context.instance()


def make_socket(
    kind: int,
    *,
    bind: str | None = None,
    connect: str | None = None,
    sndhwm: int = DEFAULT_HWM,
    rcvhwm: int = DEFAULT_HWM,
    sndtimeo_ms: int | None = None,
    rcvtimeo_ms: int | None = None,
    immediate: bool = False,
    linger_ms: int = DEFAULT_LINGER_MS,
    reconnect_max_ms: int = 1000,
    max_msg_bytes: int | None = None,
    ctx: zmq.Context[zmq.Socket[bytes]] | None = None,
    curve_server: bool | None = None,
    address: str | None = None,
    sealed: bool = False,
) -> zmq.Socket[bytes]:
    """A socket with our defaults, bound or connected to one address.

    `max_msg_bytes`: the largest frame this socket accepts (ZeroMQ's MAXMSGSIZE); give it on
    every socket that receives from peers, sized from what the role expects.

    It reconnects about 100 ms after a peer went away, backing off to `reconnect_max_ms` for a
    peer that stays away (thousands of agents retrying a restarting service must not flood it).
    The first interval is drawn per socket within RECONNECT_JITTER_MS of 100 ms: libzmq 4.3.5
    retries every socket at exactly 100, 200, 400, 800 ms..., so peers that lost a service
    together would otherwise knock again in lockstep.

    `curve_server`: whether this socket is the CURVE server of its connections (default: when
    it binds here); give True for a socket bound later. Only used once keys are installed.
    `address`: where a socket made without `bind` or `connect` will be bound or connected later;
    whether it is a CURVE socket depends on it (a pod-private address: plain).
    `sealed`: a socket of the sealed paths (`comm.seal`): never a CURVE socket, its owner seals
    and opens every message itself once keys are installed."""
    the_ctx = ctx or context()
    sock: zmq.Socket[bytes] = the_ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.SNDHWM, sndhwm)
    sock.setsockopt(zmq.RCVHWM, rcvhwm)
    if sndtimeo_ms is not None:
        sock.setsockopt(zmq.SNDTIMEO, sndtimeo_ms)
    if rcvtimeo_ms is not None:
        sock.setsockopt(zmq.RCVTIMEO, rcvtimeo_ms)
    if immediate:
        sock.setsockopt(zmq.IMMEDIATE, 1)
    address = bind if bind is not None else connect if connect is not None else address
    if max_msg_bytes is not None:
        if max_msg_bytes < 1:
            raise ValueError(f"max_msg_bytes must be >= 1, got {max_msg_bytes}")
        limit = (
            max_msg_bytes + seal.TAG_BYTES * seal.active()
            if sealed
            else curve.max_msg_bytes(max_msg_bytes, address)
        )
        sock.setsockopt(zmq.MAXMSGSIZE, limit)
    sock.setsockopt(
        zmq.RECONNECT_IVL, 100 + random.randint(-RECONNECT_JITTER_MS, RECONNECT_JITTER_MS)
    )
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, max(reconnect_max_ms, 100))
    try:
        if not sealed:
            curve.configure(
                sock,
                server=bind is not None if curve_server is None else curve_server,
                ctx=the_ctx,
                address=address,
            )
        if bind is not None:
            sock.bind(bind)
        if connect is not None:
            sock.connect(connect)
    except zmq.ZMQError:
        sock.close(0)
        raise
    return sock


def connect_and_wait(sock: zmq.Socket[bytes], addr: str, timeout: float) -> bool:
    """Connect and wait up to `timeout` seconds for the ZMTP handshake; True if it happened.

    Lets a role log whether its peer is reachable, and makes sure a load balancer counts this
    peer before traffic starts. The socket keeps retrying in the background either way.
    """
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    try:
        sock.connect(addr)
        ok = bool(monitor.poll(int(timeout * 1000), zmq.POLLIN))
    finally:
        sock.disable_monitor()
        monitor.close(0)
    return ok


def drain(
    sock: zmq.Socket[bytes],
    handle: Callable[[list[Any]], None],
    *,
    quiet_s: float = DRAIN_QUIET_S,
    limit_s: float = DRAIN_LIMIT_S,
) -> int:
    """Hand `handle` what arrives until the socket has been quiet for `quiet_s`; returns the count.

    A receiver that stops (SIGTERM at the end of a run) should still take what its peers sent
    just before: a peer that has already exited may have left its last messages in the kernel
    or in this process's I/O thread, where a non-blocking receive does not see them yet. Bounded
    by `limit_s`, so a peer that keeps sending cannot hold the stop.
    """
    taken = 0
    deadline = time.monotonic() + limit_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sock.poll(int(min(quiet_s, left) * 1000), zmq.POLLIN):
            return taken
        taken += take_waiting(sock, handle)


def take_waiting(
    sock: zmq.Socket[bytes], handle: Callable[[list[Any]], None], most: int = 1000
) -> int:
    """Hand `handle` the messages already queued, at most `most` (a loop that also has timers
    to keep gets back to them under a flood); returns the count."""
    for taken in range(most):
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return taken
        handle(frames)
    return most


def bound_address(sock: zmq.Socket[bytes]) -> str:
    """The address a socket actually bound (resolves `tcp://127.0.0.1:*` to a port)."""
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)


def bind_any_port(
    kind: int, host: str = "127.0.0.1", **options: Any
) -> tuple[zmq.Socket[bytes], str]:
    """A socket bound to a free port on `host` and its address (tests and benchmarks)."""
    sock = make_socket(kind, bind=f"tcp://{host}:*", **options)
    return sock, bound_address(sock)
