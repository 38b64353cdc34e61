"""Role `eval`: runs snapshots of the policy without exploration and reports their returns.

Every `evals.intervalSeconds` an evaluator takes a snapshot of the newest parameters, and plays
`evals.episodes` episodes (5 by default: one deterministic episode is too noisy to steer by) with
each snapshot in turn, deterministic (mean action) or stochastic per `evals.mode`. The mean and
standard deviation of the returns go to tensorplex (`charts/eval_return`, `charts/eval_return_std`,
binned under `evals/`, against the global env steps the snapshot's parameters were published at)
and to the progress file (`last_return`, `last_return_std`, `last_returns`, with `param_version`
and `param_env_steps` of the parameters evaluated, and `recent_evaluations`, each of the latest
with the time its snapshot was taken), which the local backend draws and the learner uses to keep
the weights that earned the best scores. With `evals.recordVideo`, the first episode of each
evaluation is written to `<experiment>/videos/<process>/iter-<iteration>.mp4`.

Taking a snapshot is cheap; playing it is not (0.15 of a core for Ant, 5 episodes every 10 s).
So the episodes run in a thread under SCHED_IDLE, and, where the evaluator shares its CPUs with
the agents (the local backend), only while no other task waits for a CPU (`CpuContention`, the
kernel's pressure figures): SCHED_IDLE alone still took 0.12-0.14 of a core from agents that were
always runnable (measured: their run-queue wait rose from 0.22 to 0.27). On a machine with cores
to spare, and in a pod (a CPU share of its own, no gate), each snapshot is played at once; on a
machine the agents fill, the snapshots wait, as a peer's saved snapshots are evaluated after its
run (bench/learning.py), except the first, played at once (a user sees a return within one
interval of the first parameters, and its cost bounds the backlog), and then one every
LIVE_SECONDS (the newest: the live curve and `status` keep moving). Every point stands for the
parameters of its own time. The snapshots waiting are bounded (`Backlog`): at most what the
thread can play in DRAIN_SECONDS, thinned in the older part (the newest ones, the window of the
summary's recent mean, always kept), so the wait for the final evaluation stays bounded.

SIGUSR1 asks for a final evaluation: the evaluator takes a snapshot of the newest parameters,
plays every snapshot still waiting and that one, and exits. The local backend sends it when an
experiment reaches its budget, after the learner has published its last parameters and the agents
have stopped, so that the final return on the curve and in the summary is the return of the final
policy, even in a run shorter than one evaluation interval.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from surreal_kube.comm.parameters import ParameterClient, ParameterInfo
from surreal_kube.experiment.run_end import FINAL_EVAL_TIMEOUT
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.layout import parameter_bytes
from surreal_kube.runtime.lifecycle import SUPERVISOR_PID_ENV, Heartbeat, StopFlag
from surreal_kube.runtime.status import ProgressFile

log = logging.getLogger(__name__)

DRAIN_SECONDS = FINAL_EVAL_TIMEOUT / 2
"""CPU seconds the snapshots waiting may take to play: the final evaluation's wait stays within
the bound both backends give it, with room for the final snapshot itself."""
KEEP_NEWEST = 10
"""Snapshots never thinned out of the backlog: the summary's recent mean is the last 10."""
FIRST_BOUND = 30
"""Snapshots kept before the first evaluation says what one costs."""
MAX_BOUND = 60
"""Snapshots kept however cheap their evaluations: 10 minutes of the default interval."""
LIVE_SECONDS = 60.0
"""At most this long without an evaluation while the CPUs are contended."""
CONTENDED = 0.1
"""Share of the time some task waited for a CPU above which the CPUs are taken (PSI `some`)."""
RECENT = 100
"""Evaluations listed in the progress file: more than a whole backlog and the snapshots taken
while it drains, so a reader polling every few seconds misses none."""


@dataclass
class Snapshot:
    """Parameters to evaluate, as they were when taken."""

    params: dict[str, np.ndarray]
    info: ParameterInfo
    taken_at: float
    """Wall-clock time of the snapshot: where its point sits on a curve drawn against time."""
    final: bool = False


