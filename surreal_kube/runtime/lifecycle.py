"""Start and stop of a role process: SIGTERM/SIGINT set a flag, loops check it and flush.

Kubernetes sends SIGTERM and waits `terminationGracePeriodSeconds`; the local backend does the
same. Every role loop polls its sockets with short timeouts (<= 0.1 s) and checks `stop`, so a
role finishes its current step, flushes what it holds and exits within a few seconds. A second
signal exits at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
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


SUPERVISOR_PID_ENV = "SURREAL_SUPERVISOR_PID"
"""Set by the local backend: the pid of the process that started this role and supervises it."""
ORPHAN_GRACE = 20.0
"""Seconds an orphaned role may take to flush and stop before it exits regardless."""
_PR_SET_PDEATHSIG = 1
PARENT_DEATH_SIGNAL = signal.SIGUSR2
"""What the kernel sends a role when its parent dies (a handler checks, then stops the role)."""


def _set_parent_death_signal(sig: signal.Signals) -> bool:
    """Ask Linux to send `sig` when the parent dies (prctl PR_SET_PDEATHSIG); False elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_supervisor(stop: StopFlag, env: dict[str, str] | None = None) -> threading.Thread | None:
    """Stop this role when the process that supervises it is gone; None when none is named.

    A supervisor killed with SIGKILL (or by the OOM killer, or with its terminal) cannot stop its
    roles, and roles reparented to init would run on unseen. Two mechanisms, because each has a
    gap: PR_SET_PDEATHSIG signals at once, but fires on the death of the parent *thread* that
    forked us (so its handler checks that the parent process really changed) and not at all if
    the parent died before we set it; a watch thread compares the parent pid with the
    supervisor's every half second, which covers both. Either way the role stops as on SIGTERM
    (flush, checkpoint), and exits regardless after `ORPHAN_GRACE`. Kubernetes needs none of
    this (a pod's containers die with the pod), and sets no pid.
    """
    raw = (os.environ if env is None else env).get(SUPERVISOR_PID_ENV)
    if not raw:
        return None
    try:
        supervisor = int(raw)
    except ValueError:
        log.warning("%s=%r is not a pid; not watching the supervisor", SUPERVISOR_PID_ENV, raw)
        return None

    def on_parent_death(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != supervisor:  # not just the thread that forked us
            stop.set("supervisor gone")

    signal.signal(PARENT_DEATH_SIGNAL, on_parent_death)
    _set_parent_death_signal(PARENT_DEATH_SIGNAL)

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(0.5)
        log.warning("the supervisor (pid %d) is gone: stopping", supervisor)
        stop.set("supervisor gone")
        time.sleep(ORPHAN_GRACE)
        log.error("still running %.0f s after the supervisor died: exiting now", ORPHAN_GRACE)
        logging.shutdown()
        os._exit(1)

    thread = threading.Thread(target=watch, name="supervisor-watch", daemon=True)
    thread.start()
    return thread


HEARTBEAT_ENV = "SURREAL_HEARTBEAT_FILE"
"""Set (by the Kubernetes backend, for the roles that have a liveness probe) to the file the
role's main loop touches; unset, nothing beats (local runs have their supervisor)."""
HEARTBEAT_PERIOD = 1.0
"""Seconds between two touches of the heartbeat file, at most (the probe's bound is minutes)."""


class Heartbeat:
    """Touched from a role's main loop, so that a liveness probe can tell a loop that turns from
    one that is stuck (`python -m surreal_kube.runtime.lifecycle heartbeat FILE --max-age S`).

    Beat from the loop itself, never from a thread: a thread would go on beating while the loop
    is stuck inside an update. A loop that only waits for data still turns (its waits are short
    polls) and so still beats: waiting is alive, hanging is not.

    Each beat writes the monotonic clock into the file (fixed width, one write): the probe runs
    on the same kernel and compares with its own monotonic clock, so a step of the wall clock
    (which moves file times) never makes a live loop look stuck and get its container killed.
    """

    def __init__(self, path: Path | None, period: float = HEARTBEAT_PERIOD) -> None:
        self.path = path
        self.period = period
        self._next = 0.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Heartbeat:
        """The heartbeat named by SURREAL_HEARTBEAT_FILE (one that does nothing when unset)."""
        raw = (os.environ if env is None else env).get(HEARTBEAT_ENV)
        return cls(Path(raw) if raw else None)

    def beat(self) -> None:
        """Touch the file (at most once per `period`); a failure is logged once, not raised."""
        if self.path is None:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.period
        try:
            _write_beat(self.path, now)
        except OSError as exc:
            log.warning(
                "cannot touch the heartbeat %s (%s): the liveness probe will fail", self.path, exc
            )
            self.path = None


def _write_beat(path: Path, monotonic: float) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, f"{monotonic:020.3f}\n".encode(), 0)  # same width: never half of one
    finally:
        os.close(fd)


def _beat_in(path: Path) -> float | None:
    """The monotonic time a beat wrote into `path`; None for a file without one (touched)."""
    try:
        return float(path.read_bytes()[:64].decode("ascii").strip())
    except (ValueError, UnicodeDecodeError):
        return None


def clear_heartbeat(env: dict[str, str] | None = None) -> None:
    """Remove the heartbeat a previous run of this container left (the pod's /tmp outlives a
    container restart): until the new loop beats, the probes must see none."""
    raw = (os.environ if env is None else env).get(HEARTBEAT_ENV)
    if raw:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(raw)


def heartbeat_problem(path: Path, max_age: float, now: float | None = None) -> str | None:
    """Why `path` does not prove a live loop (missing, or older than `max_age` s); None if fresh.

    The age is the monotonic clock's since the beat written in the file; only a file without one
    is aged by its modification time (against `now`, Unix time)."""
    try:
        mtime = path.stat().st_mtime
        beat = _beat_in(path)
    except FileNotFoundError:
        return f"no heartbeat at {path} yet: the role's main loop has not started"
    except OSError as exc:
        return f"cannot read the heartbeat {path}: {exc}"
    if beat is not None:
        age = time.monotonic() - beat
    else:
        age = (time.time() if now is None else now) - mtime
    if age > max_age:
        return f"heartbeat {path} is {age:.0f} s old (bound {max_age:g} s): the main loop is stuck"
    return None


def probe_main(argv: list[str]) -> int:
    """`python -m surreal_kube.runtime.lifecycle heartbeat FILE --max-age SECONDS`: exit 0 while
    the heartbeat is fresh, 1 (with the reason on stderr, which the kubelet shows in the pod's
    events) when it is missing or stale, 2 for a bad command line. An exec probe: it runs in the
    container, with nothing but the standard library and this module loaded."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m surreal_kube.runtime.lifecycle",
        description="Liveness check: is the role's heartbeat file fresh?",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("heartbeat", help="exit 0 if FILE was touched in the last --max-age s")
    check.add_argument("file", type=Path)
    check.add_argument("--max-age", type=float, required=True, help="seconds")
    args = parser.parse_args(argv)
    if args.max_age <= 0:
        parser.error(f"--max-age must be a positive number of seconds, not {args.max_age:g}")
    problem = heartbeat_problem(args.file, args.max_age)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


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


if __name__ == "__main__":
    sys.exit(probe_main(sys.argv[1:]))
