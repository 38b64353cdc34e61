"""Starts every process of a local experiment and keeps them alive until the budget is spent.

Each role is its own process group (as a pod would be), started as `surreal-kube-role` with the
environment the topology derives. A process that dies is restarted with exponential backoff and
reconnects by itself (ZeroMQ sockets reconnect, the learner restores its newest checkpoint). Every
restart is logged and counted in the state file, which is also how `status` and `list` see a
detached experiment.

Faults of the machine itself: every interval and budget is measured on the monotonic clock (a
step of the wall clock neither ends a run early nor holds a restart back); restart delays carry
random jitter (roles that died together do not come back in lockstep); a state file the disk
refuses is said once, counted and written again on the next step; and every file of the run is
created closed to other users (umask 077: folder 0700, files 0600).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from surreal_kube.experiment import run_end
from surreal_kube.experiment.run_end import FINAL_EVAL_TIMEOUT, LEARNER_MAX_RESTARTS
from surreal_kube.experiment.spec import Experiment
from surreal_kube.experiment.topology import Process, Topology
from surreal_kube.launch.local import forking
from surreal_kube.launch.local.folder import (
    ExperimentFolder,
    private_files,
    read_json,
    write_json_atomic,
)
from surreal_kube.launch.local.progress import Progress, read_progress
from surreal_kube.launch.local.results import CurveRecorder
from surreal_kube.launch.local.sockets import Wiring

log = logging.getLogger("surreal_kube.local")

SUPERVISOR_PID_ENV = "SURREAL_SUPERVISOR_PID"
"""The roles' environment names their supervisor, whose death they watch for (same name as in
runtime.lifecycle, which the backend must not import)."""

BACKOFF_MIN = 1.0
BACKOFF_MAX = 30.0
JITTER = 0.5
"""A restart waits between (1 - JITTER) and 1 times its backoff, at random."""
HEALTHY_AFTER = 60.0
"""A process that ran this long is healthy again: its backoff resets."""
STOP_GRACE = 10.0
# LEARNER_MAX_RESTARTS and FINAL_EVAL_TIMEOUT come from the end-of-run rule of both backends
# (experiment/run_end.py); read from this module's names, so a test may set them here.

# Stop order: producers first, then consumers, metrics sinks last so that they flush everything.
_STOP_ORDER = (
    "agents",
    "eval",
    "learner",
    "replay-shard",
    "replay",
    "ps-shard",
    "ps",
    "tensorboard",
    "loggerplex",
    "tensorplex",
)
_HEAVY = ("learner", "agents", "eval")
"""Roles that import torch, gymnasium and MuJoCo: the fork server loads those only for them."""
_FINISH_FIRST = ("agents", "learner")
"""Stopped before the final evaluation of a run that reached its budget."""


@dataclass
class Child:
    """Bookkeeping of one supervised process."""

    process: Process
    popen: subprocess.Popen[bytes] | forking.ForkedProcess | None = None
    restarts: int = 0
    state: str = "pending"
    started_at: float = 0.0
    """Monotonic time of the newest start."""
    next_start: float = 0.0
    """Monotonic time of the next start (in backoff)."""
    backoff: float = BACKOFF_MIN
    last_exit: int | None = None
    history: list[str] = field(default_factory=list)


class Supervisor:
    """Runs one experiment's processes (see the module docstring)."""

    use_forkserver = True
    """Fork roles from one warm interpreter (`forking`); SURREAL_KUBE_FORKSERVER=0 turns it off."""

    def __init__(
        self,
        exp: Experiment,
        topology: Topology,
        folder: ExperimentFolder,
        wiring: Wiring,
        *,
        python: str = sys.executable,
    ) -> None:
        self.exp = exp
        self.topology = topology
        self.folder = folder
        self.wiring = wiring
        self.python = python
        self.addresses = wiring.addresses(topology)
        self.children = {p.name: Child(p) for p in topology.processes}
        self.phase = "Starting"
        self.reason = ""
        self.started = time.time()
        """Unix time of the start, shown; what counts is measured from `_started_mono`."""
        self._started_mono = time.monotonic()
        self.elapsed_before = 0.0
        self.state_write_failures = 0
        self._state_fault: str | None = None
        self._curve_fault: str | None = None
        self.stop_requested = False
        self.final_phase = "Stopped"
        self.curve = CurveRecorder(folder.results / "curve.jsonl")
        self.progress = Progress()
        self.forkserver: forking.ForkServer | None = None
        self._folder_id = _identity(folder.path)
        self.folder_lost: str | None = None
        """Why the experiment's folder is no longer this run's (removed, moved or made again);
        from then on the run writes nothing by path, since a new experiment may own it."""

    # ------------------------------------------------------------------ processes

    def environment(self, proc: Process) -> dict[str, str]:
        """The full environment of a child: ours, the topology's, and sane thread counts."""
        env = dict(os.environ)
        env.update(
            self.topology.environment(
                proc,
                self.addresses,
                config_path=str(self.folder.config),
                experiment_dir=str(self.folder.path),
            )
        )
        # the role stops by itself if this process dies (see runtime.lifecycle.watch_supervisor)
        env[SUPERVISOR_PID_ENV] = str(os.getpid())
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", "1")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def command(self, proc: Process) -> list[str]:
        """How a role is started: the role entry point of this very interpreter."""
        return [self.python, "-m", "surreal_kube.runtime", proc.role, "--id", str(proc.index)]

    def _spawn(self, child: Child) -> None:
        proc = child.process
        child.started_at = time.monotonic()
        child.state = "running"
        if self.forkserver is not None:
            try:
                child.popen = self.forkserver.spawn(
                    self.command(proc)[3:],  # the arguments after `python -m <module>`
                    env=self.environment(proc),
                    cwd=self.folder.path,
                    out=self.folder.logs / f"{proc.name}.out",
                    heavy=proc.role in _HEAVY,
                )
                return
            except forking.ForkServerGoneError as exc:
                log.warning("%s; starting roles as their own interpreters from now on", exc)
                self.forkserver = None
        out = open(self.folder.logs / f"{proc.name}.out", "ab")  # noqa: SIM115 - owned by the child
        try:
            child.popen = subprocess.Popen(
                self.command(proc),
                env=self.environment(proc),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # its own process group, signalled as a unit, in our session: a session of its
                # own would be a scheduling group of its own too (runtime.main.NICENESS)
                process_group=0,
                cwd=self.folder.path,
            )
        finally:
            out.close()

    def _start_forkserver(self) -> None:
        env = dict(os.environ)
        env.update(
            SURREAL_EXPERIMENT_DIR=str(self.folder.path),  # how leftovers are recognised
            SURREAL_SUPERVISOR_PID=str(os.getpid()),  # the server exits when we are gone
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
            MKL_NUM_THREADS=env.get("MKL_NUM_THREADS", "1"),
            PYTHONUNBUFFERED="1",
        )
        try:
            self.forkserver = forking.ForkServer(
                self.python, env, self.folder.path, self.folder.logs / "forkserver.out"
            )
        except OSError as exc:
            log.warning("no fork server (%s); starting roles as their own interpreters", exc)

    def start(self) -> None:
        """Start every process, in topology order (light roles first: they are ready at once)."""
        self.folder.create()
        self.wiring.create()
        if self.use_forkserver and forking.enabled():
            self._start_forkserver()
        for child in sorted(self.children.values(), key=lambda c: c.process.role in _HEAVY):
            self._spawn(child)
        self.phase = "Running"
        self.write_state()

    def check_folder(self) -> str | None:
        """Why this run lost its folder, or None while the folder is still the one it started in.

        Why: a folder removed under a running experiment (`rm -rf`) left its processes learning
        unseen until the budget (`list` and `delete` find experiments by their folder), and a new
        `create` of the same name would have had two supervisors writing one state file."""
        if self.folder_lost is None and _identity(self.folder.path) != self._folder_id:
            self.folder_lost = (
                f"the experiment folder {self.folder.path} was removed, moved or made again "
                "while the run was going: every process stopped, nothing more written there"
            )
            log.error("%s", self.folder_lost)
        return self.folder_lost

    def poll(self) -> None:
        """One supervision step: notice exits, restart with backoff, refresh progress."""
        if self.forkserver is not None:
            self.forkserver.pump(0.0)
        now = time.monotonic()
        for child in self.children.values():
            if child.state == "running" and child.popen is not None:
                code = child.popen.poll()
                if code is None:
                    if now - child.started_at > HEALTHY_AFTER:
                        child.backoff = BACKOFF_MIN
                    continue
                child.last_exit = code
                self._on_exit(child, code, now)
            elif child.state == "backoff" and now >= child.next_start and not self.stop_requested:
                log.warning("restarting %s (restart %d)", child.process.name, child.restarts)
                self._spawn(child)
        self.progress = read_progress(self.folder.status)
        self.record_curve()
        self.write_state()

    def record_curve(self) -> None:
        """Add the newest evaluation to the curve; a refused write is tried on the next step."""
        if self.check_folder():
            return
        try:
            self.curve.record(self.progress, self.elapsed())
        except OSError as exc:
            if self._curve_fault is None:
                log.warning("cannot append to the learning curve (%s); trying again", exc)
            self._curve_fault = str(exc)
            return
        self._curve_fault = None

    def _on_exit(self, child: Child, code: int, now: float) -> None:
        name = child.process.name
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        failed = (
            run_end.learner_failed(child.restarts, how, LEARNER_MAX_RESTARTS)
            if child.process.role == "learner"
            else None
        )
        if failed:
            child.state = "failed"
            self.phase = "Failed"
            self.reason = failed
            log.error("%s", self.reason)
            self.stop_requested = True
            return
        child.restarts += 1
        child.state = "backoff"
        delay = restart_delay(child.backoff)
        child.next_start = now + delay
        child.history.append(f"{time.strftime('%H:%M:%S')} {how}")
        log.warning("%s died (%s); restarting in %.1fs", name, how, delay)
        child.backoff = min(BACKOFF_MAX, child.backoff * 2)

    # ------------------------------------------------------------------ budget and stop

    def elapsed(self) -> float:
        """Seconds this experiment ran, earlier runs included when resumed (monotonic)."""
        return self.elapsed_before + (time.monotonic() - self._started_mono)

    def budget_reached(self) -> str | None:
        """Why the run should end now, or None (the rule of both backends, on our counts)."""
        return run_end.budget_reached(
            self.exp.spec.session, env_steps=self.progress.env_steps, elapsed=self.elapsed()
        )

    def run(self, tick: Callable[[Supervisor], None] | None = None, period: float = 1.0) -> str:
        """Supervise until the budget is reached, a stop is requested or the learner fails.

        Leaves `phase` at "Stopping" (written, with the reason) with the final phase in
        `final_phase`: the final phase is only published once the processes are stopped and the
        results written (`finish`).
        """
        while not self.stop_requested:
            if self.check_folder():
                break
            self.poll()
            if tick is not None:
                tick(self)
            reason = self.budget_reached()
            if reason:
                self.final_phase, self.reason = "Succeeded", reason
                break
            time.sleep(period)
        if self.folder_lost:
            self.final_phase, self.reason = "Failed", self.folder_lost
        elif self.phase == "Failed":
            self.final_phase = "Failed"
        elif self.final_phase != "Succeeded":
            self.final_phase = "Stopped"
            self.reason = self.reason or "stopped by request"
        self.phase = "Stopping"
        # said at once: stopping takes a while (checkpoints, a final evaluation of up to
        # FINAL_EVAL_TIMEOUT), and `status` showed Running, without the reason, until it ended
        self.write_state()
        return self.reason

    def finish(self) -> None:
        """Publish the final phase (after `stop` and the results)."""
        self.phase = self.final_phase
        self.write_state()

    def request_stop(self, *_: object) -> None:
        """Signal handler: finish the current step, then stop everything."""
        self.stop_requested = True

    def stop(self) -> None:
        """Stop every process group: SIGTERM in order, SIGKILL what is left after a grace period.

        A run that reached its budget first stops agents and learner (which checkpoints and
        publishes its last parameters), then lets the evaluators evaluate that final policy.
        """
        if self.forkserver is not None:
            self.forkserver.settle(timeout=60.0)  # every role has a pid to signal
        if self.final_phase == "Succeeded":
            self._stop_children(
                [c for c in self.children.values() if c.process.role in _FINISH_FIRST]
            )
            self._final_evaluation()
        order = {role: i for i, role in enumerate(_STOP_ORDER)}
        self._stop_children(
            sorted(self.children.values(), key=lambda c: order.get(c.process.role, 99))
        )
        if self.forkserver is not None:
            self.forkserver.close()
        self.wiring.remove()  # every role is gone: nothing dials or serves these sockets
        self.progress = read_progress(self.folder.status)
        self.record_curve()
        self.write_state()

    def _final_evaluation(self) -> None:
        evals = [c for c in self.children.values() if c.process.role == "eval" and _running(c)]
        deadline = time.monotonic() + FINAL_EVAL_TIMEOUT
        for child in evals:
            # an evaluator still starting up has no handler yet: SIGUSR1 would kill it
            status = self.folder.status / f"{child.process.name}.json"
            while _running(child) and time.monotonic() < deadline:
                if (read_json(status) or {}).get("state") == "running":
                    break
                time.sleep(0.2)
            if _running(child):
                _signal_group(child.popen.pid, signal.SIGUSR1)  # type: ignore[union-attr]
        for child in evals:
            # an evaluator plays the snapshots still waiting first (runtime.eval): each is a
            # point, recorded as it comes
            while _running(child) and time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.popen.wait(timeout=min(1.0, max(0.1, deadline - time.monotonic())))  # type: ignore[union-attr]
                self.progress = read_progress(self.folder.status)
                self.record_curve()
            if _running(child):
                log.warning(
                    "%s: no final evaluation after %.0f s", child.process.name, FINAL_EVAL_TIMEOUT
                )

    def _stop_children(self, children: list[Child]) -> None:
        for child in children:
            if _running(child):
                _signal_group(child.popen.pid, signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + STOP_GRACE
        for child in children:
            if child.popen is None or child.popen.pid is None:
                continue
            try:
                child.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM; killing it", child.process.name)
            _signal_group(child.popen.pid, signal.SIGKILL)  # also any grandchildren left behind
            if child.popen.poll() is None:
                child.popen.wait(timeout=5)
            if child.state != "failed":
                child.state = "stopped"

    # ------------------------------------------------------------------ state file

    def state_dict(self) -> dict[str, object]:
        """What `status`, `list` and `delete` read about this experiment."""
        return {
            "name": self.exp.metadata.name,
            "phase": self.phase,
            "reason": self.reason,
            "supervisor_pid": os.getpid(),
            "forkserver_pid": self.forkserver.pid if self.forkserver is not None else None,
            "started": self.started,
            "elapsed": self.elapsed(),
            **self.wiring.state(),
            "addresses": {name: a.connect for name, a in sorted(self.addresses.items())},
            "state_write_failures": self.state_write_failures,
            "env_steps": self.progress.env_steps,
            "learner_iteration": self.progress.learner_iteration,
            "eval_return": self.progress.eval_return,
            "processes": {
                name: {
                    "role": c.process.role,
                    "pid": c.popen.pid if c.popen is not None else None,
                    "state": c.state,
                    "restarts": c.restarts,
                    "last_exit": c.last_exit,
                    "history": c.history[-10:],
                }
                for name, c in self.children.items()
            },
        }

    def write_state(self) -> None:
        """Persist the state file atomically; a disk that refuses it is said once, counted, and
        the previous file stays until the next step writes it again."""
        if self.check_folder():
            return
        try:
            write_json_atomic(self.folder.state, self.state_dict())
        except OSError as exc:
            self.state_write_failures += 1
            if self._state_fault is None:
                log.warning("cannot write %s (%s); trying again", self.folder.state, exc)
            self._state_fault = str(exc)
            return
        if self._state_fault is not None:
            log.info("state file written again (%d writes failed)", self.state_write_failures)
            self._state_fault = None

    def total_restarts(self) -> int:
        """Restarts over all processes."""
        return sum(c.restarts for c in self.children.values())


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a folder, None when it is gone: a folder made again is another one."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def restart_delay(backoff: float) -> float:
    """How long a restart waits: its backoff less up to JITTER of it, at random."""
    return backoff * (1.0 - JITTER * random.random())


def _running(child: Child) -> bool:
    return child.popen is not None and child.popen.poll() is None


def _signal_group(pid: int | None, sig: signal.Signals) -> None:
    if pid is None:  # a fork still pending: nothing to signal yet
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def tensorboard_url(state: dict[str, object]) -> str | None:
    """The URL of a running experiment's TensorBoard, from its state file."""
    ports = state.get("ports") or {}
    port = ports.get("tensorboard") if isinstance(ports, dict) else None
    return f"http://127.0.0.1:{port}/" if port else None


def budget_note(exp: Experiment, *, detach: bool) -> str:
    """One line saying when the run ends: its budget, or that it has none and what stops it.

    There is no default budget: a run someone meant to leave overnight must not end early. An
    unbounded run is said so at the start instead of running on without a word.
    """
    session = exp.spec.session
    parts = []
    if session.max_env_steps is not None:
        parts.append(f"{session.max_env_steps:,} env steps")
    if session.max_time_seconds is not None:
        parts.append(f"{session.max_time_seconds:g} s of wall time")
    if parts:
        return f"budget: {' or '.join(parts)}, whichever comes first; then a final evaluation"
    stop = f"`surreal-kube delete {exp.metadata.name}`" if detach else "Ctrl-C"
    return f"no budget: runs until {stop} (set one with --max-env-steps N or --max-time SECONDS)"


def supervise(
    exp: Experiment,
    folder: ExperimentFolder,
    wiring: Wiring,
    *,
    elapsed_before: float = 0.0,
    tick: Callable[[Supervisor], None] | None = None,
) -> tuple[Supervisor, Path]:
    """Run an experiment to its end (budget, stop request or failure), stop it, write results.

    SIGINT and SIGTERM request a clean stop; the processes are always stopped, even on errors.
    Everything the run writes is closed to other users (`private_files`).
    """

    sup = Supervisor(exp, exp.topology, folder, wiring)
    sup.elapsed_before = elapsed_before
    previous = {s: signal.signal(s, sup.request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    with private_files():
        try:
            sup.start()
            sup.run(tick)
        except BaseException as exc:
            sup.final_phase = "Failed"
            sup.reason = f"supervisor error: {type(exc).__name__}: {exc}"
            raise
        finally:
            sup.stop()
            picture = sup.folder.results / "learning_curve.png"
            if not sup.check_folder():
                picture = _write_results(sup)
            sup.finish()
            for s, handler in previous.items():
                signal.signal(s, handler)
    return sup, picture


RESULTS_RETRY_SECONDS = 60.0
"""How long a run that ended on a full disk tries to write its results before it gives up."""


def _write_results(sup: Supervisor) -> Path:
    """The run's results, tried again every 2 s for RESULTS_RETRY_SECONDS on a full disk."""
    from surreal_kube.launch.local.results import write_results

    deadline = time.monotonic() + RESULTS_RETRY_SECONDS
    while True:
        try:
            return write_results(
                sup.folder.results,
                name=sup.exp.metadata.name,
                phase=sup.final_phase,
                reason=sup.reason,
                env_steps=sup.progress.env_steps,
                elapsed=sup.elapsed(),
                restarts={n: c.restarts for n, c in sup.children.items() if c.restarts},
                learner_iteration=sup.progress.learner_iteration,
            )
        except OSError as exc:
            if time.monotonic() >= deadline:
                log.error("results not written: %s", exc)
                raise
            log.warning("cannot write the results yet (%s); trying again in 2 s", exc)
            time.sleep(2.0)