class Backlog:
    """Snapshots waiting for the evaluation thread, oldest first, bounded by what playing them
    costs (see the module docstring); shared by the snapshot loop and the evaluation thread."""

    def __init__(self) -> None:
        self._items: deque[Snapshot] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self.bound = FIRST_BOUND
        self.thinned = 0
        """Snapshots dropped unplayed to keep the bound."""

    def __len__(self) -> int:
        return len(self._items)

    def versions(self) -> list[int]:
        """The parameter versions waiting, oldest first."""
        with self._cond:
            return [s.info.iteration for s in self._items]

    def put(self, snapshot: Snapshot) -> None:
        """Queue `snapshot`, thinning the older part when the backlog is over its bound."""
        with self._cond:
            self._items.append(snapshot)
            while len(self._items) > self.bound:
                self._thin()
            self._cond.notify_all()

    def _thin(self) -> None:
        """Drop every second snapshot older than the newest KEEP_NEWEST (the oldest stays): the
        curve keeps points over the whole run, only further apart."""
        items = list(self._items)
        older = max(1, len(items) - KEEP_NEWEST)
        drop = set(range(1, older, 2)) if older > 2 else {0}
        drop -= {i for i, s in enumerate(items) if s.final}
        self._items = deque(s for i, s in enumerate(items) if i not in drop)
        self.thinned += len(drop)

    def set_cost(self, seconds: float) -> None:
        """Bound the backlog by the CPU seconds one evaluation takes (DRAIN_SECONDS in all)."""
        with self._cond:
            fit = int(DRAIN_SECONDS / max(seconds, 1e-3))
            self.bound = min(MAX_BOUND, max(KEEP_NEWEST + 2, fit))

    def take(self, timeout: float, *, newest: bool = False) -> Snapshot | None:
        """The oldest (or the newest) snapshot, waiting up to `timeout` s for one; marks the
        taker busy."""
        with self._cond:
            self._busy = False
            self._cond.notify_all()
            if not self._items:
                self._cond.wait(timeout)
            if not self._items:
                return None
            self._busy = True
            return self._items.pop() if newest else self._items.popleft()

    def wait_item(self, timeout: float) -> bool:
        """Wait up to `timeout` s for a snapshot; whether one waits."""
        with self._cond:
            return self._cond.wait_for(lambda: bool(self._items), timeout)

    @property
    def final_waiting(self) -> bool:
        """The final snapshot is queued: play everything now."""
        with self._cond:
            return any(s.final for s in self._items)

    def done(self) -> None:
        """The taker finished what it took."""
        with self._cond:
            self._busy = False
            self._cond.notify_all()

    @property
    def idle(self) -> bool:
        """Nothing waiting and nothing being played."""
        with self._cond:
            return self._idle()

    def _idle(self) -> bool:
        return not self._items and not self._busy

    def wait_idle(self, timeout: float) -> bool:
        """Wait until `idle`, at most `timeout` s; returns `idle`."""
        with self._cond:
            return self._cond.wait_for(self._idle, timeout)


