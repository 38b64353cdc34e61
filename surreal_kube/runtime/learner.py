"""Role `learner`: optimizes on batches from replay, publishes parameters, checkpoints.

    replay-sampler --(Prefetcher: `replay.prefetch` batches ahead)--> learn() --> PUB parameters

On start the learner restores the newest checkpoint of `<experiment>/checkpoints/learner.*.ckpt`
if there is one (iteration and optimizer state included), so a restarted learner resumes where it
left off, and publishes its parameters at once so that agents never wait for a first update.
Checkpoints follow `session.checkpoint` (every `period` iterations, at least `minIntervalSeconds`
apart, newest `keepHistory` kept) and one more is written on SIGTERM. A checkpoint that does not
load is set aside and the previous one restored; a save on a full disk is skipped and retried
(session/checkpoint.py): both are counted under `checkpoint/` in TensorBoard and the progress file.

Best policies (`keepBest`): the learner keeps the parameters of its recent publications in
memory; when an evaluator reports a score for parameter version V (its progress file, when the
learner can see it: a shared experiment folder, as in the local backend), the parameters of
version V, the weights that earned the score, are saved as `policy.<V>.ckpt` with that score,
and the best `keepBest` are kept.

Policy lag: every item carries the version of the parameters that produced it. The learner
measures lag = its iteration - that version for every item it learns from (mean and p95 per
report, in TensorBoard under `lag/`, and in its progress file). On-policy, shards serve only items
within `algorithm.maxPolicyLag` of the iteration a request names, and the learner asks for a
batch only once it is ready to learn from it (on-policy, nothing is prefetched: see `Prefetcher`):
so every item learned from lags by at most maxPolicyLag, and the learner drops (and counts)
anything beyond that.
Counters from the shards (inserted, sampled, overwritten, stale) arrive with every batch. The
global env steps (sum over agents, from the shards) is the step of every scalar and travels with
the published parameters, so agents and evals report against it too.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, defaultdict, deque
from typing import Any

import numpy as np

from surreal_kube.comm.parameters import ParameterPublisher
from surreal_kube.comm.sampling import Prefetcher
from surreal_kube.experiment.progress import new_evaluations
from surreal_kube.rl.schedules import RunBudget, spend_budget
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.layout import LayoutError, batch_bytes, item_layout
from surreal_kube.runtime.lifecycle import Every, Heartbeat, RateMeter, StopFlag
from surreal_kube.runtime.status import ProgressFile, read_status

log = logging.getLogger(__name__)

PUBLISH_MIN_INTERVAL = 0.1
"""Seconds between publications: fast off-policy learners publish at most 10 times a second."""
SNAPSHOT_BYTES = 128 << 20
"""Memory for the parameters of recent publications (to save the exact ones an eval scored)."""
LAG_WINDOW = 100_000
"""Item lags kept for the percentiles of one report."""
PRIORITIZED_KEYS = {"indices": np.dtype(np.int64), "weights": np.dtype(np.float32)}
"""What a prioritized shard adds to each item of a batch (rl.replay.PrioritizedReplay)."""


def lag_summary(lags: np.ndarray) -> dict[str, float]:
    """Mean, p95 and max of item lags (learner iterations)."""
    if lags.size == 0:
        return {}
    return {
        "mean": float(lags.mean()),
        "p95": float(np.percentile(lags, 95)),
        "max": float(lags.max()),
    }


class LearnerRole(RoleBase):
    """Role `learner`."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        from surreal_kube.envs import env_spaces
        from surreal_kube.rl.factory import (
            learner_batch_size,
            make_learner,
            max_policy_lag,
        )
        from surreal_kube.session.checkpoint import Checkpoint, PeriodicCheckpoint

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
            keep_best=0,
        )
        self.best = Checkpoint(
            ctx.folder("checkpoints"), "policy", keep_history=0, keep_best=c.keep_best
        )
        self.global_env_steps = 0
        restored = self.checkpoint.restore_latest()
        if restored is not None:
            self.learner.load_state_dict(restored.state)
            self.global_env_steps = int(restored.meta.get("extra", {}).get("global_env_steps", 0))
            log.info("resumed from %s at iteration %d", restored.path.name, self.learner.iteration)
        self.resumed_from = self.learner.iteration
        # what the run spent before a restart counts (the learner checkpoints its seconds)
        self.budget = RunBudget(
            spec.session.max_env_steps,
            spec.session.max_time_seconds,
            spent_seconds=float(getattr(self.learner, "budget_seconds", 0.0)),
        )
        self.batch_size = learner_batch_size(spec)
        self.layout = item_layout(spec, obs_space, action_space)
        """What every item of a batch is: anything else came from a stranger, see `_check_batch`."""
        self.rejected_batches = 0
        self.publisher = ParameterPublisher(ctx.bind("parameter-publish"))
        on_policy = spec.replay.kind == "fifo"
        self.max_lag = max_policy_lag(spec)
        self.prefetcher = Prefetcher(
            ctx.addr("replay-sampler"),
            self.batch_size,
            depth=spec.replay.prefetch,
            on_policy=on_policy,
            max_bytes=batch_bytes(spec, self.layout),
        )
        self.prefetcher.max_lag = self.max_lag
        self.prefetcher.version = self.learner.iteration
        self.target_spi = spec.rate_limit().samples_per_insert
        self.eval_return: float | None = None
        self.eval_seen: dict[str, int] = {}
        self.snapshots: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._snapshot_bytes = 0
        self.items = 0
        self.wait_seconds = 0.0
        self.stale_dropped = 0
        self.shard_stats: dict[int, dict[str, Any]] = {}
        self._lags: deque[np.ndarray] = deque()
        self._lag_count = 0
        self.lag_total = {"sum": 0.0, "n": 0}
        self.last_lag: dict[str, float] = {}
        self._published_iteration = -1
        self._last_publish = time.monotonic()

    def publish(self) -> None:
        """Publish the current parameters (tagged with the iteration and global env steps)."""
        params = self.learner.parameters()
        self.publisher.publish(
            params, self.learner.iteration, copy=False, env_steps=self.global_env_steps
        )
        self._published_iteration = self.learner.iteration
        self._last_publish = time.monotonic()
        self._snapshot(self.learner.iteration, params)

    def _publish_newest(self) -> None:
        """Publish the current parameters unless they are out already.

        Called after an update (at most every PUBLISH_MIN_INTERVAL) and whenever the learner is
        starved: on-policy, agents acting with parameters older than the lag bound feed it only
        stale items, so without a publication then it would wait for them forever.
        """
        if self._published_iteration != self.learner.iteration:
            self.publish()

    def _snapshot(self, version: int, params: dict[str, np.ndarray]) -> None:
        """Remember published parameters, newest first out of memory last (see SNAPSHOT_BYTES)."""
        if version in self.snapshots:
            return
        self.snapshots[version] = params
        self._snapshot_bytes += sum(a.nbytes for a in params.values())
        while self._snapshot_bytes > SNAPSHOT_BYTES and len(self.snapshots) > 1:
            _, old = self.snapshots.popitem(last=False)
            self._snapshot_bytes -= sum(a.nbytes for a in old.values())

    # -- batches ---------------------------------------------------------------------------------

    def _check_batch(self, msg: Any) -> bool:
        """Whether a batch holds `n` items of this experiment's layout.

        A peer that joined the sampler's backend as a shard (issue 25) gets the learner's
        requests and may answer them: a batch of other keys or shapes went straight into
        `learn()`, whose KeyError ended the learner (restart after restart while the peer
        stayed), and its stats set the global env steps. Such a batch is a counted drop, its
        stats unread; the learner asks again.
        """
        arrays, n = msg.arrays, msg.meta.get("n")
        try:
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise LayoutError(f"a batch needs its item count, got {str(n)[:40]}")
            extra = {k: arrays[k] for k in PRIORITIZED_KEYS if k in arrays}
            for key, value in extra.items():
                if value.dtype != PRIORITIZED_KEYS[key] or value.shape != (n,):
                    raise LayoutError(f"{key!r}: got {value.dtype}{list(value.shape)}")
            self.layout.check({k: v for k, v in arrays.items() if k not in extra}, n)
        except LayoutError as exc:
            self.rejected_batches += 1
            if self.rejected_batches == 1 or self.rejected_batches % 100 == 0:
                log.warning("dropped a batch that is not of this experiment (%d so far): %s",
                            self.rejected_batches, exc)  # fmt: skip
            return False
        return True

    def _take_stats(self, meta: dict[str, Any]) -> None:
        """Counters a shard sent with its batch; the global env steps among them."""
        shard, stats = meta.get("shard"), meta.get("stats")
        if not isinstance(shard, int) or not isinstance(stats, dict):
            return
        self.shard_stats[shard] = stats
        steps = stats.get("steps")
        if isinstance(steps, int) and steps > self.global_env_steps:
            # every shard hears from every agent: the largest count is the most recent
            self.global_env_steps = steps

    def _check_lag(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """Measure the items' policy lag; drop those beyond the bound (on-policy). None: all."""
        versions = arrays.get("param_version")
        if versions is None:
            return arrays
        lags = self.learner.iteration - versions.astype(np.int64)
        if self.max_lag is not None:
            keep = lags <= self.max_lag  # on-policy: asked for when ready, learned at once
            if not keep.all():
                self.stale_dropped += int((~keep).sum())
                if not keep.any():
                    return None
                arrays = {k: v[keep] for k, v in arrays.items()}
                lags = lags[keep]
        self._lags.append(lags)
        self._lag_count += lags.size
        while self._lag_count > LAG_WINDOW and len(self._lags) > 1:
            self._lag_count -= self._lags.popleft().size
        self.lag_total["sum"] += float(lags.sum())
        self.lag_total["n"] += int(lags.size)
        return arrays

    def _lag_report(self) -> dict[str, float]:
        lags = np.concatenate(list(self._lags)) if self._lags else np.zeros(0, np.int64)
        self._lags.clear()
        self._lag_count = 0
        summary = lag_summary(lags)
        if summary:
            self.last_lag = summary
        return {f"lag/{k}": v for k, v in summary.items()}

    def replay_totals(self) -> dict[str, float]:
        """Inserted, sampled, overwritten and stale items over all shards, and the ratios."""
        totals = {
            key: float(sum(s.get(key, 0) for s in self.shard_stats.values()))
            for key in ("ins", "smp", "ovw", "stale", "blocked")
        }
        return {
            "inserted": totals["ins"],
            "sampled": totals["smp"],
            "overwritten": totals["ovw"],
            "stale_dropped": totals["stale"] + self.stale_dropped,
            "samples_per_insert": totals["smp"] / totals["ins"] if totals["ins"] else float("nan"),
            "target_samples_per_insert": self.target_spi,
            "insert_blocked_seconds": totals["blocked"],
            "shard_restarts": float(
                sum(int(s.get("restarts", 0)) for s in self.shard_stats.values())
            ),
        }

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
        still_waiting = Every(30.0)
        heartbeat = Heartbeat.from_env()  # the liveness probe's: see runtime.lifecycle
        while not self.stop.is_set():
            heartbeat.beat()  # each turn, waiting included; an update or checkpoint stuck: none
            self.publisher.check()  # a dead publisher thread ends the role (exit 1), waiting or not
            t0 = time.monotonic()
            msg = self.prefetcher.get(timeout=0.2)
            self.wait_seconds += time.monotonic() - t0
            if msg is None:
                self._publish_newest()
                if still_waiting():
                    log.info(
                        "still waiting for a batch from replay (%d requests in flight)",
                        self.prefetcher.in_flight,
                    )
                self._maybe_progress("waiting", "waiting for a batch from replay")
                continue
            if not self._check_batch(msg):
                self._publish_newest()
                continue
            if self.learner.iteration == self.resumed_from:
                log.info("first batch received; learning")
            self._take_stats(msg.meta)
            arrays = self._check_lag(msg.arrays)
            if arrays is None:  # every item beyond the policy-lag bound: as starved as no batch
                self._publish_newest()
                continue
            spend_budget(self.learner, self.budget, self.global_env_steps)
            stats = self.learner.learn(arrays)
            self.prefetcher.version = self.learner.iteration
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
            if time.monotonic() - self._last_publish >= PUBLISH_MIN_INTERVAL:
                self._publish_newest()
            self.checkpoint.save(
                self.learner.state_dict,
                self.learner.iteration,
                extra={"global_env_steps": self.global_env_steps},
            )
            if report():
                self._report_scalars(sums, count, iter_rate, item_rate)
                sums.clear()
                count = 0
            self._maybe_progress("running", "")
        if count:
            # the updates since the last report: a run shorter than one report period (or its
            # last partial period) would otherwise leave no learner scalars at all
            self._report_scalars(sums, count, iter_rate, item_rate)

    def _report_scalars(
        self, sums: dict[str, float], count: int, iter_rate: RateMeter, item_rate: RateMeter
    ) -> None:
        """The mean of `count` updates' stats, rates and replay's counters, to TensorBoard."""
        values = {k: v / count for k, v in sums.items()}
        replay = self.replay_totals()
        values.update(
            {
                "learner/iterations_per_s": iter_rate.rate(self.learner.iteration),
                "learner/items_per_s": item_rate.rate(self.items),
                "learner/prefetch_queue": self.prefetcher.qsize,
                "learner/iteration": self.learner.iteration,
                "learner/published_iteration": self._published_iteration,
                "learner/global_env_steps": self.global_env_steps,
                "learner/rejected_batches": self.rejected_batches + self.prefetcher.rejects.total,
                "checkpoint/skipped_saves": self.checkpoint.skipped,
                "checkpoint/set_aside": len(self.checkpoint.set_aside),
                **self._lag_report(),
                **{f"replay/{k}": v for k, v in replay.items()},
            }
        )
        self.report(values, self.global_env_steps)
        self.progress.update(
            rates={
                "iterations_per_s": values["learner/iterations_per_s"],
                "items_per_s": values["learner/items_per_s"],
            }
        )

    def _maybe_progress(self, state: str, message: str) -> None:
        if not self.progress.due():
            return
        self.eval_return = self._read_evals()
        replay = self.replay_totals()
        restarted = int(replay["shard_restarts"])
        if restarted and not message:
            message = f"replay shards restarted {restarted} time(s) and started empty"
        lag_n = self.lag_total["n"]
        self.progress.update(
            iteration=self.learner.iteration,
            param_version=self.publisher.info.iteration if self.publisher.info else -1,
            last_return=self.eval_return,
            extra={
                "prefetch_queue": self.prefetcher.qsize,
                "sample_requests_in_flight": self.prefetcher.in_flight,
                "batches_received": self.prefetcher.received,
                "batches_rejected": self.rejected_batches + self.prefetcher.rejects.total,
                "sample_wait_seconds": round(self.wait_seconds, 3),
                "resumed_from_iteration": self.resumed_from,
                "global_env_steps": self.global_env_steps,
                "checkpoint": {
                    "skipped_saves": self.checkpoint.skipped,
                    "last_error": self.checkpoint.last_error,
                    "set_aside": self.checkpoint.set_aside,
                },
                "policy_lag": {
                    **self.last_lag,
                    "mean_all": self.lag_total["sum"] / lag_n if lag_n else None,
                    "bound": self.max_lag,
                },
                "replay": {k: _finite_or_none(v) for k, v in replay.items()},
            },
        )
        self.progress.write(state, message)

    def _read_evals(self) -> float | None:
        """Mean of the evals' newest returns, from their progress files (if visible).

        Each new evaluation (an evaluator lists its latest, runtime/eval.py) of a version whose
        parameters are still in memory is a best policy candidate (see the module docstring).
        """
        returns = []
        for path in (self.ctx.experiment_dir / "status").glob("evals-*.json"):
            data = read_status(path)
            if data is None:
                continue
            value = data.get("last_return")
            if isinstance(value, (int, float)):
                returns.append(float(value))
            for rec in new_evaluations(data, self.eval_seen.get(path.stem, -1)):
                self.eval_seen[path.stem] = rec["evaluation"]
                if isinstance(rec.get("param_version"), int):
                    self._keep_if_best(rec["param_version"], rec["return"])
        return sum(returns) / len(returns) if returns else self.eval_return

    def _keep_if_best(self, version: int, score: float) -> None:
        if self.best.keep_best <= 0:
            return
        best = self.best.best()
        worst = best[self.best.keep_best - 1].score if len(best) >= self.best.keep_best else None
        if worst is not None and score <= worst:  # best() holds scored checkpoints only
            return
        params = self.snapshots.get(version)
        if params is None:
            log.info("no parameters of version %d in memory for its score %.1f", version, score)
            return
        import torch

        state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
        try:
            self.best.save(state, version, score=score, extra={"parameter_version": version})
        except OSError as exc:  # a full disk: the next better score is saved once there is room
            log.warning("best policy of version %d (score %.1f) not saved: %s", version, score, exc)

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
                    extra={"global_env_steps": self.global_env_steps},
                    force=True,
                )
                if path is None:
                    log.error("last checkpoint not written: %s", self.checkpoint.last_error)
                else:
                    log.info("checkpoint written: %s", path)
        finally:
            self.progress.update(iteration=self.learner.iteration)
            self.progress.write("stopped", "")
            self.publisher.close()
            super().close()


def _finite_or_none(value: float) -> float | None:
    return value if np.isfinite(value) else None
