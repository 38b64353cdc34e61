"""Forwarding proxies: a ZeroMQ device running in C, in a thread, that can be stopped cleanly.

The parameter server's front (ROUTER -> DEALER, round-robin over shards) is a plain forwarder:
`zmq.proxy_steerable` moves frames between the two sockets without the GIL and without copying,
and a control socket lets the owning role stop it on SIGTERM. (Experience takes no such hop: each
agent connects to every replay shard, see `comm.experience`.)
"""

from __future__ import annotations

import itertools
import threading

import zmq

from surreal_kube.comm.sockets import bound_address, context, make_socket

_ids = itertools.count()


class Forwarder:
    """Binds `frontend` and `backend` and forwards between them until `stop()`.

    Both sockets are created inside the proxy thread (sockets belong to one thread); `start()`
    returns once both are bound, or raises the bind error.
    """

    def __init__(
        self,
        frontend_kind: int,
        frontend_bind: str,
        backend_kind: int,
        backend_bind: str,
        *,
        hwm: int = 256,
        name: str = "forwarder",
        frontend_max_bytes: int | None = None,
        backend_max_bytes: int | None = None,
        frontend_sealed: bool = False,
    ) -> None:
        """`*_max_bytes`: the largest frame each side takes (a larger one disconnects its
        sender, see `sockets.make_socket`); the parameter server's front takes fetch requests,
        its back the parameters. `frontend_sealed`: the front carries sealed messages
        (`comm.seal`), opened behind the proxy, and is no CURVE socket."""
        self._front_sealed = frontend_sealed
        self._spec = (frontend_kind, frontend_bind, backend_kind, backend_bind)
        self._hwm = hwm
        self._max_bytes = (frontend_max_bytes, backend_max_bytes)
        self._control_addr = f"inproc://surreal-forwarder-{next(_ids)}"
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._control: zmq.Socket[bytes] | None = None
        self.frontend_addr = frontend_bind
        """The bound frontend address (a wildcard port resolved once started)."""
        self.backend_addr = backend_bind
        self.spurious_wakeups = 0
        """Times the proxy found a readable socket empty and resumed (see `_run`)."""

    def start(self) -> Forwarder:
        """Start forwarding; raises if either address cannot be bound."""
        self._control = context().socket(zmq.PAIR)
        self._control.setsockopt(zmq.LINGER, 0)
        self._control.bind(self._control_addr)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._control.close(0)
            raise self._error
        return self

    def _run(self) -> None:
        fk, fb, bk, bb = self._spec
        socks: list[zmq.Socket[bytes]] = []
        try:
            front_max, back_max = self._max_bytes
            front = make_socket(
                fk,
                bind=fb,
                sndhwm=self._hwm,
                rcvhwm=self._hwm,
                max_msg_bytes=front_max,
                sealed=self._front_sealed,
            )
            socks.append(front)
            back = make_socket(
                bk, bind=bb, sndhwm=self._hwm, rcvhwm=self._hwm, max_msg_bytes=back_max
            )
            socks.append(back)
            control = context().socket(zmq.PAIR)
            control.setsockopt(zmq.LINGER, 0)
            control.connect(self._control_addr)
            socks.append(control)
            self.frontend_addr, self.backend_addr = bound_address(front), bound_address(back)
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()
            for s in socks:
                s.close(0)
            return
        self._ready.set()
        try:
            while True:
                try:
                    zmq.proxy_steerable(front, back, None, control)
                    return  # TERMINATE from stop()
                except zmq.Again:
                    # libzmq 4.3.5's proxy gives up when a socket it polled readable has no
                    # message after all. Seen with CURVE: pyzmq's ZAP authenticator queued a
                    # credential message per connection (replaced by comm.curve's own handler
                    # since), and a peer's oversized frame then stopped the parameter server
                    # (its role exited 1, again at each restart). Whatever else makes a socket
                    # readable with nothing in it, nothing was taken: forwarding resumes.
                    self.spurious_wakeups += 1
        except zmq.ContextTerminated:
            pass
        finally:
            for s in socks:
                s.close(0)

    def stop(self, timeout: float = 2.0) -> None:
        """Stop forwarding and close both sockets (frames in flight are dropped)."""
        if self._control is None:
            return
        if self._thread.is_alive():
            self._control.send(b"TERMINATE")
            self._thread.join(timeout)
        self._control.close(0)
        self._control = None

    @property
    def alive(self) -> bool:
        """True while the proxy thread runs."""
        return self._thread.is_alive()
