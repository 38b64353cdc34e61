"""The replay service: a load balancer (role `replay`) in front of N shards (role `replay-shard`).

    agents --PUSH--> replay-collector-<i> (each shard binds its own)
    learner --replay-sampler--> [replay: SamplerBroker] <--sampler-backend-- shards

Experience goes straight to the shards: every agent's PUSH socket connects to every shard's
collector and spreads its messages round-robin over them (skipping a shard whose queue is full).
A forwarding hop measured at half a bare pipe's throughput before any of our work (bench/comm.py),
and brokering adds nothing to a stream of independent batches. Sampling does need a broker: the
load balancer binds the sampler and its backend, shards connect to the backend and ask for
requests only when they can serve them (credits), so the start condition
(`replay.startSampling` items) is evaluated by each shard, without polling, and shards can be
added without the load balancer knowing their addresses.

Each shard holds the ratio of samples to inserts (`replay.samplesPerInsert`, with
`replay.rateTolerance`; defaults per algorithm, see `ExperimentSpec.rate_limit`): while
inserts are ahead, the shard stops reading its collector, the agents' sends wait (and the agents
say so in their status); while samples are ahead, requests wait. On-policy shards also drop
experience older than the policy-lag bound a request names (`algorithm.maxPolicyLag`). Every
reply carries the shard's counters, so the learner reports inserted, sampled, overwritten and
stale items, the achieved ratio and the global env steps. A restarted shard starts empty (replay
is not checkpointed) and says so in its log, its status file and its counters.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, TypeGuard

import zmq

from surreal_kube.comm.experience import ExperienceReceiver, on_policy_pipe
from surreal_kube.comm.sampling import DEFAULT_REQUEST_TTL, SamplerBroker, SampleServer
from surreal_kube.experiment.topology import collector
from surreal_kube.rl.replay import BatchStore, ColumnarRing, ItemBufferAdapter
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.layout import (
    PARAM_VERSION,
    ItemLayout,
    LayoutError,
    batch_bytes,
    experience_bytes,
    item_layout,
    message_bytes,
    request_bytes,
)
from surreal_kube.runtime.lifecycle import Every, RateMeter, StopFlag
from surreal_kube.runtime.status import ProgressFile

log = logging.getLogger(__name__)

CREDITS_PER_SHARD = 4
"""Requests a shard accepts at once: several, so batches stream while others travel."""
MAX_PENDING_PER_SHARD = 64
"""Requests a shard keeps queued (it asks for CREDITS_PER_SHARD; more came from elsewhere)."""
MAX_REQUEST_TTL = 60.0
DRAIN_PER_LOOP = 64
REANNOUNCE_SECONDS = 3.0


def make_store(
    kind: str, capacity: int, layout: ItemLayout, *, alpha: float, beta: float, seed: int
) -> BatchStore:
    """The storage of one shard for `replay.kind`, holding items of `layout` only."""
    if kind in ("fifo", "uniform"):
        return ColumnarRing(capacity, layout, kind, seed=seed)  # type: ignore[arg-type]
    if kind == "prioritized":
        from surreal_kube.rl.replay import PrioritizedReplay

        buffer = PrioritizedReplay(capacity, alpha=alpha, beta=beta, seed=seed)
        return ItemBufferAdapter(buffer, layout)
    raise ValueError(f"unknown replay kind {kind!r}")


class ReplayBalancer(RoleBase):
    """Role `replay`: the sampling broker."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        from surreal_kube.envs import env_spaces

        layout = item_layout(ctx.spec, *env_spaces(ctx.spec.env))
        self.broker = SamplerBroker(
            ctx.bind("replay-sampler"),
            ctx.bind("replay-sampler-backend"),
            request_bytes=request_bytes(ctx.spec),
            batch_bytes=batch_bytes(ctx.spec, layout),
        )
        self._period = ctx.spec.session.metrics.learner_interval_seconds

    def run(self) -> None:
        """Route sample requests until stopped."""
        log.info(
            "replay load balancer: sampler %s <- %s",
            self.ctx.bind("replay-sampler"),
            self.ctx.bind("replay-sampler-backend"),
        )
        report, rate = Every(self._period), RateMeter()
        while not self.stop.is_set():
            self.broker.poll(100)
            if report():
                b = self.broker
                self.report(
                    {
                        "replay_lb/requests_per_s": rate.rate(b.requests),
                        "replay_lb/pending_requests": b.pending,
                        "replay_lb/ready_credits": b.credits,
                        "replay_lb/shards_seen": len(b.shards_seen),
                        "replay_lb/expired_requests": b.expired,
                        "replay_lb/rejected_messages": b.rejects.total,
                    },
                    b.env_steps,
                )

    def close(self) -> None:
        """Close the broker."""
        self.broker.close()
        super().close()