def yield_cpu() -> bool:
    """Put the calling thread under SCHED_IDLE: it runs only where nothing else of normal
    priority would. False where the platform or a seccomp profile refuses (it runs as it is).

    Linux keeps the policy per thread, and an unprivileged thread cannot leave SCHED_IDLE again:
    only the evaluation thread takes it, never the loop that snapshots and beats."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return True
    return False


class CpuContention:
    """Whether other tasks wait for a CPU: the share of a short window in which some task was
    runnable but not running (Linux's pressure stall information, `some`), measured while the
    caller sleeps, so its own waits do not count."""

    PATH = Path("/proc/pressure/cpu")

    def __init__(self, window: float = 1.0, threshold: float = CONTENDED) -> None:
        self.window = window
        self.threshold = threshold

    @classmethod
    def if_available(cls) -> CpuContention | None:
        """One, where the kernel reports CPU pressure (4.20 and later, not booted psi=0)."""
        return cls() if cls._stalled() is not None else None

    @classmethod
    def _stalled(cls) -> float | None:
        """Seconds some task waited for a CPU since boot."""
        try:
            first = cls.PATH.read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        fields = dict(f.split("=", 1) for f in first.split()[1:] if "=" in f)
        try:
            return int(fields["total"]) / 1e6
        except (KeyError, ValueError):
            return None

    def busy(self, sleep: Callable[[float], object]) -> bool:
        """Sleep one window (`sleep`, which a stop may cut short); whether the CPUs were taken."""
        before, start = self._stalled(), time.monotonic()
        sleep(self.window)
        after, spent = self._stalled(), time.monotonic() - start
        if before is None or after is None or spent <= 0:
            return False
        return (after - before) / spent > self.threshold


class EvalRole(RoleBase):
    """Role `eval`."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        from surreal_kube.envs import env_spaces, make_env
        from surreal_kube.rl.factory import env_slot_seeds, make_actor

        spec = ctx.spec
        self.progress = ProgressFile(ctx.experiment_dir, ctx.experiment, ctx.process, ctx.role)
        self.heartbeat = Heartbeat.from_env()  # the liveness probe's: see runtime.lifecycle
        self.mode = (
            "eval_deterministic" if spec.evals.mode == "deterministic" else "eval_stochastic"
        )
        obs_space, action_space = env_spaces(spec.env)
        self.record = spec.evals.record_video
        self.env: Any = make_env(spec.env, record_video=self.record)
        restarts = int(self.progress.data["restarts"])
        env_seed, actor_seed = env_slot_seeds(spec, ctx.index, 0, restarts, self.mode)  # type: ignore[arg-type]
        self.actor = make_actor(
            spec,
            ctx.index,
            self.mode,  # type: ignore[arg-type]
            obs_space,
            action_space,
            seed=actor_seed,
        )
        self.seed = env_seed
        self.params = ParameterClient(
            ctx.addr("ps-serve"), timeout=spec.ps.timeout_seconds, max_bytes=parameter_bytes(ctx)
        )
        self.backlog = Backlog()
        self._held: dict[str, np.ndarray] | None = None
        """The newest parameters fetched: a snapshot of unchanged parameters shares them."""
        self._refused: str | None = None
        """Hash of a set the actor could not load (the evaluation thread's verdict)."""
        self._lock = threading.Lock()
        """The progress file and the figures in it: written by both threads."""
        self._ticks = 0
        """Env steps of the evaluation thread: the snapshot loop beats only while they move."""
        self._beat_ticks = -1
        self._died: str | None = None
        self.contention = CpuContention.if_available() if SUPERVISOR_PID_ENV in os.environ else None
        """The gate of a local evaluator (see the module docstring); None in a pod."""
        self.deferred_seconds = 0.0
        """Seconds the evaluation thread waited for the CPUs to be free."""
        self.env_steps = 0
        self.episodes = 0
        self.evaluations = 0
        self.cpu_seconds = 0.0
        self.last_returns: list[float] = []
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self.evaluated: tuple[int, int] = (-1, -1)
        """(parameter version, global env steps) of the parameters of the newest evaluation."""
        self.final = threading.Event()
        """Set by SIGUSR1: evaluate the newest parameters once more, then exit."""
        if threading.current_thread() is threading.main_thread():
            # before the status says "running", which is when the supervisor may send it
            signal.signal(signal.SIGUSR1, lambda *_: self.final.set())
        previous = self.progress.data.get("last_return")
        self.last_return: float | None = previous if isinstance(previous, float) else None

    @property
    def param_version(self) -> int:
        """Iteration of the newest parameters fetched (-1: none yet)."""
        return self.params.info.iteration if self.params.info else -1

    # -- the snapshot loop (the main thread) ------------------------------------------------------

    def snapshot(self, *, final: bool = False) -> Snapshot | None:
        """The newest parameters, as a snapshot to evaluate; None before the learner published
        any (a return of the initial random weights says nothing about the experiment and would
        sit on its curve) or while the newest are a set the actor refused."""
        if self._refused is not None and self.params.hash == self._refused:
            self.params.info, self._held, self._refused = None, None, None  # fetch it again
        fresh = self.params.fetch()
        if fresh is not None:
            self._held = fresh
        if self._held is None or self.params.info is None:
            return None
        return Snapshot(self._held, self.params.info, time.time(), final)

    def run(self) -> None:
        """Take a snapshot every `intervalSeconds` until stopped; the thread evaluates them."""
        spec = self.ctx.spec.evals
        log.info(
            "eval %d: %s, %d episode(s) every %.0fs",
            self.ctx.index,
            spec.mode,
            spec.episodes,
            spec.interval_seconds,
        )
        worker = threading.Thread(target=self._evaluate_backlog, name="evaluations", daemon=True)
        worker.start()
        with self._lock:
            self.progress.write("running")
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                if self.final.is_set():
                    self._finish()
                    break
                snap = self.snapshot()
                if snap is not None:
                    self.backlog.put(snap)
                self._pause(spec.interval_seconds - (time.monotonic() - started))
        finally:
            self.stop.set(self.stop.reason or "done")
            worker.join(timeout=10.0)
        self._check_worker()

    def _finish(self) -> None:
        """The final evaluation: every snapshot waiting, then one of the newest parameters."""
        log.info("final evaluation requested (%d snapshot(s) waiting)", len(self.backlog))
        snap = self.snapshot(final=True)
        if snap is not None:
            self.backlog.put(snap)
        while not self.stop.is_set() and not self.backlog.wait_idle(0.1):
            self._beat()
        self.stop.set("final evaluation done")

    def _pause(self, seconds: float) -> None:
        """Sleep until the next snapshot; a stop or a final-evaluation request wakes it."""
        deadline = time.monotonic() + seconds
        last_write = time.monotonic()
        while not self.stop.is_set() and not self.final.is_set():
            self._beat()
            if time.monotonic() - last_write >= self.progress.period:
                last_write = time.monotonic()
                with self._lock:
                    self._update_progress()
                    self.progress.write()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.stop.wait(min(left, 0.1))

    def _beat(self) -> None:
        """Beat while the evaluation thread is alive and waiting, or moving: not while it is
        stuck inside an environment's step (the liveness probe's meaning, runtime.lifecycle)."""
        self._check_worker()
        ticks = self._ticks
        if self.backlog.idle or ticks != self._beat_ticks:
            self._beat_ticks = ticks
            self.heartbeat.beat()

    def _check_worker(self) -> None:
        if self._died is not None:  # the role exits non-zero, and a restart starts over
            raise RuntimeError(f"the evaluation thread died: {self._died}")

    # -- the evaluation thread ---------------------------------------------------------------------

    def _evaluate_backlog(self) -> None:
        if not yield_cpu():
            log.info("SCHED_IDLE refused: evaluations run at the role's own priority")
        last = -math.inf  # the first snapshot is played at once (the module docstring)
        deferred = False  # whether the gate held a snapshot back since the last play
        try:
            while not self.stop.is_set():
                if not self.backlog.wait_item(0.1):
                    continue
                live = time.monotonic() - last >= LIVE_SECONDS
                final = self.backlog.final_waiting
                if self.contention is not None and not (live or final):
                    started = time.monotonic()
                    busy = self.contention.busy(self.stop.wait)
                    self._ticks += 1  # waiting for the CPUs is alive, not stuck
                    if busy:
                        self.deferred_seconds += time.monotonic() - started
                        deferred = True
                        continue
                # only a live point while the gate defers the others jumps the queue: the first
                # play, and every play no gate held back (a pod), takes the oldest, so the
                # points come in the order they were taken
                snap = self.backlog.take(timeout=0.1, newest=live and deferred and not final)
                if snap is None:
                    continue
                try:
                    self._play(snap)
                finally:
                    self.backlog.done()
                last, deferred = time.monotonic(), False
        except Exception as exc:
            self._died = f"{type(exc).__name__}: {exc}"
            log.error("the evaluation thread died: %s", self._died, exc_info=True)

    def _play(self, snap: Snapshot) -> None:
        """Evaluate one snapshot, then report it and write it into the progress file."""
        started = time.thread_time()
        rec = self.evaluate(snap)
        if rec is None:
            return
        cost = time.thread_time() - started
        self.backlog.set_cost(cost)
        log.info(
            "%s %d: return %.2f ± %.2f over %d episode(s) (parameters of iteration %d, "
            "%d env steps; %d snapshot(s) waiting)",
            "final evaluation" if snap.final else "evaluation",
            self.evaluations,
            rec["return"],
            rec["std"],
            rec["episodes"],
            snap.info.iteration,
            snap.info.env_steps,
            len(self.backlog),
        )
        self.report(
            {
                "charts/eval_return": rec["return"],
                "charts/eval_return_std": rec["std"],
                "eval/param_version": snap.info.iteration,
            },
            max(snap.info.env_steps, 0),
        )
        with self._lock:
            self.cpu_seconds += cost
            self._update_progress()
            self.progress.write()

    def evaluate(self, snap: Snapshot) -> dict[str, Any] | None:
        """Play `evals.episodes` episodes with the snapshot's parameters; the evaluation's
        record (its mean return and standard deviation, as `recent_evaluations` lists it).

        None if a stop interrupted it, or if the actor refused the parameters: a set whose hash
        matches but whose names or shapes are not the model's (a peer that joined the parameter
        server) is a counted drop, and the snapshot loop fetches again.
        """
        try:
            self.actor.load_parameters(snap.params)
        except Exception as exc:
            self._refused = snap.info.hash
            self.params.count_refused(exc)
            return None
        returns = []
        for k in range(self.ctx.spec.evals.episodes):
            video = None
            if self.record and k == 0:
                folder = self.ctx.folder("videos") / self.ctx.process
                folder.mkdir(parents=True, exist_ok=True)
                video = str(folder / f"iter-{snap.info.iteration}.mp4")
            ret = self.episode(self.seed + self.evaluations * 1000 + k, video)
            if ret is None:
                return None
            returns.append(ret)
        with self._lock:
            self.evaluations += 1
            self.last_returns = returns
            self.evaluated = (snap.info.iteration, snap.info.env_steps)
            self.last_return = float(np.mean(returns))
            rec = {
                "evaluation": self.progress.base["evaluations"] + self.evaluations,
                "return": self.last_return,
                "std": float(np.std(returns)),
                "episodes": len(returns),
                "param_version": snap.info.iteration,
                "param_env_steps": snap.info.env_steps,
                "taken_at": snap.taken_at,
                "final": snap.final,
            }
            self.recent.append(rec)
        return rec

    def episode(self, seed: int, video: str | None = None) -> float | None:
        """Play one episode; its return, or None if a stop interrupted it."""
        obs, _ = self.env.reset(seed=seed)
        self.actor.reset()
        if video is not None:
            self.env.start_record(video)
        total, done = 0.0, False
        try:
            while not done:
                if self.stop.is_set():
                    return None
                self._ticks += 1
                action = self.actor.act(obs)
                next_obs, reward, terminated, truncated, _ = self.env.step(action)
                self.actor.observe(obs, action, float(reward), next_obs, terminated, truncated)
                total += float(reward)
                self.env_steps += 1
                obs = next_obs
                done = terminated or truncated
        finally:
            if video is not None:
                self.env.stop_record()
        self.episodes += 1
        return total

    def _update_progress(self) -> None:
        """Copy the figures into the progress file (the caller holds the lock)."""
        self.progress.update(
            env_steps=self.env_steps,
            episodes=self.episodes,
            evaluations=self.evaluations,
            last_return=self.last_return,
            last_return_std=float(np.std(self.last_returns)) if self.last_returns else None,
            last_returns=self.last_returns,
            param_version=self.evaluated[0] if self.evaluations else self.param_version,
            param_env_steps=self.evaluated[1] if self.evaluations else None,
            recent_evaluations=list(self.recent),
            extra={
                "fetch_failures": self.params.failures,
                "snapshots_waiting": len(self.backlog),
                "snapshots_thinned": self.backlog.thinned,
                "evaluation_cpu_seconds": round(self.cpu_seconds, 3),
                "deferred_seconds": round(self.deferred_seconds, 1),
            },
        )

    def close(self) -> None:
        """Write the final progress and close the environment and socket."""
        with self._lock:
            self._update_progress()
            self.progress.write("stopped")
        self.params.close()
        self.env.close()
        super().close()
