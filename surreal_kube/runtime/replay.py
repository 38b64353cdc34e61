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
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import zmq

from surreal_kube.comm.experience import ExperienceReceiver
from surreal_kube.comm.sampling import SamplerBroker, SampleServer
from surreal_kube.experiment.topology import collector
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.lifecycle import Every, RateMeter, StopFlag
from surreal_kube.runtime.ring import BatchStore, ColumnarRing, ItemBufferAdapter, LayoutError

log = logging.getLogger(__name__)

CREDITS_PER_SHARD = 4
"""Requests a shard accepts at once: several, so batches stream while others travel."""
DRAIN_PER_LOOP = 64
REANNOUNCE_SECONDS = 3.0


def make_store(kind: str, capacity: int, *, alpha: float, beta: float, seed: int) -> BatchStore:
    """The storage of one shard for `replay.kind`."""
    if kind in ("fifo", "uniform"):
        return ColumnarRing(capacity, kind, seed=seed)  # type: ignore[arg-type]
    if kind == "prioritized":
        from surreal_kube.rl.replay import PrioritizedReplay

        return ItemBufferAdapter(PrioritizedReplay(capacity, alpha=alpha, beta=beta, seed=seed))
    raise ValueError(f"unknown replay kind {kind!r}")


class ReplayBalancer(RoleBase):
    """Role `replay`: the sampling broker."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        self.broker = SamplerBroker(ctx.bind("replay-sampler"), ctx.bind("replay-sampler-backend"))
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
                    }
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
        spec = ctx.spec.replay
        self.start_sampling = spec.start_sampling
        self.store = store or make_store(
            spec.kind,
            spec.capacity,
            alpha=spec.alpha,
            beta=spec.beta,
            seed=ctx.spec.session.seed + 1000 + ctx.index,
        )
        self.receiver = ExperienceReceiver(ctx.bind(collector(ctx.index)))
        # Wait (briefly) for the load balancer, so the log says whether it is reachable.
        self.server = SampleServer(
            ctx.addr("replay-sampler-backend"), index=ctx.index, wait_connected=5.0
        )
        self.connected = self.server.connected
        self.pending: deque[tuple[bytes, int, dict[str, Any]]] = deque()
        self.credits_out = 0
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

    def step(self, timeout_ms: int = 100) -> None:
        """One turn of the loop: take experience, take requests, serve, hand out credits."""
        events = dict(self._poller.poll(timeout_ms))
        if self.receiver.sock in events:
            for _ in range(DRAIN_PER_LOOP):
                got = self.receiver.recv()
                if got is None:
                    break
                try:
                    self.store.add_batch(*got)
                except (LayoutError, ValueError) as exc:
                    self.layout_errors += 1
                    if self.layout_errors == 1 or self.layout_errors % 1000 == 0:
                        log.warning("dropping experience that does not fit the store: %s", exc)
        if self.server.sock in events:
            while (req := self.server.recv_request()) is not None:
                self.pending.append(req)
                self.credits_out = max(0, self.credits_out - 1)
                self._last_request = time.monotonic()
            self._apply_priorities()
        while self.pending and self.ready(self.pending[0][1]):
            client, size, meta = self.pending.popleft()
            batch = self.store.sample(size)
            self.server.reply(
                client, {"id": meta.get("id"), "shard": self.ctx.index, "n": size}, batch
            )
        if self.credits_out and time.monotonic() - self._last_request > REANNOUNCE_SECONDS:
            # The broker may have restarted and forgotten our credits: announce them again (it
            # caps credits per shard, so repeating them is harmless).
            self.credits_out = 0
            self._last_request = time.monotonic()
        if self.ready() and self.credits_out + len(self.pending) < CREDITS_PER_SHARD:
            n = CREDITS_PER_SHARD - self.credits_out - len(self.pending)
            self.server.give_credit(n)
            self.credits_out += n

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
        report, items_rate, served_rate = Every(self._period), RateMeter(), RateMeter()
        announced = False
        while not self.stop.is_set():
            self.step()
            if not announced and self.ready():
                log.info("start condition met (%d items): serving samples", len(self.store))
                announced = True
            if report():
                self.report(
                    {
                        "replay/items_in_per_s": items_rate.rate(self.receiver.items),
                        "replay/batches_out_per_s": served_rate.rate(self.server.served),
                        "replay/size": len(self.store),
                        "replay/pending_requests": len(self.pending),
                        "replay/priority_updates": self.priority_updates,
                        "replay/rejected_messages": self.receiver.rejects.total
                        + self.server.rejects.total
                        + self.layout_errors,
                    },
                    self.receiver.items,
                )

    def close(self) -> None:
        """Close both sockets."""
        self.receiver.close()
        self.server.close()
        super().close()