class ReplayShard(RoleBase):
    """Role `replay-shard`: stores experience, answers sample requests once ready."""

    def __init__(
        self, ctx: RoleContext, stop: StopFlag | None = None, *, store: BatchStore | None = None
    ) -> None:
        super().__init__(ctx, stop)
        from surreal_kube.rl.replay import SampleToInsertRatio  # numpy only: no torch here

        spec = ctx.spec.replay
        self.start_sampling = spec.start_sampling
        spi, tolerance, center = ctx.spec.rate_limit()
        self.limiter = SampleToInsertRatio(
            spi, spec.start_sampling, tolerance, ctx.spec.algorithm.batch_size, center=center
        )
        self.stale_dropped = 0
        algorithm = ctx.spec.algorithm
        self.max_lag: int | None = algorithm.max_policy_lag if algorithm.name == "ppo" else None
        """On-policy: the policy-lag bound items are held to (see `_drop_stale`)."""
        self.insert_blocked_seconds = 0.0
        self._blocked_since: float | None = None
        self.progress = ProgressFile(ctx.experiment_dir, ctx.experiment, ctx.process, ctx.role)
        self.restarts = int(self.progress.data["restarts"])
        if self.restarts:
            log.warning(
                "replay shard %d restarted (%d time(s)) and starts empty: replay is not "
                "checkpointed, so sampling waits for %d items again",
                ctx.index,
                self.restarts,
                spec.start_sampling,
            )
        from surreal_kube.envs import env_spaces

        # what an item is, from the environment's spaces: never from the first message
        self.layout = item_layout(ctx.spec, *env_spaces(ctx.spec.env))
        self.store = store or make_store(
            spec.kind,
            spec.capacity,
            self.layout,
            alpha=spec.alpha,
            beta=spec.beta,
            seed=ctx.spec.session.seed + 1000 + ctx.index,
        )
        self.receiver = ExperienceReceiver(
            ctx.bind(collector(ctx.index)),
            max_bytes=experience_bytes(ctx.spec, self.layout),
            accept=self._fits,
            **(on_policy_pipe(message_bytes(ctx.spec, self.layout)) if spec.kind == "fifo" else {}),
        )
        # Wait (briefly) for the load balancer, so the log says whether it is reachable.
        self.server = SampleServer(
            ctx.addr("replay-sampler-backend"),
            index=ctx.index,
            wait_connected=5.0,
            max_bytes=request_bytes(ctx.spec),
        )
        self.connected = self.server.connected
        self.pending: deque[tuple[bytes, int, dict[str, Any], float]] = deque()
        """Requests taken: (client, batch size clamped to capacity, meta, deadline)."""
        self.credits_out = 0
        self.expired_requests = 0
        self.newest_version = -1
        """The newest `param_version` of an item stored: a request's version is clamped to it."""
        self.layout_errors = 0
        self.priority_updates = 0
        self._last_request = time.monotonic()
        self._poller = zmq.Poller()
        self._poller.register(self.receiver.sock, zmq.POLLIN)
        self._poller.register(self.server.sock, zmq.POLLIN)
        self._period = ctx.spec.session.metrics.learner_interval_seconds

    def ready(self, batch_size: int = 0) -> bool:
        """The start condition: enough items to serve (FIFO also needs a whole batch)."""
        return len(self.store) >= max(self.start_sampling, batch_size, 1)

    def can_serve(self, batch_size: int) -> bool:
        """Start condition and rate limiter both allow a batch of `batch_size` now."""
        return self.ready(batch_size) and self.limiter.can_sample(batch_size)

    @property
    def overwritten(self) -> int:
        """Items the store dropped unsampled because it was full."""
        return int(getattr(self.store, "overwritten", 0))

    def stats(self) -> dict[str, int | float]:
        """The counters every reply carries (see `comm.sampling`)."""
        return {
            "ins": self.limiter.inserted,
            "smp": self.limiter.sampled,
            "ovw": self.overwritten,
            "stale": self.stale_dropped,
            "steps": self.receiver.env_steps,
            "restarts": self.restarts,
            "blocked": round(self.insert_blocked_seconds, 3),
        }

    def _insert_open(self) -> bool:
        """Whether the limiter lets experience in; tracks the time it held inserts back."""
        open_ = self.limiter.can_insert(1)
        now = time.monotonic()
        if open_ and self._blocked_since is not None:
            self.insert_blocked_seconds += now - self._blocked_since
            self._blocked_since = None
        elif not open_ and self._blocked_since is None:
            self._blocked_since = now
        return open_

    def _fits(self, arrays: dict[str, Any], count: int) -> bool:
        """Whether a message's items are of this store's layout; those that are not are
        counted and dropped before the receiver counts their sender's env steps."""
        try:
            self.layout.check(arrays, count)
        except LayoutError as exc:
            self._layout_error(exc)
            return False
        return True

    def _layout_error(self, exc: Exception) -> None:
        self.layout_errors += 1
        if self.layout_errors == 1 or self.layout_errors % 1000 == 0:
            log.warning(
                "dropping experience that does not fit the store (%d so far): %s",
                self.layout_errors,
                exc,
            )

    def _take_experience(self) -> None:
        for _ in range(DRAIN_PER_LOOP):
            if not self._insert_open():
                return
            got = self.receiver.recv()
            if got is None:
                return
            before = self.overwritten
            try:
                self.store.add_batch(*got)
            except (LayoutError, ValueError) as exc:
                self._layout_error(exc)
                continue
            versions = got[0].get(PARAM_VERSION)
            if versions is not None and versions.size:
                self.newest_version = max(self.newest_version, int(versions.max()))
            self.limiter.insert(got[1])
            if self.ctx.spec.replay.kind == "fifo":
                # what a FIFO overwrites was never sampled: it must not hold inserts back
                self.limiter.forget(self.overwritten - before)

    def _drop_stale(self, meta: dict[str, Any]) -> None:
        """On-policy: drop items more than the policy-lag bound older than the request's version.

        The bound is the shard's own (`algorithm.maxPolicyLag`), not the request's, and the
        version counts as at most `bound` past the newest one stored, so a request never drops
        the newest items: one naming a version from the far future, with `max_lag` 0, emptied
        every shard it reached. A learner further ahead than that gets the newest items and
        drops them itself (it checks the lag of every item), counted as stale.
        """
        version = meta.get("version")
        discard = getattr(self.store, "discard_oldest_below", None)
        if self.max_lag is None or not _is_int(version) or discard is None:
            return
        version = min(version, self.newest_version + self.max_lag)
        n = discard(PARAM_VERSION, version - self.max_lag)
        if n:
            self.stale_dropped += n
            self.limiter.forget(n)

    def step(self, timeout_ms: int = 100) -> None:
        """One turn of the loop: take experience, take requests, serve, hand out credits."""
        # While the limiter holds inserts back, the collector is not polled (it would stay
        # readable and spin the loop); its queue fills and the agents' sends wait.
        self._poller.modify(self.receiver.sock, zmq.POLLIN if self._insert_open() else 0)
        events = dict(self._poller.poll(timeout_ms))
        if self.receiver.sock in events:
            self._take_experience()
        if self.server.sock in events:
            while (req := self.server.recv_request()) is not None:
                self._take_request(*req)
            self._apply_priorities()
        now = time.monotonic()
        waiting: deque[tuple[bytes, int, dict[str, Any], float]] = deque()
        while self.pending:
            request = self.pending.popleft()
            client, size, meta, deadline = request
            if deadline < now:  # its client re-issued it long ago: never serve it now
                self.expired_requests += 1
                continue
            self._drop_stale(meta)
            if not self.can_serve(size):
                # it waits (for items, or the limiter) without holding back the requests
                # behind it: one larger than the shard will hold for a while (a stranger's)
                # starved the learner until it expired
                waiting.append(request)
                continue
            batch = self.store.sample(size)
            self.limiter.sample(size)
            self.server.reply(
                client,
                {"id": meta.get("id"), "shard": self.ctx.index, "n": size, "stats": self.stats()},
                batch,
            )
        self.pending = waiting
        if self.credits_out and time.monotonic() - self._last_request > REANNOUNCE_SECONDS:
            # The broker may have restarted and forgotten our credits: announce them again (it
            # caps credits per shard, so repeating them is harmless).
            self.credits_out = 0
            self._last_request = time.monotonic()
        if self.ready() and self.credits_out + len(self.pending) < CREDITS_PER_SHARD:
            n = CREDITS_PER_SHARD - self.credits_out - len(self.pending)
            self.server.give_credit(n)
            self.credits_out += n

    def _take_request(self, client: bytes, size: int, meta: dict[str, Any]) -> None:
        """Queue a request: its batch clamped to what the store can ever hold (a larger one
        waited at the head of the queue forever, blocking every request behind it), its
        time-to-live to the broker's bounds."""
        ttl = meta.get("ttl", DEFAULT_REQUEST_TTL)
        if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or not ttl > 0:
            ttl = DEFAULT_REQUEST_TTL
        now = time.monotonic()
        size = min(size, self.ctx.spec.replay.capacity)
        if len(self.pending) >= MAX_PENDING_PER_SHARD:  # credits bound them; a flood does not
            self.pending.popleft()
            self.expired_requests += 1
        self.pending.append((client, size, meta, now + min(float(ttl), MAX_REQUEST_TTL)))
        self.credits_out = max(0, self.credits_out - 1)
        self._last_request = now

    def _apply_priorities(self) -> None:
        update = getattr(self.store, "update_priorities", None)
        while self.server.priority_updates:
            indices, priorities = self.server.priority_updates.popleft()
            if update is None:
                continue  # fifo and uniform stores keep no priorities
            try:
                update(indices, priorities)
                self.priority_updates += 1
            except (IndexError, ValueError) as exc:
                self.layout_errors += 1
                log.warning("dropping a priority update: %s", exc)

    def run(self) -> None:
        """Loop until stopped."""
        if not self.connected:
            log.warning("replay load balancer not reachable yet; waiting for it")
        log.info(
            "replay shard %d: experience on %s, %s buffer of %d, serving from %d items",
            self.ctx.index,
            self.receiver.addr,
            self.ctx.spec.replay.kind,
            self.ctx.spec.replay.capacity,
            self.start_sampling,
        )
        if self.limiter.enabled:
            log.info(
                "rate limiter: %g samples per insert, tolerance %g items",
                self.limiter.samples_per_insert,
                self.limiter.tolerance,
            )
        report, items_rate, served_rate = Every(self._period), RateMeter(), RateMeter()
        announced = False
        self.progress.write("running", "started empty after a restart" if self.restarts else "")
        while not self.stop.is_set():
            self.step()
            if not announced and self.ready():
                log.info("start condition met (%d items): serving samples", len(self.store))
                announced = True
            if report():
                achieved = self.limiter.achieved
                self.report(
                    {
                        "replay/items_in_per_s": items_rate.rate(self.receiver.items),
                        "replay/batches_out_per_s": served_rate.rate(self.server.served),
                        "replay/size": len(self.store),
                        "replay/pending_requests": len(self.pending),
                        "replay/expired_requests": self.expired_requests,
                        "replay/layout_errors": self.layout_errors,
                        "replay/priority_updates": self.priority_updates,
                        "replay/rejected_messages": self.receiver.rejects.total
                        + self.server.rejects.total
                        + self.layout_errors,
                        "replay/overwritten": self.overwritten,
                        "replay/stale_dropped": self.stale_dropped,
                        "replay/samples_per_insert": achieved,
                        "replay/insert_blocked_seconds": self.insert_blocked_seconds,
                        "replay/restarts": self.restarts,
                    },
                    self.receiver.env_steps or self.receiver.items,
                )
            if self.progress.due():
                self.progress.update(extra=self.stats())
                self.progress.write()

    def close(self) -> None:
        """Close both sockets."""
        self.progress.update(extra=self.stats())
        self.progress.write("stopped")
        self.receiver.close()
        self.server.close()
        super().close()


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
