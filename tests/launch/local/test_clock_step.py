"""A whole local run whose wall clock is stepped a day ahead mid-run, in every one of its
processes (supervisor, fork server, roles) at the same moment: a `sitecustomize` on PYTHONPATH
makes `time.time()` jump by STEP seconds once the real clock passes $CLOCK_STEP_AT, as NTP
correcting a clock a day behind would. `time.monotonic()` is left alone, as the kernel does.

Before the fix the supervisor measured the time budget with time.time(): the step ended the run
at once, with a day of "wall time" in its summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.launch.local.test_local_experiment import SK, SMALL, sk, state_of, status_of, wait_for

pytestmark = pytest.mark.slow

STEP = 86_400.0
SITECUSTOMIZE = f"""
import os, time

_real = time.time
_at = float(os.environ["CLOCK_STEP_AT"])

def _stepped():
    now = _real()
    return now + {STEP} if now >= _at else now

time.time = _stepped
"""


def test_a_wall_clock_step_neither_ends_the_run_nor_counts_in_its_time(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    root = tmp_path / "exps"
    path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    step_at = time.time() + 8  # a few seconds into the run (its start takes about that)
    env = dict(os.environ, PYTHONPATH=path, CLOCK_STEP_AT=str(step_at))
    budget = 20
    res = subprocess.run(
        [*SK, "create", "exp-clock", "--local", "--detach", *SMALL, "--max-time", str(budget),
         "--root", str(root)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    folder = root / "exp-clock"
    try:
        wait_for("the run to finish", lambda: state_of(folder).get("phase") == "Succeeded",
                 timeout=400)  # fmt: skip
    finally:
        sk("delete", "exp-clock", "--keep-files", root=root)
    state = state_of(folder)
    assert state["reason"] == f"reached {budget} s of wall time"
    # the step happened while the run ran: its roles' last reports carry the stepped clock
    assert status_of(folder, "learner")["updated_at"] >= step_at + STEP
    summary = json.loads((folder / "results" / "summary.json").read_text())
    # it ran its budget of run time; the day the clock jumped counted for nothing
    assert budget <= summary["wall_time_seconds"] < STEP, summary["wall_time_seconds"]
    assert budget <= state["elapsed"] < STEP
    assert all(p["restarts"] == 0 for p in state["processes"].values()), state["processes"]
