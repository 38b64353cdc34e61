"""The learner's heartbeat and the liveness probe's command, against a real learner process.

The probe command is the one the pod template renders (tests/launch/kube/test_probes.py checks
the rendering): `python -m surreal_kube.runtime.lifecycle heartbeat FILE --max-age S`. A loop
stuck inside an update is made real with SIGSTOP: the process is alive, its loop does not turn.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from surreal_kube.runtime.lifecycle import (
    HEARTBEAT_ENV,
    Heartbeat,
    clear_heartbeat,
    heartbeat_problem,
)

START = 300.0
"""Bound on a role's start-up on a loaded machine (turns a hang into a failure)."""


PROBE = [sys.executable, "-m", "surreal_kube.runtime.lifecycle", "heartbeat"]


def probe(path: Path, max_age: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROBE, str(path), "--max-age", str(max_age)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_problem_names_missing_stale_and_accepts_fresh(tmp_path):
    beat = tmp_path / "hb"
    assert "no heartbeat" in (heartbeat_problem(beat, 10) or "")
    beat.touch()
    assert heartbeat_problem(beat, 10) is None
    old = time.time() - 100
    os.utime(beat, (old, old))
    problem = heartbeat_problem(beat, 10)
    assert problem is not None and "100 s old (bound 10 s)" in problem


def test_a_wall_clock_step_does_not_make_a_live_loop_look_stuck(tmp_path):
    beat = tmp_path / "hb"
    Heartbeat(beat).beat()
    day_ago = time.time() - 86_400
    os.utime(beat, (day_ago, day_ago))  # how the file looks after the clock stepped a day ahead
    assert heartbeat_problem(beat, 60) is None
    res = probe(beat, 60)  # before: "heartbeat ... is 86400 s old", and the kubelet kills it
    assert res.returncode == 0, res.stderr
    # a loop that really stopped beating is still found out, by the monotonic clock
    beat.write_text(f"{time.monotonic() - 100:020.3f}\n")
    problem = heartbeat_problem(beat, 10)
    assert problem is not None and "the main loop is stuck" in problem
    assert probe(beat, 10).returncode == 1


def test_probe_refuses_a_bad_bound(tmp_path):
    res = probe(tmp_path / "hb", 0)
    assert res.returncode == 2 and "--max-age must be a positive number" in res.stderr


def test_heartbeat_does_nothing_unless_named(tmp_path):
    Heartbeat.from_env({}).beat()  # no file anywhere, no error
    path = tmp_path / "hb"
    Heartbeat.from_env({HEARTBEAT_ENV: str(path)}).beat()
    assert path.exists()
    clear_heartbeat({HEARTBEAT_ENV: str(path)})
    assert not path.exists()
    clear_heartbeat({HEARTBEAT_ENV: str(path)})  # already gone: fine


def _wait(condition, what: str, popen: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START
    while not condition():
        assert popen.poll() is None, f"the role exited:\n{log.read_text(errors='replace')}"
        assert time.monotonic() < deadline, f"{what}:\n{log.read_text(errors='replace')}"
        time.sleep(0.05)


@pytest.mark.parametrize("process", ["learner", "agents-0", "evals-0"])
def test_a_waiting_role_beats_and_a_stuck_one_fails_the_probe(local_run, tmp_path, process):
    """Each role with a liveness probe (render/objects.py LIVENESS_ROLES). Nothing else of the
    experiment runs: the learner waits for data, agents and evals for parameters, and waiting
    is alive. Before agents and evals beat, theirs never appeared."""
    run = local_run()
    beat = tmp_path / f"{process}.heartbeat"
    beat.write_text("left by the previous container")  # a restart finds the old file
    env = run.env(process)
    env[HEARTBEAT_ENV] = str(beat)
    learner = run.start(process, env)
    log = run.log_path(process)

    def fresh_file() -> bool:
        try:
            # removed at start, written anew by the loop (its monotonic clock)
            return beat.read_text().strip().replace(".", "").isdigit()
        except FileNotFoundError:
            return False

    _wait(fresh_file, "the loop never beat", learner, log)
    first = beat.stat().st_mtime_ns
    _wait(lambda: beat.stat().st_mtime_ns > first, "no second beat while waiting", learner, log)
    res = probe(beat, 60)
    assert res.returncode == 0, res.stderr

    learner.send_signal(signal.SIGSTOP)  # the loop stops turning, as inside a hung update
    try:
        _wait(lambda: time.time() - beat.stat().st_mtime > 3, "file never aged", learner, log)
        res = probe(beat, 3)
        assert res.returncode == 1
        assert "the main loop is stuck" in res.stderr
    finally:
        learner.send_signal(signal.SIGCONT)
    learner.send_signal(signal.SIGTERM)
    try:
        assert learner.wait(60) == 0
    except subprocess.TimeoutExpired:
        # seen once with a load average of 31: say where each thread was before killing it
        where = _threads(learner.pid)
        learner.kill()
        learner.wait()
        raise AssertionError(
            f"learner still running 60 s after SIGTERM; threads: {where}\n"
            f"{log.read_text(errors='replace')}"
        ) from None


def _threads(pid: int) -> dict[str, str]:
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
            state = (task / "stat").read_text().split(") ")[-1][:1]
            out[f"{task.name} {name}"] = f"{state} {(task / 'wchan').read_text()}"
        except OSError:
            continue
    return out
