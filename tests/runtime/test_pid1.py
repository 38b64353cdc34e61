"""`surreal-kube-role` as PID 1 of its own PID namespace, as in a pod: signals and orphans.

The kernel drops every signal whose disposition is the default for a namespace's init, so a role
that is PID 1 and has no handler yet ignores the kubelet's SIGTERM and waits out the grace
period. `unshare --pid --fork --mount-proc` makes the real entry point PID 1 of a new namespace
(we need root for it). The moments are found from what the process has mapped, not from sleeps:
pydantic's extension (the spec's import, before any role code) and libtorch (the learner's
`import torch`). Waits are bounded only to turn a hang into a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.harness import LocalRun

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
    reason="needs root and util-linux's unshare/nsenter for a PID namespace",
)

ENTRY_POINT = str(Path(sys.executable).parent / "surreal-kube-role")
HANG = 60.0
"""Seconds after which a role that has not exited after SIGTERM is taken as hung (it exits in a
few; the grace period it would otherwise wait out is 30-60 s, and without the fix forever)."""
START = 300.0
"""Bound on a role's start-up (a learner took over 30 s with a load average of 11 on 2 cores)."""


class Pid1:
    """One role started as PID 1 of a new PID namespace, through the real entry point."""

    def __init__(self, run: LocalRun, process: str) -> None:
        proc = run.topology.process(process)
        self.log = run.log_path(process)
        with open(self.log, "ab") as out:
            self.unshare = subprocess.Popen(
                [
                    "unshare",
                    "--pid",
                    "--fork",
                    "--mount-proc",
                    "--kill-child",
                    ENTRY_POINT,
                    proc.role,
                    "--id",
                    str(proc.index),
                ],
                env=run.env(process),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.pid1 = self._first_child()

    def _first_child(self) -> int:
        deadline = time.monotonic() + START
        while time.monotonic() < deadline:
            children = _children(self.unshare.pid)
            if children:
                return children[0]
            assert self.unshare.poll() is None, f"unshare exited: {self.text()}"
            time.sleep(0.005)
        raise AssertionError("unshare never started its child")

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def processes(self) -> list[int]:
        """PID 1 and its descendants (host pids)."""
        out, todo = [], [self.pid1]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(_children(pid))
        return out

    def wait_mapped(self, library: str) -> None:
        """Until some process of the namespace has `library` mapped (it is being imported)."""
        deadline = time.monotonic() + START
        while time.monotonic() < deadline:
            for pid in self.processes():
                try:
                    if library in Path(f"/proc/{pid}/maps").read_text():
                        return
                except OSError:
                    continue
            assert self.unshare.poll() is None, f"exited before mapping {library}: {self.text()}"
            time.sleep(0.005)
        raise AssertionError(f"{library} never mapped:\n{self.text()}")

    def wait_log(self, text: str) -> None:
        deadline = time.monotonic() + START
        while text not in self.text():
            assert time.monotonic() < deadline, f"never logged {text!r}:\n{self.text()}"
            assert self.unshare.poll() is None, f"exited before {text!r}:\n{self.text()}"
            time.sleep(0.05)

    def terminate(self) -> int:
        """SIGTERM to PID 1, as the kubelet sends it; the exit code (AssertionError if hung)."""
        os.kill(self.pid1, signal.SIGTERM)
        try:
            return self.unshare.wait(HANG)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running {HANG:.0f} s after SIGTERM to PID 1:\n{self.text()}"
            ) from None

    def kill(self) -> None:
        if self.unshare.poll() is None:
            # SIGKILL to a namespace's init kills every process in it
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid1, signal.SIGKILL)
            self.unshare.wait(10)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.extend(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return out


class Namespaces:
    """Roles of one local run, each PID 1 of its own namespace; all killed after the test."""

    def __init__(self, run: LocalRun) -> None:
        self.run = run
        self.started: list[Pid1] = []

    def start(self, process: str) -> Pid1:
        p = Pid1(self.run, process)
        self.started.append(p)
        return p


@pytest.fixture
def pid1(local_run) -> Iterator[Namespaces]:
    spaces = Namespaces(local_run())
    yield spaces
    for p in spaces.started:
        p.kill()


def test_sigterm_while_importing_light_libraries_exits_143(pid1):
    """Before the fix: PID 1 had no handler until its imports were done; the signal was lost."""
    role = pid1.start("replay")
    role.wait_mapped("_pydantic_core")
    assert role.terminate() == 143, role.text()
    assert "SIGTERM during start-up" in role.text()


def test_sigterm_while_the_learner_imports_torch_exits_143(pid1):
    role = pid1.start("learner")
    role.wait_mapped("libtorch_cpu")
    assert role.terminate() == 143, role.text()
    assert "SIGTERM during start-up" in role.text()


def test_sigterm_once_running_is_the_clean_stop(pid1):
    role = pid1.start("learner")
    role.wait_log("learner: ")
    role.wait_mapped("libtorch_cpu")  # loaded long before; makes the test's intent explicit
    status = pid1.run.dir / "status" / "learner.json"
    assert role.terminate() == 0, role.text()
    assert "SIGTERM received" in role.text()
    assert json.loads(status.read_text())["state"] == "stopped"


def test_pid1_reaps_an_orphan_left_in_the_namespace(pid1):
    """An exec probe's background child outlives the probe: it is reparented to PID 1."""
    role = pid1.start("replay")
    role.wait_log("replay load balancer:")
    out = subprocess.run(
        [
            "nsenter",
            "--target",
            str(role.pid1),
            "--pid",
            "--mount",
            "sh",
            "-c",
            "sleep 2 >/dev/null 2>&1 & echo $!",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG,
    )
    inner = out.stdout.strip()
    orphan = next(
        (p for p in role.processes() if _ns_pid(p) == inner), None
    )  # reparented to PID 1 the moment its shell exited
    assert orphan is not None, f"no process {inner} in the namespace: {role.processes()}"
    deadline = time.monotonic() + HANG
    while Path(f"/proc/{orphan}").exists():
        assert time.monotonic() < deadline, f"orphan {orphan} never reaped: {_state(orphan)}"
        time.sleep(0.05)
    assert role.unshare.poll() is None, "PID 1 must go on after reaping"
    assert role.terminate() == 0, role.text()


def _ns_pid(pid: int) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return line.split()[-1]
    except OSError:
        return None
    return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except OSError:
        return "gone"
