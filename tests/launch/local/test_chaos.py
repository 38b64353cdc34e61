"""Random SIGKILLs and SIGSTOPs of every process of a local run, and a wall-clock step, at once
(issue 25, "a process and clock fault test").

A real `create --local --detach` PPO run on CartPole with a step budget. While it runs, a seeded
schedule signals each of its roles, the fork server and the supervisor at random moments: SIGKILL
(a crash) or SIGSTOP for up to 3 s, then SIGCONT (a process that hangs, or a host that stalls it).
The supervisor is only stopped: its SIGKILL is tests/launch/local/test_orphans.py, and the
operator's is tests/operator/test_operator_cluster.py. Every process's wall clock jumps a day ahead
at a random moment in the same window (the sitecustomize of test_clock_step.py).

Then: the learner's iteration, sampled all along, never went back by more than one checkpoint
period (what a restart from the newest checkpoint may lose); the run ends once, Succeeded at its
budget, with its results; no process of it is left, and its ports are free.

The seed is printed and taken from $SURREAL_CHAOS_SEED when set, to replay a failing schedule.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from surreal_kube.launch.local.backend import pid_alive
from surreal_kube.launch.local.orphans import is_role_of
from tests.launch.local.test_clock_step import SITECUSTOMIZE, STEP
from tests.launch.local.test_local_experiment import (
    SK,
    SMALL,
    released,
    sk,
    state_of,
    status_of,
    wait_for,
)

pytestmark = pytest.mark.slow

BUDGET = 300_000
ONE_ENV = ["--set", "agents.envsPerAgent=1"]
"""The schedule (faults, then the clock step) is sized on the pace of one CartPole per agent: at
PPO's default of 4 the run reached BUDGET in half a minute, before its clock step."""
PERIOD = 5
"""Learner iterations between checkpoints (SMALL sets session.checkpoint.period=5)."""
ROLES = [
    "learner", "replay", "ps", "ps-shard-0", "agents-0", "agents-1", "evals-0", "tensorplex",
    "loggerplex",
]  # fmt: skip
LEARNER_KILLS = 2
"""At most this many SIGKILLs of the learner (and one of the fork server, which takes every role
it forked with it): within the 5 restarts a learner has before the run fails."""
FINAL = ("Succeeded", "Failed", "Stopped")


@dataclass
class Fault:
    target: str
    sig: signal.Signals
    after: float
    """Seconds after the previous fault."""
    hold: float = 0.0
    """For SIGSTOP: seconds until SIGCONT."""


def schedule(rng: random.Random) -> list[Fault]:
    """Every role, the fork server and the supervisor at least once, in a random order, then a
    few more at random; SIGKILL or SIGSTOP for each, within the learner's restart allowance."""
    targets = [*ROLES, "forkserver", "supervisor"]
    rng.shuffle(targets)
    targets += rng.choices(ROLES, k=6)
    faults: list[Fault] = []
    kills = {"learner": 0, "forkserver": 0}
    for target in targets:
        kill = target != "supervisor" and rng.random() < 0.6
        if target in kills and kill:
            limit = 1 if target == "forkserver" else LEARNER_KILLS
            kill = kills[target] < limit
            kills[target] += kill
        sig = signal.SIGKILL if kill else signal.SIGSTOP
        hold = 0.0 if kill else rng.uniform(0.5, 3.0)
        faults.append(Fault(target, sig, after=rng.uniform(0.5, 2.0), hold=hold))
    return faults


def pid_of(folder: Path, target: str) -> int | None:
    state = state_of(folder)
    if target in ("forkserver", "supervisor"):
        return state.get(f"{target}_pid")
    proc = state.get("processes", {}).get(target, {})
    return proc.get("pid") if proc.get("state") == "running" else None


SEEN_AFTER = 0.5
"""Seconds after which a SIGKILLed process's exit is surely there for the supervisor to reap."""


def running_after(folder: Path, moment: float) -> bool:
    """Whether the first state the supervisor writes after `moment` says Running: the poll that
    wrote it looked for exits first, so it saw a death of before `moment` and counted a restart.
    (Before: a kill counted as early when the state read before it said Running below 0.9 of
    the budget; that count lags its poll, and CI's run took the rest of its budget between the
    read and the kill: the supervisor was stopping and, rightly, restarted nothing.)"""
    deadline = moment + 30  # the supervisor may be SIGSTOPped for a while itself
    while time.time() < deadline:
        try:
            written = (folder / "state.json").stat().st_mtime
        except FileNotFoundError:
            written = 0.0
        if written >= moment:
            return state_of(folder).get("phase") == "Running"
        time.sleep(0.05)
    return False


def signal_target(target: str, pid: int, sig: signal.Signals) -> None:
    """Roles are process groups of their own (signalled as a unit, as the supervisor does); the
    fork server and the supervisor are single processes."""
    try:
        if target in ("forkserver", "supervisor"):
            os.kill(pid, sig)
        else:
            os.killpg(pid, sig)
    except ProcessLookupError:
        pass  # it ended between the state's write and now: nothing to signal


