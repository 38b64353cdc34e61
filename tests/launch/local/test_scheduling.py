"""The roles' niceness holds: every role of a local experiment leads its own process group (it
is signalled as a unit) inside the one session of its supervisor.

Before the fix each role started a session of its own. Where the kernel groups sessions for the
scheduler (autogroup, on by default in most distributions and on this machine), a role in a
session of its own competes as a group of its own and its nice value orders nothing: agents at
nice 10 took as much CPU as the learner at nice 0 (runtime.main.NICENESS).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch.local.test_local_experiment import SMALL, sk, state_of, wait_for

pytestmark = pytest.mark.slow

AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")


def autogroups_on() -> bool:
    """Whether this kernel groups each session for the scheduler."""
    return AUTOGROUP.is_file() and AUTOGROUP.read_text().strip() == "1"


def autogroup_of(pid: int) -> str | None:
    """`/autogroup-N nice K` of a process, where the kernel has autogroups."""
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().split(" nice ")[0]
    except OSError:
        return None


def busy_cpu_seconds(new_session: bool) -> tuple[float, float]:
    """CPU seconds of a nice-0 and a nice-10 busy loop sharing one core for 1.5 s, each started
    in a session of its own or both in ours."""
    code = (
        "import os, sys, time\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "os.nice(int(sys.argv[1]))\n"
        "end = time.monotonic() + 1.5\n"
        "while time.monotonic() < end: pass\n"
        "print(time.process_time())\n"
    )
    where = {"start_new_session": True} if new_session else {"process_group": 0}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(n)], stdout=subprocess.PIPE, **where)
        for n in (0, 10)
    ]
    nice0, nice10 = (float(p.communicate(timeout=30)[0]) for p in procs)
    return nice0, nice10


@pytest.mark.parametrize("forkserver", ["1", "0"], ids=["forked", "own-interpreters"])
def test_every_role_leads_a_group_in_the_supervisors_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forkserver: str
) -> None:
    monkeypatch.setenv("SURREAL_KUBE_FORKSERVER", forkserver)
    root = tmp_path / "exps"
    res = sk("create", "exp-sched", "--local", "--detach", *SMALL, root=root)
    assert res.returncode == 0, res.stderr
    folder = root / "exp-sched"
    try:

        def started() -> dict | None:
            state = state_of(folder)
            procs = state.get("processes") or {}
            return state if procs and all(p.get("pid") for p in procs.values()) else None

        state = wait_for("every role started", started)
        supervisor = state["supervisor_pid"]
        pids = {name: p["pid"] for name, p in state["processes"].items()}
        sessions = {name: os.getsid(pid) for name, pid in pids.items()}
        assert set(sessions.values()) == {os.getsid(supervisor)}, sessions
        assert os.getsid(supervisor) != os.getsid(0)  # a detached run is not our session's
        groups = {name: os.getpgid(pid) for name, pid in pids.items()}
        assert groups == pids  # each its own group: killpg stops a role and all it started
        if autogroups_on():
            assert len({autogroup_of(pid) for pid in pids.values()}) == 1
    finally:
        sk("delete", "exp-sched", "--yes", root=root)


@pytest.mark.skipif(
    not autogroups_on(), reason="the kernel does not group sessions for the scheduler here"
)
def test_niceness_orders_processes_of_one_session_only() -> None:
    """Why roles share their supervisor's session (the kernel's behaviour the fix relies on)."""
    nice0, nice10 = busy_cpu_seconds(new_session=False)
    assert nice0 > 3 * nice10, (nice0, nice10)  # weights 1024 and 110: about 9 to 1
    nice0, nice10 = busy_cpu_seconds(new_session=True)
    assert nice0 < 2 * nice10, (nice0, nice10)  # each session a group: about half each
