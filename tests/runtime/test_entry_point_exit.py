"""A role stopped by SIGTERM ends without the interpreter's finalization (runtime/main.py says
why: its last garbage collection over torch's objects took seconds of every learner's stop).

What shows whether finalization ran: an atexit handler, installed in the role's interpreter by a
`sitecustomize` module on PYTHONPATH, that writes a file. A usage error (argparse's SystemExit,
before any role exists) still finalizes normally, which shows the handler is live.

The file is named with the writer's pid: the role's own libraries start Python children of
their own (glfw's import probes its library's version in a `python -c`), and those finalize
as any short script does. What the test asks is whether the role's process did.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

START = 300.0
"""Bound on the role's start-up on a loaded machine (turns a hang into a failure)."""

SITECUSTOMIZE = """
import atexit, os

def _mark():
    with open(f"{os.environ['FINALIZED_MARK']}.{os.getpid()}", "w") as f:
        f.write("finalized")

atexit.register(_mark)
"""


def _env(run, tmp_path: Path, process: str) -> tuple[dict[str, str], Path]:
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    mark = tmp_path / f"{process}.finalized"
    env = run.env(process)
    env["PYTHONPATH"] = str(hooks)
    env["FINALIZED_MARK"] = str(mark)
    return env, mark


def test_a_stopped_role_skips_finalization(local_run, tmp_path):
    run = local_run()
    env, mark = _env(run, tmp_path, "replay")
    role = run.start("replay", env)
    deadline = time.monotonic() + START
    while "replay load balancer:" not in run.log_path("replay").read_text(errors="replace"):
        assert role.poll() is None, run.log_path("replay").read_text()
        assert time.monotonic() < deadline, run.log_path("replay").read_text()
        time.sleep(0.05)
    role.send_signal(signal.SIGTERM)
    assert role.wait(60) == 0
    assert "stopped (SIGTERM)" in run.log_path("replay").read_text()  # closed before the exit
    assert not mark.with_name(f"{mark.name}.{role.pid}").exists()


def test_a_usage_error_still_finalizes(local_run, tmp_path):
    run = local_run()
    env, mark = _env(run, tmp_path, "replay")
    proc = subprocess.Popen(
        [sys.executable, "-m", "surreal_kube.runtime", "no-such-role"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "invalid choice" in err
    assert mark.with_name(f"{mark.name}.{proc.pid}").read_text() == "finalized"
