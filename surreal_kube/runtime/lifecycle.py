"""Start and stop of a role process: SIGTERM/SIGINT set a flag, loops check it and flush.

Kubernetes sends SIGTERM and waits `terminationGracePeriodSeconds`; the local backend does the
same. Every role loop polls its sockets with short timeouts (<= 0.1 s) and checks `stop`, so a
role finishes its current step, flushes what it holds and exits within a few seconds. A second
signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType

log = logging.getLogger(__name__)


class StopFlag:
    """Set by a signal (or by the role itself); loops test `is_set()` or `wait()` on it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def set(self, reason: str = "") -> None:
        """Ask every loop to finish."""
        if not self._event.is_set():
            self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        """True once a stop was asked for."""
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds, waking early on stop; returns `is_set()`."""
        return self._event.wait(timeout)


def install_signal_handlers(stop: StopFlag) -> None:
    """SIGTERM and SIGINT ask for a clean stop; a second one exits immediately."""

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("second %s: exiting now", name)
            os._exit(128 + signum)
        log.info("%s received: flushing and stopping", name)
        stop.set(name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


class Every:
    """True at most once per `seconds` (for periodic metrics, status files, logs)."""

    def __init__(self, seconds: float, *, now: bool = False) -> None:
        self.seconds = seconds
        self._next = time.monotonic() if now else time.monotonic() + seconds

    def __call__(self) -> bool:
        """Whether the period has elapsed (and start the next one if so)."""
        t = time.monotonic()
        if t >= self._next:
            self._next = t + self.seconds
            return True
        return False


class RateMeter:
    """Turns a running total into a rate over the time since the previous reading."""

    def __init__(self) -> None:
        self._last_t = time.monotonic()
        self._last_n = 0.0

    def rate(self, total: float) -> float:
        """Events per second since the previous call."""
        now = time.monotonic()
        dt = max(now - self._last_t, 1e-9)
        value = (total - self._last_n) / dt
        self._last_t, self._last_n = now, total
        return value
