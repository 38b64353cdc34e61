"""A role stops when the process that supervises it dies (issue 15 item 11), and only then.

The "supervisor" here is a small Python process that starts a child the way the local backend
does (its pid in SURREAL_SUPERVISOR_PID); the child runs the runtime's real watch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.processes import running

CHILD = textwrap.dedent(
    """
    import sys
    from surreal_kube.runtime.lifecycle import StopFlag, install_signal_handlers, watch_supervisor
    stop = StopFlag()
    install_signal_handlers(stop)
    watch_supervisor(stop)
    print("ready", flush=True)
    stop.wait(120)
    print("stopped:", stop.reason, flush=True)
    """
)

SUPERVISOR = textwrap.dedent(
    """
    import os, subprocess, sys, threading, time
    out = open(sys.argv[1], "w")
    env = dict(os.environ, SURREAL_SUPERVISOR_PID=str(os.getpid()))
    def start():
        subprocess.Popen([sys.executable, "-c", sys.argv[2]], env=env, stdout=out,
                         start_new_session=True)
        while "ready" not in open(sys.argv[1]).read():  # its parent-death signal is set
            time.sleep(0.05)
    if sys.argv[3] == "thread":  # started from a thread that then ends: the process lives on
        t = threading.Thread(target=start)
        t.start()
        t.join()
    else:
        start()
    print("started", flush=True)
    time.sleep(120)
    """
)


def _wait_text(path: Path, text: str, timeout: float) -> str:
    end = time.monotonic() + timeout
    content = ""
    while time.monotonic() < end:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {content!r} after {timeout:.0f}s")


def _child_pid(supervisor_pid: int) -> int:
    children = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text().split()
    tasks = [t.name for t in Path(f"/proc/{supervisor_pid}/task").iterdir()]
    for task in tasks:  # a child forked by another thread is listed under that thread
        children += Path(f"/proc/{supervisor_pid}/task/{task}/children").read_text().split()
    assert len(set(children)) == 1, children
    return int(children[0])


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def test_role_stops_when_its_supervisor_is_killed(tmp_path: Path) -> None:
    out = tmp_path / "child.out"
    with running(
        [sys.executable, "-c", SUPERVISOR, str(out), CHILD, "main"], stdout=subprocess.PIPE
    ) as sup:
        assert sup.stdout is not None and sup.stdout.readline() == b"started\n"
        _wait_text(out, "ready", 60)
        child = _child_pid(sup.pid)
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
        _wait_text(out, "stopped: supervisor gone", 10)
        end = time.monotonic() + 10
        while time.monotonic() < end and _alive(child):
            time.sleep(0.1)
        assert not _alive(child), "the orphaned role still runs"


def test_the_forking_thread_ending_is_not_the_supervisor_dying(tmp_path: Path) -> None:
    out = tmp_path / "child.out"
    with running(
        [sys.executable, "-c", SUPERVISOR, str(out), CHILD, "thread"], stdout=subprocess.PIPE
    ) as sup:
        assert sup.stdout is not None and sup.stdout.readline() == b"started\n"
        _wait_text(out, "ready", 60)
        child = _child_pid(sup.pid)
        time.sleep(2)  # the parent-death signal fired when the thread ended; it must be ignored
        assert "stopped" not in out.read_text() and _alive(child)
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
        _wait_text(out, "stopped: supervisor gone", 10)