class IterationWatch:
    """Samples the learner's reported iteration every 0.1 s from its status file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.samples: list[int] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.1):
            it = status_of(self.folder, "learner").get("iteration")
            if isinstance(it, int) and (not self.samples or it != self.samples[-1]):
                self.samples.append(it)

    def stop(self) -> list[int]:
        self._done.set()
        self._thread.join(5)
        return self.samples


def largest_step_back(samples: list[int]) -> int:
    top, back = 0, 0
    for it in samples:
        back = max(back, top - it)
        top = max(top, it)
    return back


def processes_of(folder: Path) -> list[int]:
    """Every process on the machine that belongs to this experiment (by its environment)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and is_role_of(int(p), folder)]


def test_random_kills_stops_and_a_clock_step_end_the_run_once_with_results(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("SURREAL_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"chaos seed: {seed} (SURREAL_CHAOS_SEED={seed} replays this schedule)")
    rng = random.Random(seed)
    faults = schedule(rng)

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    step_at = time.time() + 10 + rng.uniform(0, sum(f.after for f in faults))
    env = dict(os.environ, PYTHONPATH=path, CLOCK_STEP_AT=str(step_at))
    root = tmp_path / "exps"
    res = subprocess.run(
        [*SK, "create", "exp-chaos", "--local", "--detach", *SMALL, *ONE_ENV, "--max-env-steps",
         str(BUDGET), "--root", str(root)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    folder = Path(res.stdout.strip())
    watch = IterationWatch(folder)
    done: list[str] = []
    try:
        wait_for("the learner iterating and the agents acting with its parameters", lambda: (
            status_of(folder, "learner").get("iteration", 0) >= 2
            and status_of(folder, "agents-1").get("param_version", -1) >= 1))  # fmt: skip
        early: set[str] = set()  # killed with time to restart before the budget
        spent = 0.0  # of the next fault's wait, spent reading what a kill met: the pace holds
        for fault in faults:
            time.sleep(max(0.0, fault.after - spent))
            spent = 0.0
            if state_of(folder).get("phase") in FINAL:
                break
            pid = pid_of(folder, fault.target)
            if pid is None:
                continue  # waiting out a restart's backoff: nothing running to signal
            signal_target(fault.target, pid, fault.sig)
            if fault.sig == signal.SIGKILL:
                killed = time.time()
                if running_after(folder, killed + SEEN_AFTER):
                    early.add(fault.target)
                spent = time.time() - killed
            if fault.sig == signal.SIGSTOP:
                time.sleep(fault.hold)
                signal_target(fault.target, pid, signal.SIGCONT)
            done.append(f"{fault.target}:{fault.sig.name}")
        print("faults:", " ".join(done))
        assert len(done) >= len(ROLES), ("the run ended before most faults", seed, done)
        wait_for("the run to end", lambda: state_of(folder).get("phase") in FINAL, timeout=900)
        samples = watch.stop()
        state = state_of(folder)
        # every pid it ever had, before `delete` below can clean up after a broken run
        pids = [*(p["pid"] for p in state["processes"].values() if p.get("pid")),
                state.get("forkserver_pid"), state.get("supervisor_pid")]  # fmt: skip
    finally:
        watch.stop()
        sk("delete", "exp-chaos", "--keep-files", root=root)

    context = (seed, done)
    assert state["phase"] == "Succeeded", (state.get("reason"), state["processes"], context)
    assert state["reason"] == f"reached {BUDGET} env steps", context
    assert state["env_steps"] == BUDGET, context
    # the clock step happened while it ran, and counted for nothing in its time
    assert status_of(folder, "learner")["updated_at"] >= step_at + STEP, context
    assert state["elapsed"] < STEP, context

    # a restart resumes from the newest checkpoint: at most one period of iterations lost
    assert samples and samples[-1] >= samples[0], (samples, context)
    assert largest_step_back(samples) <= PERIOD, (samples, context)
    # a role killed while the supervisor was already stopping at the budget is not restarted
    kills = {f.split(":")[0] for f in done if f.endswith("SIGKILL")} & early
    restarts = {name: p["restarts"] for name, p in state["processes"].items()}
    assert all(restarts[name] >= 1 for name in kills & set(ROLES)), (restarts, context)

    # it ended once, with its results
    ends = re.findall(r"supervisor: (Succeeded|Failed|Stopped):", (folder / "logs" /
                      "supervisor.log").read_text())  # fmt: skip
    assert ends == ["Succeeded"], (ends, context)
    summary = json.loads((folder / "results" / "summary.json").read_text())
    assert summary["phase"] == "Succeeded" and summary["env_steps"] == BUDGET, context
    assert (folder / "results" / "learning_curve.png").stat().st_size > 5000

    # nothing left: not a role, not the fork server, not the supervisor, not a port
    assert not [p for p in pids if p and pid_alive(p)], context
    assert not processes_of(folder), context
    assert released(state), context
