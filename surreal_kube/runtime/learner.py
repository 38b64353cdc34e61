"""Role `learner`: optimizes on batches from replay, publishes parameters, checkpoints.

    replay-sampler --(Prefetcher: `replay.prefetch` batches ahead)--> learn() --> PUB parameters

On start the learner restores the newest checkpoint of `<experiment>/checkpoints/learner.*.ckpt`
if there is one (iteration and optimizer state included), so a restarted learner resumes where it
left off, and publishes its parameters at once so that agents never wait for a first update.
Checkpoints follow `session.checkpoint` (every `period` iterations, at least `minIntervalSeconds`
apart, newest `keepHistory` and best `keepBest` by evaluation return kept) and one more is written
on SIGTERM. The evaluation return comes from the evals' progress files when the learner can see
them (a shared experiment folder, as in the local backend).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from surreal_kube.comm.parameters import ParameterPublisher
from surreal_kube.comm.sampling import Prefetcher
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.lifecycle import Every, RateMeter, StopFlag
from surreal_kube.runtime.status import ProgressFile, read_status

log = logging.getLogger(__name__)

PUBLISH_MIN_INTERVAL = 0.1
"""Seconds between publications: fast off-policy learners publish at most 10 times a second."""


class LearnerRole(RoleBase):
    """Role `learner`."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        from surreal_kube.envs import env_spaces
        from surreal_kube.rl.factory import learner_batch_size, make_learner
        from surreal_kube.session.checkpoint import PeriodicCheckpoint

        spec = ctx.spec
        self.progress = ProgressFile(ctx.experiment_dir, ctx.experiment, ctx.process, ctx.role)
        obs_space, action_space = env_spaces(spec.env)
        self.learner = make_learner(spec, obs_space, action_space)
        c = spec.session.checkpoint
        self.checkpoint = PeriodicCheckpoint(
            ctx.folder("checkpoints"),
            "learner",
            period=c.period,
            min_interval=c.min_interval_seconds,
            keep_history=c.keep_history,
            keep_best=c.keep_best,
        )
        restored = self.checkpoint.restore_latest()
        if restored is not None:
            self.learner.load_state_dict(restored.state)
            log.info("resumed from %s at iteration %d", restored.path.name, self.learner.iteration)
        self.resumed_from = self.learner.iteration
        self.batch_size = learner_batch_size(spec)
        self.publisher = ParameterPublisher(ctx.bind("parameter-publish"))
        self.prefetcher = Prefetcher(
            ctx.addr("replay-sampler"),
            self.batch_size,
            depth=spec.replay.prefetch,
            on_policy=spec.replay.kind == "fifo",
        )
        self.eval_return: float | None = None
        self.items = 0
        self.wait_seconds = 0.0

    def publish(self) -> None:
        """Publish the current parameters (tagged with the learner iteration)."""
        self.publisher.publish(self.learner.parameters(), self.learner.iteration)

    def run(self) -> None:
        """Learn until stopped."""
        spec = self.ctx.spec
        self.publish()
        self.prefetcher.start()
        log.info(
            "learner: %s, batches of %d from %s, publishing on %s",
            spec.algorithm.name,
            self.batch_size,
            self.prefetcher.addr,
            self.publisher.addr,
        )
        self.progress.write("waiting", "waiting for replay to reach its start condition")
        report = Every(spec.session.metrics.learner_interval_seconds)
        iter_rate, item_rate = RateMeter(), RateMeter()
        sums: dict[str, float] = defaultdict(float)
        count = 0
        last_publish = time.monotonic()
        published_iteration = self.learner.iteration
        still_waiting = Every(30.0)
        while not self.stop.is_set():
            t0 = time.monotonic()
            msg = self.prefetcher.get(timeout=0.2)
            self.wait_seconds += time.monotonic() - t0
            if msg is None:
                if still_waiting():
                    log.info(
                        "still waiting for a batch from replay (%d requests in flight)",
                        self.prefetcher.in_flight,
                    )
                self._maybe_progress("waiting", "waiting for a batch from replay")
                continue
            if self.learner.iteration == self.resumed_from:
                log.info("first batch received; learning")
            stats = self.learner.learn(msg.arrays)
            priorities = getattr(self.learner, "last_priorities", None)
            if priorities is not None and "indices" in msg.arrays and "shard" in msg.meta:
                self.prefetcher.update_priorities(
                    msg.meta["shard"], msg.arrays["indices"], priorities
                )
            if self.learner.iteration == self.resumed_from + 1:
                log.info("first update done (iteration %d)", self.learner.iteration)
            self.items += self.batch_size
            for key, value in stats.items():
                sums[key] += float(value)
            count += 1
            if time.monotonic() - last_publish >= PUBLISH_MIN_INTERVAL:
                self.publish()
                published_iteration = self.learner.iteration
                last_publish = time.monotonic()
            self.checkpoint.save(
                self.learner.state_dict, self.learner.iteration, score=self.eval_return
            )
            if report():
                values = {k: v / count for k, v in sums.items()}
                values.update(
                    {
                        "learner/iterations_per_s": iter_rate.rate(self.learner.iteration),
                        "learner/items_per_s": item_rate.rate(self.items),
                        "learner/prefetch_queue": self.prefetcher.qsize,
                        "learner/published_iteration": published_iteration,
                    }
                )
                self.report(values, self.learner.iteration)
                self.progress.update(
                    rates={
                        "iterations_per_s": values["learner/iterations_per_s"],
                        "items_per_s": values["learner/items_per_s"],
                    }
                )
                sums.clear()
                count = 0
            self._maybe_progress("running", "")

    def _maybe_progress(self, state: str, message: str) -> None:
        if not self.progress.due():
            return
        self.eval_return = self._read_eval_return()
        self.progress.update(
            iteration=self.learner.iteration,
            param_version=self.publisher.info.iteration if self.publisher.info else -1,
            last_return=self.eval_return,
            extra={
                "prefetch_queue": self.prefetcher.qsize,
                "sample_requests_in_flight": self.prefetcher.in_flight,
                "batches_received": self.prefetcher.received,
                "sample_wait_seconds": round(self.wait_seconds, 3),
                "resumed_from_iteration": self.resumed_from,
            },
        )
        self.progress.write(state, message)

    def _read_eval_return(self) -> float | None:
        """Mean of the evals' newest returns, from their progress files (if visible)."""
        returns = []
        for path in (self.ctx.experiment_dir / "status").glob("evals-*.json"):
            data = read_status(path)
            value = data.get("last_return") if data else None
            if isinstance(value, (int, float)):
                returns.append(float(value))
        return sum(returns) / len(returns) if returns else self.eval_return

    def close(self) -> None:
        """Checkpoint and publish once more, then close everything."""
        self.prefetcher.close()
        try:
            # evaluators run a final evaluation of exactly what the checkpoint holds
            if (
                self.publisher.info is None
                or self.publisher.info.iteration < self.learner.iteration
            ):
                self.publish()
            if self.learner.iteration > self.resumed_from:
                path = self.checkpoint.save(
                    self.learner.state_dict,
                    self.learner.iteration,
                    score=self.eval_return,
                    force=True,
                )
                log.info("checkpoint written: %s", path)
        finally:
            self.progress.update(iteration=self.learner.iteration)
            self.progress.write("stopped", "")
            self.publisher.close()
            super().close()
