"""Role `eval`: runs the newest policy without exploration and reports its returns.

Every `evals.intervalSeconds` an evaluator fetches the newest parameters and plays
`evals.episodes` episodes (5 by default: one deterministic episode is too noisy to steer by),
deterministic (mean action) or stochastic per `evals.mode`. The mean and standard deviation of the
returns go to tensorplex (`charts/eval_return`, `charts/eval_return_std`, binned under `evals/`,
against the global env steps the evaluated parameters were published at) and to the progress file
(`last_return`, `last_return_std`, `last_returns`, with `param_version` and `param_env_steps` of
the parameters evaluated), which the local backend draws and the learner uses to keep the
weights that earned the best scores. With `evals.recordVideo`, the first episode of each run is
written to `<experiment>/videos/<process>/iter-<iteration>.mp4`.

SIGUSR1 asks for a final evaluation: the evaluator finishes the episode it is playing, fetches
the newest parameters, evaluates them once more and exits. The local backend sends it when an
experiment reaches its budget, after the learner has published its last parameters, so that the
final return on the curve and in the summary is the return of the final policy, even in a run
shorter than one evaluation interval.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

import numpy as np

from surreal_kube.comm.parameters import ParameterClient
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.layout import parameter_bytes
from surreal_kube.runtime.lifecycle import Heartbeat, StopFlag
from surreal_kube.runtime.status import ProgressFile

log = logging.getLogger(__name__)


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
        self.env_steps = 0
        self.episodes = 0
        self.evaluations = 0
        self.last_returns: list[float] = []
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
        """Iteration of the parameters evaluated (-1: initial weights)."""
        return self.params.info.iteration if self.params.info else -1

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
                self.heartbeat.beat()
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

    def evaluate(self) -> float | None:
        """Fetch, then play `evals.episodes` episodes; the mean return.

        None if interrupted, or while the learner has published nothing yet: a return of the
        initial random weights says nothing about the experiment and would sit on its curve.
        """
        self.params.fetch_into(self.actor.load_parameters)  # another model's: a counted drop
        if self.params.info is None:
            return None
        info = self.params.info
        returns = []
        for k in range(self.ctx.spec.evals.episodes):
            video = None
            if self.record and k == 0:
                folder = self.ctx.folder("videos") / self.ctx.process
                folder.mkdir(parents=True, exist_ok=True)
                video = str(folder / f"iter-{self.param_version}.mp4")
            ret = self.episode(self.seed + self.evaluations * 1000 + k, video)
            if ret is None:
                return None
            returns.append(ret)
        self.evaluations += 1
        self.last_returns = returns
        self.evaluated = (info.iteration, info.env_steps)
        self.last_return = float(np.mean(returns))
        return self.last_return

    def run(self) -> None:
        """Evaluate every `intervalSeconds` until stopped."""
        spec = self.ctx.spec.evals
        log.info(
            "eval %d: %s, %d episode(s) every %.0fs",
            self.ctx.index,
            spec.mode,
            spec.episodes,
            spec.interval_seconds,
        )
        self.progress.write("running")
        while not self.stop.is_set():
            self.heartbeat.beat()
            started = time.monotonic()
            final = self.final.is_set()
            if final:
                log.info("final evaluation requested")
            result = self.evaluate()
            if result is not None:
                version, steps = self.evaluated
                std = float(np.std(self.last_returns))
                log.info(
                    "%s %d: return %.2f ± %.2f over %d episode(s) (parameters of iteration %d, "
                    "%d env steps)",
                    "final evaluation" if final else "evaluation",
                    self.evaluations,
                    result,
                    std,
                    len(self.last_returns),
                    version,
                    steps,
                )
                self.report(
                    {
                        "charts/eval_return": result,
                        "charts/eval_return_std": std,
                        "eval/param_version": version,
                    },
                    max(steps, 0),
                )
            self._update_progress()
            self.progress.write()
            if final:
                self.stop.set("final evaluation done")
                break
            self._pause(spec.interval_seconds - (time.monotonic() - started))

    def _pause(self, seconds: float) -> None:
        """Sleep until the next evaluation; a stop or a final-evaluation request wakes it."""
        deadline = time.monotonic() + seconds
        while not self.stop.is_set() and not self.final.is_set():
            self.heartbeat.beat()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.stop.wait(min(left, 0.1))

    def _update_progress(self) -> None:
        self.progress.update(
            env_steps=self.env_steps,
            episodes=self.episodes,
            evaluations=self.evaluations,
            last_return=self.last_return,
            last_return_std=float(np.std(self.last_returns)) if self.last_returns else None,
            last_returns=self.last_returns,
            param_version=self.evaluated[0] if self.evaluations else self.param_version,
            param_env_steps=self.evaluated[1] if self.evaluations else None,
            extra={"fetch_failures": self.params.failures},
        )

    def close(self) -> None:
        """Write the final progress and close the environment and socket."""
        self._update_progress()
        self.progress.write("stopped")
        self.params.close()
        self.env.close()
        super().close()
