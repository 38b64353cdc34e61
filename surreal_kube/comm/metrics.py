"""Metrics and log records to tensorplex and loggerplex: fire-and-forget PUSH, never blocking.

A role must never stall because its metrics sink is slow or down, so both clients send without
waiting and count what they had to drop. Until the sink is reachable, up to `hwm` messages wait
in the socket (so the first metrics of a role that starts before tensorplex are not lost).

Scalars travel in the msgpack header only (no arrays):
`{"src": process, "grp": group, "idx": index or None, "step": int or None, "t": time,
"vals": {tag: float}}`.
Log records: `{"src": process, "lvl": levelname, "t": time, "name": logger, "msg": formatted line}`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.sockets import make_socket

CLOSE_LINGER_MS = 1000
"""How long the points and lines sent just before `close` may still take to leave: closed at
once, the last ones queued behind a busy I/O thread were dropped (a learner's final figures, its
last log line); bounded, so a sink that is down delays a role's exit by a second at most."""


class MetricsClient:
    """Sends scalars of one process to tensorplex.

    `group` and `index` let tensorplex bin indexed sources: agents 0..7 of group `agents` land in
    one TensorBoard run `agents/0-7`, averaged, instead of one run per agent.
    """

    def __init__(
        self,
        addr: str,
        source: str,
        *,
        group: str | None = None,
        index: int | None = None,
        hwm: int = 1000,
    ) -> None:
        self.source = source
        self.group = group
        self.index = index
        self._sock = make_socket(zmq.PUSH, connect=addr, sndhwm=hwm)
        self.sent = 0
        self.dropped = 0

    def add_scalars(
        self, values: Mapping[str, float], step: int | None = None, *, index: int | None = None
    ) -> bool:
        """Send `{tag: value}`; False if it had to be dropped. Non-finite values are skipped."""
        vals = {str(k): float(v) for k, v in values.items() if math.isfinite(float(v))}
        if not vals:
            return True
        meta: dict[str, Any] = {
            "src": self.source,
            "grp": self.group,
            "idx": self.index if index is None else index,
            "step": None if step is None else int(step),
            "t": time.time(),
            "vals": vals,
        }
        try:
            self._sock.send(wire.encode(wire.SCALARS, meta)[0], zmq.NOBLOCK)
        except zmq.ZMQError:
            self.dropped += 1
            return False
        self.sent += 1
        return True

    def close(self) -> None:
        """Close the socket; what was sent still leaves within CLOSE_LINGER_MS."""
        self._sock.close(CLOSE_LINGER_MS)


class LogForwarder(logging.Handler):
    """A logging handler that forwards formatted records to loggerplex."""

    def __init__(
        self, addr: str, source: str, *, level: int = logging.INFO, hwm: int = 1000
    ) -> None:
        super().__init__(level)
        self.source = source
        self._sock = make_socket(zmq.PUSH, connect=addr, sndhwm=hwm)
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Send one record (the handler's lock serialises threads over the one socket)."""
        try:
            meta = {
                "src": self.source,
                "lvl": record.levelname,
                "t": record.created,
                "name": record.name,
                "msg": self.format(record),
            }
            self._sock.send(wire.encode(wire.LOG, meta)[0], zmq.NOBLOCK)
        except zmq.ZMQError:
            self.dropped += 1
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        """Close the socket (called by logging.shutdown)."""
        try:
            self._sock.close(CLOSE_LINGER_MS)
        finally:
            super().close()
