"""Child processes for tests that do not depend on how the test run itself was started.

A test run started as a background job of a non-interactive shell (`nohup make test &`, cron,
some CI runners) inherits SIGINT as ignored, and a child inherits that in turn: a test that stops
a child with SIGINT then waits forever. `spawn` gives the child the default dispositions a
terminal would (or SIGINT ignored on purpose, to show a command copes with it) in a process
group of its own; `stop` signals it and kills the whole group if it lingers, so a failing test
leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any


def spawn(
    args: Sequence[str], *, ignore_sigint: bool = False, **popen: Any
) -> subprocess.Popen[Any]:
    """Start `args` in a new process group with SIGINT and SIGTERM at their defaults."""

    def dispositions() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return subprocess.Popen(list(args), preexec_fn=dispositions, start_new_session=True, **popen)


def stop(
    proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 20.0
) -> tuple[Any, Any]:
    """Send `sig`, wait up to `timeout` s; on a timeout kill the group and fail the test."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise AssertionError(
            f"{proc.args!r} still running {timeout:.0f}s after {signal.Signals(sig).name}; killed"
        ) from None


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child's whole process group and reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=10)


@contextlib.contextmanager
def running(
    args: Sequence[str], *, ignore_sigint: bool = False, **popen: Any
) -> Iterator[subprocess.Popen[Any]]:
    """`spawn`, and whatever happens in the block, leave no process of the group behind."""
    proc = spawn(args, ignore_sigint=ignore_sigint, **popen)
    try:
        yield proc
    finally:
        kill_group(proc)  # also what the child left in its group after it exited
